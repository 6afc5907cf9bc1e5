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

from ._base import U64
from ._errors import DecodeError, FrameTooLargeError, WireError
from ._identifiers import SessionId
from ._jsonrpc import (
    ENVELOPE_TYPES,
    JSONRPC_VERSION,
    JsonRpcError,
    JsonRpcId,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
    Unversioned,
)
from ._limits import MAX_FRAME_BYTES_CEILING

__all__ = ("decode_message", "json_codec", "msgpack_codec")

T = TypeVar("T")

Buffer = bytes | bytearray | memoryview | str

# msgspec reports validation errors as "<what was wrong> - at `$.a.b`".
_AT_PATH: Final = re.compile(r"^(?P<reason>.*?) - at `(?P<path>\$[^`]*)`$", re.DOTALL)

#: What a too-deep document is reported as. msgspec recurses once per nesting
#: level and stops at the interpreter's recursion limit (about 1000 levels by
#: default), well past serde_json's 128, so no honest frame gets near it.
_TOO_DEEP: Final = "document is nested too deeply to decode"


#: Entries of a codec's by-identity decoder cache. Type objects built afresh on
#: every call (``A | B`` written inline makes a new object each time) would
#: otherwise pile up; past this many the cache starts over, and the by-equality
#: cache behind it still holds every decoder, so nothing is rebuilt.
_ID_CACHE_ENTRIES: Final = 256


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
    try:
        return memoryview(data).nbytes
    except TypeError:
        raise TypeError(
            f"data must be bytes, bytearray, memoryview or str, not {type(data).__name__}"
        ) from None


def _check_size(data: Buffer, max_bytes: int) -> None:
    if type(data) is bytes:  # the common case, first and cheapest
        if len(data) > max_bytes:
            raise FrameTooLargeError(len(data), max_bytes)
        return
    # A str needs at least one byte per character, and at most four.
    if isinstance(data, str) and len(data) * 4 <= max_bytes:
        return
    size = _frame_size(data)
    if size > max_bytes:
        raise FrameTooLargeError(size, max_bytes)


def _decode_type(type: Any) -> Any:
    """The type actually handed to msgspec for ``type``."""
    if (get_origin(type) or type) in ENVELOPE_TYPES:
        return Union[type, Unversioned]  # noqa: UP007 (a runtime union of type objects)
    return type


class _Inbound(msgspec.Struct, frozen=True, tag_field="jsonrpc", tag=JSONRPC_VERSION):
    """Every key a JSON-RPC message may have, decoded in one pass. The keys whose
    meaning depends on the kind of message are checked once the kind is known."""

    id: JsonRpcId | UnsetType = UNSET
    session_id: SessionId | None = None
    seq: Any = UNSET
    method: Any = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: JsonRpcError | UnsetType | None = UNSET


class _InboundRaw(msgspec.Struct, frozen=True, tag_field="jsonrpc", tag=JSONRPC_VERSION):
    """:class:`_Inbound` for callers that want ``params`` or ``result`` as
    ``msgspec.Raw``: those two stay undecoded bytes."""

    id: JsonRpcId | UnsetType = UNSET
    session_id: SessionId | None = None
    seq: Any = UNSET
    method: Any = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: JsonRpcError | UnsetType | None = UNSET


_INBOUND: Final = Union[_Inbound, Unversioned]  # noqa: UP007 (a runtime union of type objects)
_INBOUND_RAW: Final = Union[_InboundRaw, Unversioned]  # noqa: UP007


def _rooted(exc: DecodeError, where: str) -> DecodeError:
    """``exc`` with its path moved under ``where`` (``$.x`` becomes ``$.params.x``)."""
    return DecodeError(exc.reason, where + exc.path[1:])


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
        # The same cache keyed by id(): hashing a parametrised generic such as
        # JsonRpcNotification[ToolCallProgressFrame[...]] costs more than decoding a
        # small frame. Each entry keeps its type alive, so its id cannot be reused.
        self._by_id: dict[int, tuple[Any, Any]] = {}

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
        entry = self._by_id.get(id(type))
        if entry is not None and entry[0] is type:
            return entry[1]
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = self._decoders[type] = self._decoder_factory(_decode_type(type))
        if len(self._by_id) >= _ID_CACHE_ENTRIES:
            self._by_id.clear()
        self._by_id[id(type)] = (type, decoder)
        return decoder

    def _decode_unchecked(self, data: Buffer, type: Any) -> Any:
        entry = self._by_id.get(id(type))
        decoder = entry[1] if entry is not None and entry[0] is type else self._decoder(type)
        try:
            return decoder.decode(data)
        except msgspec.MsgspecError as exc:
            raise _translate(exc) from exc
        except RecursionError as exc:
            raise DecodeError(_TOO_DEEP) from exc
        except UnicodeEncodeError as exc:  # a str frame holding a lone surrogate
            raise DecodeError(f"frame is not valid Unicode text: {exc.reason}") from exc

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
            TypeError: ``data`` is neither bytes-like nor a ``str``.
        """
        if data.__class__ is not bytes or len(data) > max_bytes:
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
        mapping from method string to type (methods it lacks get ``Any``, plain JSON
        values); ``result`` is the type to decode a response's result as. Either may
        be ``msgspec.Raw`` to keep that part undecoded for a later :meth:`decode`.
        One parse, then the typed parts are validated as strictly as :meth:`decode`
        would, with error paths from the message root (``$.params.body.total_bytes``).

        Raises:
            FrameTooLargeError: ``data`` is longer than ``max_bytes``; it is not parsed.
            DecodeError: ``data`` is not a valid message of the kind its keys say.
            TypeError: ``data`` is neither bytes-like nor a ``str``.
        """
        self._check_input(data, max_bytes)
        by_method = type(params) is dict or isinstance(params, Mapping)
        wants_raw = params is Raw or result is Raw or (by_method and Raw in params.values())
        message: _Inbound | _InboundRaw = self._decode_unchecked(
            data, _INBOUND_RAW if wants_raw else _INBOUND
        )
        if message.result is not UNSET or message.error is not UNSET:
            return self._response(message, result)
        if message.method is UNSET:
            raise DecodeError("Object missing required field `method`")
        method = message.method
        if type(method) is not str:
            method = self._typed(method, str, "$.method")
        if message.params is UNSET:
            raise DecodeError("Object missing required field `params`")
        wanted = params.get(method, Any) if by_method else params
        value = self._typed(message.params, wanted, "$.params")
        if message.id is not UNSET:
            return JsonRpcRequest(
                id=message.id, session_id=message.session_id, method=method, params=value
            )
        seq = None if message.seq is UNSET else self._typed(message.seq, U64 | None, "$.seq")
        try:
            return JsonRpcNotification(
                session_id=message.session_id, seq=seq, method=method, params=value
            )
        except ValueError as exc:  # seq past u64
            raise DecodeError(str(exc), "$.seq") from exc

    def _response(self, message: _Inbound | _InboundRaw, result: Any) -> JsonRpcResponse[Any]:
        if message.id is UNSET:
            raise DecodeError("Object missing required field `id`")
        value: Any = None
        if message.result is not UNSET and not self._is_null(message.result):
            value = self._typed(message.result, result, "$.result")
        error = None if message.error is UNSET else message.error
        try:
            return JsonRpcResponse(
                id=message.id, session_id=message.session_id, result=value, error=error
            )
        except ValueError as exc:  # both or neither of result and error
            raise DecodeError(str(exc)) from exc

    def _is_null(self, value: Any) -> bool:
        if isinstance(value, Raw):
            return len(value) <= 4 and self._decode_unchecked(value, Any) is None
        return value is None

    def _typed(self, value: Any, type: Any, where: str) -> Any:
        """A message part as ``type``: kept, decoded from ``Raw``, or converted."""
        if type is Raw or (type is Any and not isinstance(value, Raw)):
            return value
        try:
            if isinstance(value, Raw):
                return self._decode_unchecked(value, type)
            return convert(value, type)
        except DecodeError as exc:
            raise _rooted(exc, where) from exc.__cause__


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
