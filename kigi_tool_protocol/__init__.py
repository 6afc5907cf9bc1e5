"""Wire types of the kigi tool protocol, byte-compatible with the Rust crates.

msgspec Structs, a JSON codec whose bytes match serde_json's, a MessagePack codec
with the same surface, frame-size limits and identifier validation. No I/O.
"""

from ._codec import JsonCodec, MsgpackCodec, json_codec, msgpack_codec
from ._errors import DecodeError, FrameTooLargeError, IdentifierError, WireError
from ._limits import DEFAULT_MAX_DELTA_BYTES, DEFAULT_TIMEOUT_MS, MAX_FRAME_BYTES_CEILING
from ._progress import ContentProgress, CustomProgress, TextProgress, ToolProgress
from ._streaming import PartialResultPayload, StreamingSpec

__all__ = (
    "DEFAULT_MAX_DELTA_BYTES",
    "DEFAULT_TIMEOUT_MS",
    "MAX_FRAME_BYTES_CEILING",
    "ContentProgress",
    "CustomProgress",
    "DecodeError",
    "FrameTooLargeError",
    "IdentifierError",
    "JsonCodec",
    "MsgpackCodec",
    "PartialResultPayload",
    "StreamingSpec",
    "TextProgress",
    "ToolProgress",
    "WireError",
    "json_codec",
    "msgpack_codec",
)
