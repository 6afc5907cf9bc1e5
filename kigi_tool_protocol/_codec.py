"""JSON and MessagePack codecs: encoders and typed decoders built once, reused.

The JSON bytes are exactly what the Rust side's serde_json writes: compact, keys
in declaration order, optionals omitted, only ``"``, ``\\`` and U+0000-U+001F
escaped. Decoding checks the frame limit before parsing and translates every
msgspec error into :class:`DecodeError` carrying the JSON path.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from ._errors import DecodeError, FrameTooLargeError
from ._limits import MAX_FRAME_BYTES_CEILING

__all__ = ("JsonCodec", "MsgpackCodec", "json_codec", "msgpack_codec")

T = TypeVar("T")

Buffer = bytes | bytearray | memoryview | str

# msgspec reports validation errors as "<what was wrong> - at `$.a.b`".
_AT_PATH = re.compile(r"^(?P<reason>.*?) - at `(?P<path>\$[^`]*)`$", re.DOTALL)


def _translate(exc: msgspec.MsgspecError) -> DecodeError:
    text = str(exc)
    match = _AT_PATH.match(text)
    if match is None:
        return DecodeError(text)
    return DecodeError(match["reason"], match["path"])


def _check_size(data: Buffer, max_bytes: int) -> None:
    size = len(data.encode()) if isinstance(data, str) else memoryview(data).nbytes
    if size > max_bytes:
        raise FrameTooLargeError(size, max_bytes)


class JsonCodec:
    """Encode wire values to serde-compatible JSON bytes; decode them strictly."""

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj`` to compact JSON bytes.

        Raises:
            WireError: ``obj`` holds a value JSON cannot carry.
        """
        try:
            return self._encoder.encode(obj)
        except (msgspec.EncodeError, TypeError, OverflowError) as exc:
            from ._errors import WireError

            raise WireError(f"cannot encode {type(obj).__name__}: {exc}") from exc

    def decode(self, data: Buffer, type: type[T], *, max_bytes: int = MAX_FRAME_BYTES_CEILING) -> T:
        """Decode ``data`` as ``type``.

        Raises:
            FrameTooLargeError: ``data`` is longer than ``max_bytes``; it is not parsed.
            DecodeError: ``data`` is not valid JSON for ``type``; carries the JSON path.
        """
        _check_size(data, max_bytes)
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = self._decoders[type] = msgspec.json.Decoder(type)
        try:
            return decoder.decode(data)  # type: ignore[no-any-return]
        except msgspec.MsgspecError as exc:
            raise _translate(exc) from exc


class MsgpackCodec:
    """The same surface as :class:`JsonCodec`, over MessagePack."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj`` to MessagePack bytes.

        Raises:
            WireError: ``obj`` holds a value MessagePack cannot carry.
        """
        try:
            return self._encoder.encode(obj)
        except (msgspec.EncodeError, TypeError, OverflowError) as exc:
            from ._errors import WireError

            raise WireError(f"cannot encode {type(obj).__name__}: {exc}") from exc

    def decode(self, data: Buffer, type: type[T], *, max_bytes: int = MAX_FRAME_BYTES_CEILING) -> T:
        """Decode ``data`` as ``type``.

        Raises:
            FrameTooLargeError: ``data`` is longer than ``max_bytes``; it is not parsed.
            DecodeError: ``data`` is not valid MessagePack for ``type``.
        """
        if isinstance(data, str):
            raise DecodeError("MessagePack input must be bytes, not str")
        _check_size(data, max_bytes)
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = self._decoders[type] = msgspec.msgpack.Decoder(type)
        try:
            return decoder.decode(data)  # type: ignore[no-any-return]
        except msgspec.MsgspecError as exc:
            raise _translate(exc) from exc


#: The shared codecs; build nothing per call.
json_codec = JsonCodec()
msgpack_codec = MsgpackCodec()
