"""The ``tool_call_progress`` line: its one encoder and its one decoder.

A progress line is the hot path of every transport: one per streamed delta.
:func:`encode_progress_line` writes it as the JSON codec would write the
``JsonRpcNotification[ToolCallProgressFrame]`` (same keys, same order, same
escaping: a test pins the two byte for byte) without building either struct,
and takes a body that is already encoded (``msgspec.Raw``) as it is.
:func:`decode_progress_line` reads any JSON-RPC line, with the common case (a
progress notification whose body is a ``PartialResultPayload``) decoded strictly
in one pass and everything else as :func:`decode_message` reads it; the params
it leaves undecoded become a frame through :func:`decode_progress_frame`, with
the body as the caller needs it.

The bounds are the wire types' own, on both sides: ``seq`` is a u64 and
``dropped_count`` a u32 (a decoded line out of range is a ``DecodeError``; an
encoded one a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeVar, overload

import msgspec

from ._base import check_u64
from ._codec import Buffer, json_codec
from ._errors import DecodeError, WireError
from ._jsonrpc import JsonRpcMessage, JsonRpcNotification
from ._limits import MAX_FRAME_BYTES_CEILING, U32_MAX, U64_MAX
from ._methods import METHOD_TOOL_CALL_PROGRESS
from ._partial_result import PartialResultPayload
from ._tool_call import ToolCallProgressFrame

__all__ = ("encode_progress_line",)

#: A progress line as the fast path decodes it: a ``tool_call_progress``
#: notification whose body is a ``PartialResultPayload``.
ProgressLine = JsonRpcNotification[ToolCallProgressFrame[PartialResultPayload]]

B = TypeVar("B")

# The frame types the runtime asks for on every frame, parametrised once.
_FRAME_TYPES: Final[dict[Any, Any]] = {
    Any: ToolCallProgressFrame[Any],
    msgspec.Raw: ToolCallProgressFrame[msgspec.Raw],
    PartialResultPayload: ToolCallProgressFrame[PartialResultPayload],
}

# A plain msgspec encoder writes what the protocol codec writes (its errors are
# translated below); called directly it saves a frame the codec's wrapper.
_encode: Final = msgspec.json.Encoder().encode
_decode: Final = json_codec.decode
_decode_message: Final = json_codec.decode_message
#: The decoder ``json_codec.decode(line, ProgressLine)`` uses (the same object,
#: so as strict: the ``jsonrpc`` tag is mandatory), called directly.
_decode_progress: Final = json_codec._decoder(ProgressLine).decode

_ENCODE_ERRORS: Final = (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError)

_OPEN: Final = b'{"jsonrpc":"2.0"'
_SESSION: Final = b',"session_id":'
_METHOD: Final = b',"method":' + _encode(METHOD_TOOL_CALL_PROGRESS) + b',"params":{"tool_call_id":'
_KIND: Final = b',"kind":'
_BODY: Final = b',"body":'
_CLOSE: Final = b"}}"
_CLOSE_LINE: Final = b"}}\n"

#: Encoded line heads, keyed by (call id, kind, session id): a call sends many
#: frames under one key, and the head is most of the fixed cost of a line. Past
#: this many keys the cache starts over.
_HEAD_CACHE_ENTRIES: Final = 1024
_heads: dict[tuple[str, str, str | None], tuple[bytes, bytes, bytes, bytes]] = {}


def _head(
    tool_call_id: str, kind: str, session_id: str | None
) -> tuple[bytes, bytes, bytes, bytes]:
    """The bytes before ``seq`` and those between ``seq`` and the body; then the
    same with the key ``,"seq":`` on the first and ``{"delta":`` on the second
    (a body that is a ``PartialResultPayload``)."""
    key = (tool_call_id, kind, session_id)
    head = _heads.get(key)
    if head is not None:
        return head
    for name, value in (("tool_call_id", tool_call_id), ("kind", kind)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, not {type(value).__name__}")
    if session_id is not None and not isinstance(session_id, str):
        raise TypeError(f"`session_id` must be a str or None, not {type(session_id).__name__}")
    # The ids are non-empty on the wire: a line with an empty one would be
    # refused by every strict decoder, its own included.
    if tool_call_id == "":
        raise ValueError("`tool_call_id` must not be empty")
    if session_id == "":
        raise ValueError("`session_id` must not be empty")
    # A str subclass (say a StrEnum member) is written as its text, whatever its
    # own `__str__` says, and cached under that text: a head is found by any
    # equal str, so its bytes must be the same whichever was encoded first.
    text = str.__str__
    call_id, kind = text(tool_call_id), text(kind)
    session = None if session_id is None else text(session_id)
    try:
        opening = _OPEN if session is None else _OPEN + _SESSION + _encode(session)
        middle = _METHOD + _encode(call_id) + _KIND + _encode(kind) + _BODY
    except (msgspec.EncodeError, UnicodeEncodeError) as exc:
        raise WireError(f"cannot encode ToolCallProgressFrame: {exc}") from exc
    if len(_heads) >= _HEAD_CACHE_ENTRIES:
        _heads.clear()
    head = _heads[call_id, kind, session] = (
        opening,
        middle,
        opening + b',"seq":',
        middle + b'{"delta":',
    )
    return head


def _counters(seq: int | None, dropped_count: int | None) -> tuple[bytes, bytes]:
    """``,"seq":N`` and the closing bytes with ``,"dropped_count":N`` (each empty
    or plain when unset)."""
    if seq is None:
        seq_part = b""
    else:
        if type(seq) is not int:
            raise TypeError(f"`seq` must be an int or None, not {type(seq).__name__}")
        check_u64("seq", seq)
        seq_part = b',"seq":%d' % seq
    if dropped_count is None:
        return seq_part, b""
    if type(dropped_count) is not int:
        raise TypeError(
            f"`dropped_count` must be an int or None, not {type(dropped_count).__name__}"
        )
    if not 0 <= dropped_count <= U32_MAX:
        raise ValueError(
            f"`dropped_count` = {dropped_count} is outside the u32 range 0..={U32_MAX}"
        )
    return seq_part, b',"dropped_count":%d' % dropped_count


def _body(body: Any) -> bytes | msgspec.Raw:
    if type(body) is msgspec.Raw:
        return body
    try:
        return _encode(body)
    except _ENCODE_ERRORS as exc:
        raise WireError(f"cannot encode ToolCallProgressFrame: {exc}") from exc


def encode_progress_line(
    tool_call_id: str,
    kind: str,
    body: Any,
    *,
    seq: int | None = None,
    session_id: str | None = None,
    dropped_count: int | None = None,
    newline: bool = True,
) -> bytes:
    """One ``tool_call_progress`` notification as JSON bytes, with its newline
    unless ``newline`` is false: the bytes ``json_codec.encode`` writes for the
    ``JsonRpcNotification`` of that ``ToolCallProgressFrame``. ``body`` is any
    wire value, or a ``msgspec.Raw`` written as it is.

    Raises:
        WireError: ``body`` or an id holds a value JSON cannot carry.
        ValueError: ``seq`` is outside the u64 range, ``dropped_count`` outside
            the u32 range, or an id is empty.
        TypeError: an id or kind is not a str, a counter not an int.
    """
    head = _heads.get((tool_call_id, kind, session_id))
    if head is None:
        head = _head(tool_call_id, kind, session_id)
    # The hot path, inlined: a frame numbered in range, no drops, a line.
    if seq.__class__ is int and dropped_count is None and newline and 0 <= seq <= U64_MAX:
        if body.__class__ is msgspec.Raw:
            return b"%s%d%s%s}}\n" % (head[2], seq, head[1], body)
        try:
            return b"%s%d%s%s}}\n" % (head[2], seq, head[1], _encode(body))
        except _ENCODE_ERRORS as exc:
            raise WireError(f"cannot encode ToolCallProgressFrame: {exc}") from exc
    seq_part, dropped = _counters(seq, dropped_count)
    close = _CLOSE_LINE if newline else _CLOSE
    return b"".join((head[0], seq_part, head[1], _body(body), dropped, close))


def encode_delta_lines(
    tool_call_id: str,
    kind: str,
    deltas: Sequence[str],
    *,
    total_bytes: int,
    truncated: bool = False,
    gap: bool = False,
    seq: int,
    session_id: str | None = None,
) -> bytes:
    """The lines of consecutive progress frames whose bodies are
    ``PartialResultPayload`` values, one a delta of ``deltas``, all with
    ``total_bytes`` and ``truncated``; the first says ``gap``. They are numbered
    from ``seq`` on. The bytes are those of :func:`encode_progress_line` for
    each frame in turn (a test pins them), written without building a struct:
    the frames a producer drains at once share everything but their text, so
    most of each line is encoded once.

    Every argument is checked, even when ``deltas`` is empty.

    Raises:
        WireError: an id cannot be encoded.
        ValueError: ``total_bytes``, ``seq`` or a frame's ``seq`` is outside the
            u64 range, or an id is empty.
        TypeError: ``deltas`` is not a sequence of str (a lone str included),
            an id or kind is not a str, ``total_bytes`` or ``seq`` not an int,
            a flag not a bool.
    """
    if deltas.__class__ is not list and (
        isinstance(deltas, str | bytes | bytearray) or not isinstance(deltas, Sequence)
    ):
        raise TypeError(f"`deltas` must be a sequence of str, not {type(deltas).__name__}")
    head = _heads.get((tool_call_id, kind, session_id))
    if head is None:
        head = _head(tool_call_id, kind, session_id)
    if truncated.__class__ is not bool or gap.__class__ is not bool:
        name, value = ("truncated", truncated) if truncated.__class__ is not bool else ("gap", gap)
        raise TypeError(f"`{name}` must be a bool, not {type(value).__name__}")
    if total_bytes.__class__ is not int or seq.__class__ is not int:
        name, value = (
            ("total_bytes", total_bytes) if total_bytes.__class__ is not int else ("seq", seq)
        )
        raise TypeError(f"`{name}` must be an int, not {type(value).__name__}")
    count = len(deltas)
    if not (0 <= total_bytes <= U64_MAX and 0 <= seq <= U64_MAX and seq + count <= U64_MAX + 1):
        check_u64("total_bytes", total_bytes)
        check_u64("seq", seq)
        check_u64("seq", seq + count - 1)
    if not count:
        return b""
    try:
        "".join(deltas)  # each is a str, checked in one pass
    except TypeError:
        wrong = next(delta for delta in deltas if type(delta) is not str)
        raise TypeError(f"`delta` must be a str, not {type(wrong).__name__}") from None
    # Each line is `opening ,"seq":N middle {"delta":D ,"total_bytes":..}}}\n`:
    # joined, the bytes between one delta and the next seq are the same for all.
    opening = head[2]
    middle = head[3]
    rest = b',"total_bytes":%d,"truncated":%s,"gap":false}}}\n' % (
        total_bytes,
        b"true" if truncated else b"false",
    )
    encode = _encode
    first = b""
    try:
        if gap:
            gap_rest = rest[: -len(b"false}}}\n")] + b"true}}}\n"
            first = b"%s%d%s%s%s" % (opening, seq, middle, encode(deltas[0]), gap_rest)
            if count == 1:
                return first
            deltas = deltas[1:]
            seq += 1
        parts = [
            b"%d%s%s" % (number, middle, encode(delta)) for number, delta in enumerate(deltas, seq)
        ]
    except _ENCODE_ERRORS as exc:  # a lone surrogate
        raise WireError(f"cannot encode ToolCallProgressFrame: {exc}") from exc
    return b"".join((first, opening, (rest + opening).join(parts), rest))


def append_progress_line(
    out: bytearray,
    tool_call_id: str,
    kind: str,
    body: Any,
    *,
    seq: int | None = None,
    session_id: str | None = None,
    dropped_count: int | None = None,
) -> None:
    """:func:`encode_progress_line` (newline included) written onto the end of
    ``out``, without a copy of the line of its own. On an error ``out`` is left
    as it was.

    Raises:
        WireError, ValueError, TypeError: as :func:`encode_progress_line`.
    """
    opening, middle, _, _ = _head(tool_call_id, kind, session_id)
    seq_part, dropped = _counters(seq, dropped_count)
    encoded = _body(body)
    out += opening
    out += seq_part
    out += middle
    out += encoded
    out += dropped
    out += _CLOSE_LINE


def append_progress_lines(
    out: bytearray,
    tool_call_id: str,
    frames: Iterable[tuple[str, Any, int | None, int | None]],
    *,
    session_id: str | None = None,
) -> int:
    """:func:`append_progress_line` for each ``(kind, body, seq, dropped_count)``
    of ``frames`` in turn, onto ``out``: the same bytes, the line heads looked
    up once per kind rather than once per line (a writer's batch of one call's
    frames). Returns how many lines were written. On an error the lines before
    the failing frame stay on ``out``, and nothing of that frame's is written.

    Raises:
        WireError, ValueError, TypeError: as :func:`encode_progress_line`.
    """
    heads: dict[str, tuple[bytes, bytes]] = {}
    written = 0
    for kind, body, seq, dropped_count in frames:
        head = heads.get(kind)
        if head is None:
            opening, middle, _, _ = _head(tool_call_id, kind, session_id)
            head = heads[kind] = (opening, middle)
        if dropped_count is None and type(seq) is int and 0 <= seq <= U64_MAX:
            seq_part, dropped = b',"seq":%d' % seq, b""  # the common line
        else:
            seq_part, dropped = _counters(seq, dropped_count)
        encoded = body if type(body) is msgspec.Raw else _body(body)
        out += head[0]
        out += seq_part
        out += head[1]
        out += encoded
        out += dropped
        out += _CLOSE_LINE
        written += 1
    return written


def decode_progress_line(
    line: Buffer, *, max_bytes: int = MAX_FRAME_BYTES_CEILING
) -> ProgressLine | JsonRpcMessage:
    """Decode one JSON-RPC line (without its newline).

    A ``tool_call_progress`` notification whose body is a valid
    ``PartialResultPayload`` comes back as a :data:`ProgressLine`, decoded
    strictly in one pass (its ``params`` is a ``ToolCallProgressFrame``). Any
    other message comes back as :func:`decode_message` gives it with ``params``
    and ``result`` left as ``msgspec.Raw``, for the caller to decode as far as
    it needs.

    Raises:
        FrameTooLargeError: ``line`` is longer than ``max_bytes``; it is not parsed.
        DecodeError: ``line`` is not a JSON-RPC message.
        TypeError: ``line`` is neither bytes-like nor a ``str``.
    """
    if line.__class__ is bytes and len(line) <= max_bytes:
        # The hot path: the codec's own decoder for the type, called without
        # the codec's wrapper. Any failure goes to decode_message below, which
        # reports it, so only msgspec's errors need catching here (a bytes line
        # cannot raise the UnicodeEncodeError of a str one).
        try:
            return _decode_progress(line)  # type: ignore[no-any-return]
        except (msgspec.MsgspecError, RecursionError):
            pass
    else:
        try:
            return _decode(line, ProgressLine, max_bytes=max_bytes)
        except DecodeError:  # a too-long line too: decode_message says so again
            pass
    return _decode_message(line, max_bytes=max_bytes, params=msgspec.Raw, result=msgspec.Raw)


@overload
def decode_progress_frame(
    params: Buffer | msgspec.Raw, body_type: type[B], *, max_bytes: int = ...
) -> ToolCallProgressFrame[B]: ...
@overload
def decode_progress_frame(
    params: Buffer | msgspec.Raw, body_type: Any = ..., *, max_bytes: int = ...
) -> ToolCallProgressFrame[Any]: ...
def decode_progress_frame(
    params: Buffer | msgspec.Raw,
    body_type: Any = Any,
    *,
    max_bytes: int = MAX_FRAME_BYTES_CEILING,
) -> ToolCallProgressFrame[Any]:
    """Decode the ``params`` of a ``tool_call_progress`` notification (the
    ``msgspec.Raw`` that :func:`decode_progress_line` leaves on a line it did not
    take whole) as a ``ToolCallProgressFrame`` whose body is ``body_type``:
    ``Any`` for plain JSON values, ``msgspec.Raw`` to keep the body undecoded
    (a caller that reports a bad frame apart from a bad body), or a wire type
    such as ``PartialResultPayload``. As strict as ``json_codec.decode(params,
    ToolCallProgressFrame[body_type])``, with the same bounds: ``max_bytes``
    (the line's own limit, so params within a line always fit), a ``u32``
    ``dropped_count``. An error's path starts at the params (``$.body.delta``).

    Raises:
        FrameTooLargeError: ``params`` is longer than ``max_bytes``; it is not parsed.
        DecodeError: ``params`` is not a progress frame with such a body.
        TypeError: ``params`` is neither bytes-like nor a ``str``.
    """
    frame_type = _FRAME_TYPES.get(body_type)
    if frame_type is None:
        frame_type = ToolCallProgressFrame[body_type]
    return _decode(params, frame_type, max_bytes=max_bytes)
