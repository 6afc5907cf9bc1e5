"""JSON and MessagePack codecs: encoders and typed decoders built once, reused.

The JSON bytes are exactly what the Rust side's serde_json writes: compact, keys
in declaration order, optionals omitted, only ``"``, ``\\`` and U+0000-U+001F
escaped (``/``, DEL and all non-ASCII text raw). Decoding checks the frame limit
before parsing, and translates every msgspec error, and the ``RecursionError``
of a document nested deeper than the interpreter's recursion limit, into
:class:`DecodeError` carrying the JSON path.

JSON-RPC envelope types (``JsonRpcRequest[...]`` and friends) are decoded in a
union with a sentinel struct, which makes the ``jsonrpc`` tag mandatory; see
``_jsonrpc.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, Union, get_origin, overload

import msgspec
from msgspec import UNSET, Raw, UnsetType

from ._errors import DecodeError, FrameTooLargeError, WireError
from ._jsonrpc import (
    ENVELOPE_TYPES,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
    _Unversioned,
)
from ._limits import MAX_FRAME_BYTES_CEILING

__all__ = ("JsonCodec", "MsgpackCodec", "convert", "decode_message", "json_codec", "msgpack_codec")

T = TypeVar("T")

Buffer = bytes | bytearray | memoryview | str

# msgspec reports validation errors as "<what was wrong> - at `$.a.b`".
_AT_PATH: Final = re.compile(r"^(?P<reason>.*?) - at `(?P<path>\$[^`]*)`$", re.DOTALL)

#: What a too-deep document is reported as. msgspec recurses once per nesting
#: level and stops at the interpreter's recursion limit (about 1000 levels by
#: default), well past serde_json's 128, so no honest frame gets near it.
_TOO_DEEP: Final = "document is nested too deeply to decode"


def _translate(exc: msgspec.MsgspecError) -> DecodeError:
    text = str(exc)
    match = _AT_PATH.match(text)
    if match is None:
        return DecodeError(text)
    return DecodeError(match["reason"], match["path"])


def _frame_size(data: Buffer) -> int:
    if isinstance(data, str):
        return len(data.encode("utf-8", "surrogatepass"))
    if isinstance(data, bytes):
        return len(data)
    return memoryview(data).nbytes


def _check_size(data: Buffer, max_bytes: int) -> None:
    # A str needs at least one byte per character, and at most four.
    if isinstance(data, str) and len(data) * 4 <= max_bytes:
        return
    size = _frame_size(data)
    if size > max_bytes:
        raise FrameTooLargeError(size, max_bytes)


def _decode_type(type: Any) -> Any:
    """The type actually handed to msgspec for ``type``."""
    if (get_origin(type) or type) in ENVELOPE_TYPES:
        return Union[type, _Unversioned]  # noqa: UP007 (a runtime union of type objects)
    return type


class _Probe(msgspec.Struct, frozen=True):
    """Which keys a JSON-RPC message has; their values are skipped, not parsed."""

    id: Raw | UnsetType = UNSET
    method: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class _Codec:
    """What the two codecs share: the decoder cache, the error translation, and
    :meth:`decode_message`."""

    def __init__(
        self,
        encoder: msgspec.json.Encoder | msgspec.msgpack.Encoder,
        decoder_factory: Callable[[Any], Any],
    ) -> None:
        self._encoder = encoder
        self._decoder_factory = decoder_factory
        self._decoders: dict[Any, Any] = {}

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj``.

        Raises:
            WireError: ``obj`` holds a value the format cannot carry (an unsupported
                type, a str with a lone surrogate, an integer past u64, a cycle).
        """
        try:
            return self._encoder.encode(obj)
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise WireError(f"cannot encode {type(obj).__name__}: {exc}") from exc

    def _decoder(self, type: Any) -> Any:
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = self._decoders[type] = self._decoder_factory(_decode_type(type))
        return decoder

    def _decode_unchecked(self, data: Buffer, type: Any) -> Any:
        try:
            return self._decoder(type).decode(data)
        except msgspec.MsgspecError as exc:
            raise _translate(exc) from exc
        except RecursionError as exc:
            raise DecodeError(_TOO_DEEP) from exc

    def _check_input(self, data: Buffer, max_bytes: int) -> None:
        _check_size(data, max_bytes)

    @overload
    def decode(self, data: Buffer, type: type[T], *, max_bytes: int = ...) -> T: ...
    @overload
    def decode(self, data: Buffer, type: Any = ..., *, max_bytes: int = ...) -> Any: ...
    def decode(
        self, data: Buffer, type: Any = Any, *, max_bytes: int = MAX_FRAME_BYTES_CEILING
    ) -> Any:
        """Decode ``data`` as ``type`` (a wire type, a union such as ``ToolProgress``,
        a parametrised envelope such as ``JsonRpcRequest[ToolCallParams]``, or
        ``Any`` for plain JSON values).

        Raises:
            FrameTooLargeError: ``data`` is longer than ``max_bytes``; it is not parsed.
            DecodeError: ``data`` is malformed or not a valid ``type``; carries the
                JSON path of the offending value.
        """
        self._check_input(data, max_bytes)
        return self._decode_unchecked(data, type)

    def decode_message(
        self,
        data: Buffer,
        *,
        max_bytes: int = MAX_FRAME_BYTES_CEILING,
        params: Any = Any,
        result: Any = Any,
    ) -> JsonRpcMessage:
        """Decode any incoming JSON-RPC message.

        A message with a ``result`` or ``error`` key is a :class:`JsonRpcResponse`;
        otherwise one with an ``id`` is a :class:`JsonRpcRequest`; otherwise it is a
        :class:`JsonRpcNotification`. ``params`` is the type to decode params as, or a
        mapping from method string to type (methods it lacks get ``Any``); ``result``
        is the type to decode a response's result as. Pass ``msgspec.Raw`` to defer
        decoding and call :meth:`decode` on it later.

        Raises:
            FrameTooLargeError: ``data`` is longer than ``max_bytes``; it is not parsed.
            DecodeError: ``data`` is not a valid message of the kind its keys say.
        """
        self._check_input(data, max_bytes)
        probe: _Probe = self._decode_unchecked(data, _Probe)
        if probe.result is not UNSET or probe.error is not UNSET:
            return self._decode_unchecked(data, JsonRpcResponse[result])  # type: ignore[no-any-return]
        if isinstance(params, Mapping):
            method = UNSET if probe.method is UNSET else self._decode_unchecked(probe.method, Any)
            params = params.get(method, Any) if isinstance(method, str) else Any
        if probe.id is not UNSET:
            return self._decode_unchecked(data, JsonRpcRequest[params])  # type: ignore[no-any-return]
        return self._decode_unchecked(data, JsonRpcNotification[params])  # type: ignore[no-any-return]


class JsonCodec(_Codec):
    """Encode wire values to serde-compatible JSON bytes; decode them strictly."""

    def __init__(self) -> None:
        super().__init__(msgspec.json.Encoder(), lambda type: msgspec.json.Decoder(type))


class MsgpackCodec(_Codec):
    """The same surface as :class:`JsonCodec`, over MessagePack."""

    def __init__(self) -> None:
        super().__init__(msgspec.msgpack.Encoder(), lambda type: msgspec.msgpack.Decoder(type))

    def _check_input(self, data: Buffer, max_bytes: int) -> None:
        if isinstance(data, str):
            raise DecodeError("MessagePack input must be bytes, not str")
        _check_size(data, max_bytes)


def convert(obj: Any, type: Any) -> Any:
    """Validate an already-decoded value (a frame's ``body``, a response's
    ``result``) as ``type``, as strictly as decoding it from bytes would.

    Raises:
        DecodeError: ``obj`` is not a valid ``type``; carries the path inside ``obj``.
    """
    try:
        return msgspec.convert(obj, _decode_type(type), strict=True)
    except msgspec.MsgspecError as exc:
        raise _translate(exc) from exc
    except RecursionError as exc:
        raise DecodeError(_TOO_DEEP) from exc


#: The shared codecs; build nothing per call.
json_codec: Final = JsonCodec()
msgpack_codec: Final = MsgpackCodec()

#: :meth:`JsonCodec.decode_message` of the shared JSON codec.
decode_message: Final = json_codec.decode_message
