"""Wire types of the kigi tool protocol, byte-compatible with the Rust crates.

msgspec Structs, a JSON codec whose bytes match serde_json's, a MessagePack codec
with the same surface, frame-size limits and identifier validation. No I/O.
"""

from ._capabilities import ToolCapabilities, ToolScope
from ._codec import decode_message, json_codec, msgpack_codec
from ._errors import DecodeError, IdentifierError, WireError
from ._jsonrpc import JsonRpcError, JsonRpcNotification, JsonRpcRequest, JsonRpcResponse
from ._partial_result import PartialResultPayload, StreamingSpec
from ._progress import CustomProgress, TextProgress, ToolProgress
from ._progress_line import encode_progress_line
from ._tool_call import ToolCallParams, ToolCallProgressFrame, ToolCallResult, progress_to_frame
from ._tool_error import ToolErrorWire
from ._version import installed_version as _installed_version

#: The installed distribution's version (from its metadata).
__version__: str


def __getattr__(name: str) -> str:
    # ``__version__`` is read from the distribution's metadata when first asked
    # for, not on import (see ``_version``).
    if name == "__version__":
        value = _installed_version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "CustomProgress",
    "DecodeError",
    "IdentifierError",
    "JsonRpcError",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "PartialResultPayload",
    "StreamingSpec",
    "TextProgress",
    "ToolCallParams",
    "ToolCallProgressFrame",
    "ToolCallResult",
    "ToolCapabilities",
    "ToolErrorWire",
    "ToolProgress",
    "ToolScope",
    "WireError",
    "decode_message",
    "encode_progress_line",
    "json_codec",
    "msgpack_codec",
    "progress_to_frame",
)
