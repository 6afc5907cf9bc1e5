"""The server's JSON-RPC rules without I/O: ``ServerProtocol`` for what comes in,
:func:`take_lines` for each call's numbered progress going out.

Lines in, events out (as h11 does it for HTTP): :meth:`ServerProtocol.receive_line`
takes one input line and returns what the driver must do, as events: a
:class:`Reply` to write now, a :class:`StartCall` to run, a :class:`CancelCall`
to stop. The driver tells it when a call has ended (:meth:`ServerProtocol.call_ended`),
which frees the call's ids. Each call's progress waits in its
:class:`CallQueue` (``_call/_queue``: numbered at take, bounded, the final
response last) until the driver takes it as line bytes with :func:`take_lines`.
Nothing here awaits, reads or writes.

Rules (numbered as the server's module states them):

Rule 4. A bad line never stops the server: unparseable JSON gets -32700, a
        message that is not a valid request -32600, an unknown method -32601,
        bad params -32602 (``invalid_params`` data), a line longer than the
        frame limit -32018 (``frame_too_large`` data). The ``id`` is echoed when
        it could be read (a str, or an int in the i64 range), else ``null``;
        a line whose only fault is a lone surrogate escape (``"\\ud800"``,
        which stands for no character) gets a -32700 naming it, with its id.
        Unknown notifications, and responses, are ignored. A call whose ``id``
        is that of a call still in flight is refused with -32600 and a ``null``
        id, so the refusal cannot be taken for the running call's reply.
Rule 5. Cancellation: a ``hook`` (notification or request) whose event is
        ``Cancel`` and whose ``call_id`` names a call in flight, or
        ``tool.cancel`` with ``{"tool_call_id": ...}``, cancels that call;
        ``SessionEnded`` cancels every call. A request is answered with
        ``{"cancelled": n}``, the number of calls it cancelled.

What follows from them, and what the state-machine tests check: every request
whose id can be read gets exactly one reply (a :class:`Reply` at once, or, for
a call that starts, the call's own final response, written by the driver); a
well-formed notification never gets one; a :class:`CancelCall` only ever names
a call in flight; no two calls in flight share a request id or a call id, and
at most ``max_calls`` are in flight.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, NamedTuple

import msgspec

from kigi_tool_protocol import (
    DecodeError,
    ToolCallParams,
    ToolCallProgressFrame,
    ToolErrorWire,
    encode_progress_line,
    json_codec,
)
from kigi_tool_protocol._hooks import HookCancel, HookFrame, HookSessionEnded
from kigi_tool_protocol._limits import I64_MAX, I64_MIN, U32_MAX, U64_MAX
from kigi_tool_protocol._methods import (
    METHOD_HOOK,
    METHOD_TOOL_CALL,
    METHOD_TOOL_CALL_REQUEST,
    METHOD_TOOL_CANCEL,
    METHOD_TOOLS_LIST,
)
from kigi_tool_protocol._progress_line import append_progress_lines
from kigi_tool_protocol._tool_error import (
    ERROR_CODES,
    CustomErrorWire,
    FrameTooLargeWire,
    InvalidParamsWire,
    ToolNotFoundWire,
)

from .._call._frame_check import encoded_body
from .._call._queue import CallQueue
from .._text import MAX_DETAIL_CHARS, cut, excerpt
from .._tools._errors import ToolError
from .._wire._rpc_lines import (
    error_line,
    heartbeat_line,
    null_id_error,
    result_line,
    wire_error_line,
)
from .._wire._split import OversizedLine

__all__ = ()

#: Calls one connection may run at once; a call past it is refused with a
#: ``custom`` error of subcode ``tool_busy``.
MAX_CALLS_IN_FLIGHT: Final = 64

#: The methods the server answers, in the order its errors list them.
SERVED_METHODS: Final = (
    METHOD_TOOLS_LIST,
    METHOD_TOOL_CALL,
    METHOD_TOOL_CALL_REQUEST,
    METHOD_TOOL_CANCEL,
    METHOD_HOOK,
)

_PARSE_ERROR: Final = ERROR_CODES["parse_error"]
_INVALID_REQUEST: Final = ERROR_CODES["invalid_request"]
_METHOD_NOT_FOUND: Final = ERROR_CODES["method_not_found"]

_CALL_METHODS: Final = frozenset({METHOD_TOOL_CALL, METHOD_TOOL_CALL_REQUEST})
# JSON-RPC 2.0 lets a request leave out `params`; these methods need them
# (tools.list takes none, and an unknown method is answered as unknown).
_METHODS_WITH_PARAMS: Final = frozenset(SERVED_METHODS) - {METHOD_TOOLS_LIST}
_NULL_PARAMS: Final = msgspec.Raw(b"null")


# -- Events -----------------------------------------------------------------------


class Reply(NamedTuple):
    """Write ``line`` (a whole response, newline included) now.

    ``request_id`` is the id the reply answers (None: a ``null``-id reply).
    ``rejected`` says the line answers input the server refused (Rule 4)."""

    line: bytes
    request_id: str | int | None
    rejected: bool


class StartCall(NamedTuple):
    """Run ``params.tool_id`` as call ``params.tool_call_id``; its final response
    answers ``request_id``. The call is in flight until :meth:`ServerProtocol.call_ended`."""

    request_id: str | int
    session_id: str | None
    params: ToolCallParams[msgspec.Raw]


class CancelCall(NamedTuple):
    """Cancel call ``call_id`` (in flight when the event was made)."""

    call_id: str


Event = Reply | StartCall | CancelCall


class _Probe(msgspec.Struct):
    """The envelope keys of any incoming line, values left unparsed."""

    jsonrpc: Any = msgspec.UNSET
    id: Any = msgspec.UNSET
    session_id: Any = msgspec.UNSET
    method: Any = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_probe_decoder: Final = msgspec.json.Decoder(_Probe)


class _CancelParams(msgspec.Struct, frozen=True):
    """The params of ``tool.cancel``."""

    tool_call_id: str


def echo_id(value: Any) -> str | int | None:
    """``value`` when it is an id the server may echo (a str, or an int in the
    i64 range, never a bool), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and I64_MIN <= value <= I64_MAX:
        return value
    return None


class ServerProtocol:
    """The input side of one server connection, sans I/O (Rules 4 and 5).

    ``tool_ids`` are the served tools; ``describe`` gives the ``tools`` list a
    ``tools.list`` request is answered with; ``max_calls`` bounds the calls in
    flight.
    """

    def __init__(
        self,
        tool_ids: Iterable[str],
        describe: Callable[[], list[dict[str, Any]]],
        *,
        max_calls: int = MAX_CALLS_IN_FLIGHT,
    ) -> None:
        self._tool_ids = frozenset(tool_ids)
        self._describe = describe
        self._max_calls = max_calls
        # call id -> the request id its final response answers
        self._in_flight: dict[str, str | int] = {}
        self._request_ids: set[str | int] = set()
        self.calls_started = 0
        self.lines_rejected = 0

    @property
    def calls_in_flight(self) -> int:
        """How many calls have started and not ended."""
        return len(self._in_flight)

    def in_flight(self) -> dict[str, str | int]:
        """The calls in flight: call id to the request id they answer (a copy)."""
        return dict(self._in_flight)

    def call_ended(self, call_id: str) -> None:
        """Call ``call_id`` has ended (its final response is the driver's to write):
        its call id and request id are free again. An unknown id is ignored."""
        request_id = self._in_flight.pop(call_id, None)
        if request_id is not None:
            self._request_ids.discard(request_id)

    def cancel_all(self) -> list[CancelCall]:
        """A :class:`CancelCall` for every call in flight (end of input, Rule 6)."""
        return [CancelCall(call_id) for call_id in self._in_flight]

    # -- input -------------------------------------------------------------------

    def receive_line(self, line: bytes | OversizedLine) -> list[Event]:
        """What to do about one input line (without its newline).

        Never raises for bad input: a bad line is answered (Rule 4)."""
        if isinstance(line, OversizedLine):
            wire = FrameTooLargeWire(bytes=line.size, limit=line.limit)
            message = (
                f"line of {line.size} bytes exceeds the frame limit of {line.limit} bytes;"
                " it was discarded unread"
            )
            return [self._reject(wire_error_line(None, None, message, wire), None)]
        if not line.strip():
            return []  # blank lines between messages are harmless
        try:
            probe = _probe_decoder.decode(line)
        except msgspec.ValidationError:
            message = "invalid request: a message must be a JSON object"
            return [self._reject(null_id_error(_INVALID_REQUEST, message), None)]
        except msgspec.DecodeError as exc:
            return [self._parse_error(line, exc)]
        except RecursionError:
            message = "parse error: nested too deeply"
            return [self._reject(null_id_error(_PARSE_ERROR, message), None)]
        request_id = echo_id(probe.id)
        # Only a session id the strict decoder accepts is echoed (a non-empty string).
        session_id = (
            probe.session_id if isinstance(probe.session_id, str) and probe.session_id else None
        )
        if probe.result is not msgspec.UNSET or probe.error is not msgspec.UNSET:
            return []  # a response: the server sends no requests, nobody to give it to
        problem = _problem(probe, request_id)
        if problem is not None:
            line = error_line(
                request_id, session_id, _INVALID_REQUEST, f"invalid request: {problem}"
            )
            return [self._reject(line, request_id)]
        method: str = probe.method
        params = probe.params if isinstance(probe.params, msgspec.Raw) else _NULL_PARAMS
        if method in _CALL_METHODS:
            if request_id is None:
                self.lines_rejected += 1  # a call without an id has nowhere to reply
                return []
            return [self._start_call(request_id, session_id, params)]
        if method == METHOD_HOOK:
            return self._hook(request_id, session_id, params)
        if method == METHOD_TOOL_CANCEL:
            return self._cancel_request(request_id, session_id, params)
        if request_id is None:
            return []  # an unknown notification, or tools.list as one
        if method == METHOD_TOOLS_LIST:
            line = result_line(request_id, session_id, {"tools": self._describe()})
            return [Reply(line, request_id, False)]
        message = f"method not found: {excerpt(method)} (methods: {', '.join(SERVED_METHODS)})"
        return [
            self._reject(error_line(request_id, session_id, _METHOD_NOT_FOUND, message), request_id)
        ]

    def _parse_error(self, line: bytes, exc: msgspec.DecodeError) -> Reply:
        """-32700 for ``line``; with its id when the only fault is a lone
        surrogate escape (which the decoder reports as truncated input)."""
        lone = lone_surrogate(line)
        if lone is None:
            message = f"parse error: {cut(str(exc))}"
            return self._reject(null_id_error(_PARSE_ERROR, message), None)
        offset, escape, readable = lone
        message = (
            f"parse error: the JSON escape {escape} at byte {offset} is a lone UTF-16"
            " surrogate, which stands for no character (a surrogate escape must be"
            " half of a pair)"
        )
        request_id = session_id = None
        try:
            probe = _probe_decoder.decode(readable)
        except (msgspec.DecodeError, RecursionError):
            pass  # something else is wrong too: the id stays unread
        else:
            request_id = echo_id(probe.id)
            if isinstance(request_id, str) and _REPLACEMENT in request_id:
                request_id = None  # the id held the surrogate: not the sender's id
            if isinstance(probe.session_id, str) and probe.session_id:
                session_id = probe.session_id if _REPLACEMENT not in probe.session_id else None
        line = error_line(request_id, session_id, _PARSE_ERROR, message)
        return self._reject(line, request_id)

    def _reject(self, line: bytes, request_id: str | int | None) -> Reply:
        self.lines_rejected += 1
        return Reply(line, request_id, True)

    def _bad_params(
        self, request_id: str | int | None, session_id: str | None, exc: DecodeError, what: str
    ) -> list[Event]:
        if request_id is None:
            self.lines_rejected += 1
            return []  # a notification gets no reply
        message = f"invalid params for {what}: {cut(str(exc))}"
        wire = InvalidParamsWire(
            message=message, details={"path": cut(exc.path), "reason": cut(exc.reason)}
        )
        return [self._reject(wire_error_line(request_id, session_id, message, wire), request_id)]

    def _hook(
        self, request_id: str | int | None, session_id: str | None, params: msgspec.Raw
    ) -> list[Event]:
        try:
            frame = json_codec.decode(params, HookFrame)
        except DecodeError as exc:
            return self._bad_params(request_id, session_id, exc, "hook")
        events: list[Event] = []
        if isinstance(frame.event, HookCancel) and frame.call_id is not None:
            if frame.call_id in self._in_flight:
                events.append(CancelCall(frame.call_id))
        elif isinstance(frame.event, HookSessionEnded):
            events.extend(self.cancel_all())
        if request_id is not None:
            line = result_line(request_id, session_id, {"cancelled": len(events)})
            events.append(Reply(line, request_id, False))
        return events

    def _cancel_request(
        self, request_id: str | int | None, session_id: str | None, params: msgspec.Raw
    ) -> list[Event]:
        try:
            body = json_codec.decode(params, _CancelParams)
        except DecodeError as exc:
            return self._bad_params(request_id, session_id, exc, "tool.cancel")
        events: list[Event] = []
        if body.tool_call_id in self._in_flight:
            events.append(CancelCall(body.tool_call_id))
        if request_id is not None:
            line = result_line(request_id, session_id, {"cancelled": len(events)})
            events.append(Reply(line, request_id, False))
        return events

    def _start_call(self, request_id: str | int, session_id: str | None, raw: msgspec.Raw) -> Event:
        if request_id in self._request_ids:
            # Two replies with one id would hand the first caller whichever call
            # ends first. The refusal goes out with a null id (Rule 4), so it
            # cannot be taken for the running call's reply either.
            message = (
                f"invalid request: id {cut(msgspec.json.encode(request_id).decode())} is"
                " already used by a call in flight"
            )
            return self._reject(null_id_error(_INVALID_REQUEST, message), None)
        try:
            params = json_codec.decode(raw, ToolCallParams[msgspec.Raw])
        except DecodeError as exc:
            events = self._bad_params(request_id, session_id, exc, "tool.call")
            return events[0]
        call_id = params.tool_call_id
        wire: ToolErrorWire
        if params.tool_id not in self._tool_ids:
            # The id it names is cut like any echo (still a valid tool id).
            named = params.tool_id[:MAX_DETAIL_CHARS].rstrip(":")
            wire = ToolNotFoundWire(tool_id=named)
            message = (
                f"no tool {excerpt(params.tool_id)} here"
                f" (tools: {cut(', '.join(sorted(self._tool_ids)))})"
            )
            return self._reject(wire_error_line(request_id, session_id, message, wire), request_id)
        if call_id in self._in_flight:
            message = f"tool_call_id {excerpt(call_id)} is already in flight"
            wire = InvalidParamsWire(message=message, details={"path": "$.tool_call_id"})
            return self._reject(wire_error_line(request_id, session_id, message, wire), request_id)
        if len(self._in_flight) >= self._max_calls:
            message = (
                f"{self._max_calls} calls are already in flight on this connection;"
                " retry when one has finished"
            )
            wire = CustomErrorWire(subcode="tool_busy", message=message)
            return self._reject(wire_error_line(request_id, session_id, message, wire), request_id)
        self._in_flight[call_id] = request_id
        self._request_ids.add(request_id)
        self.calls_started += 1
        return StartCall(request_id, session_id, params)


#: One progress frame as a call's queue holds it: its kind and its body,
#: encoded once (``_call/_frame_check``).
ProgressItem = tuple[str, msgspec.Raw]


# The widest envelope seq (u64) and drop count (u32): a frame measured with them
# fits with any.
_MAX_SEQ: Final = U64_MAX
_MAX_DROPPED: Final = U32_MAX
_NO_BODY: Final = msgspec.Raw(b"")
#: Kinds whose envelope size one call keeps; past it the count starts over.
_ENVELOPES_KEPT: Final = 64


def progress_item_of(
    call_id: str, session_id: str | None, frame_limit: int | None
) -> Callable[[ToolCallProgressFrame[Any]], tuple[ProgressItem, int]]:
    """What a call's frame is queued as: its kind and its body, encoded once
    (``_call/_frame_check``), its size the body's. Raises the ToolError that
    ends the call when the frame cannot be sent as JSON (the server's Rule 1),
    or when its line, measured with the widest ``seq`` and ``dropped_count``,
    would pass ``frame_limit`` (a tool's declared ``max_frame_bytes``):
    ``frame_too_large`` with that size. A line is its envelope and its body, so
    the envelope is measured once per kind and the body is not encoded again."""
    envelopes: dict[str, int] = {}

    def item_of(frame: ToolCallProgressFrame[Any]) -> tuple[ProgressItem, int]:
        body = encoded_body(frame)
        if frame_limit is not None:
            kind = frame.kind
            envelope = envelopes.get(kind)
            if envelope is None:
                if len(envelopes) >= _ENVELOPES_KEPT:
                    envelopes.clear()
                envelope = envelopes[kind] = len(
                    encode_progress_line(
                        call_id,
                        kind,
                        _NO_BODY,
                        seq=_MAX_SEQ,
                        session_id=session_id,
                        dropped_count=_MAX_DROPPED,
                        newline=False,
                    )
                )
            size = envelope + len(body)
            if size > frame_limit:
                raise ToolError.frame_too_large(size, frame_limit)
        return (frame.kind, body), len(body)

    return item_of


def take_lines(
    queue: CallQueue[ProgressItem, bytes],
    call_id: str,
    session_id: str | None,
    max_bytes: int,
    out: bytearray,
) -> tuple[int, bool]:
    """Take ``queue``'s heartbeat (the server's Rule 9: it was let in before any
    frame now queued) and frames onto ``out``, the frames as
    ``tool_call_progress`` lines, each with the ``seq`` and ``dropped_count``
    the queue numbered it with (the server's Rule 2), up to about ``max_bytes``
    (at least one frame when any is queued), then the final response line once
    every frame is out. Returns (frames taken, whether the final response went
    too)."""
    beat = queue.take_beat()
    if beat is not None:
        out += heartbeat_line(call_id, session_id, beat)
    limit = len(out) + max_bytes
    take = queue.take

    def frames() -> Iterator[tuple[str, msgspec.Raw, int, int | None]]:
        while len(out) < limit:
            frame = take()
            if frame is None:
                return
            (kind, body), seq, dropped_count = frame
            yield kind, body, seq, dropped_count

    taken = append_progress_lines(out, call_id, frames(), session_id=session_id)
    final = queue.take_reply()
    if final is None:
        return taken, False
    out += final
    return taken, True


#: A ``\\uXXXX`` escape of a UTF-16 surrogate (its backslash not itself
#: escaped: an even run of backslashes before it), high (group 2) or low (3).
_SURROGATE_ESCAPE: Final = re.compile(
    rb"(?<!\\)((?:\\\\)*)\\u(?:([dD][89abAB][0-9a-fA-F]{2})|([dD][c-fC-F][0-9a-fA-F]{2}))"
)
_REPLACEMENT: Final = "\ufffd"


def lone_surrogate(line: bytes) -> tuple[int, str, bytes] | None:
    """The first lone surrogate escape in ``line`` (a high one not followed at
    once by a low one, or a low one alone): its byte offset, the escape as
    written, and ``line`` with every lone one replaced by ``\\ufffd`` (so what
    else it says can be read). ``None`` when it has none."""
    if b"\\u" not in line:
        return None
    pieces: list[bytes] = []
    first: tuple[int, str] | None = None
    at = 0
    matches = list(_SURROGATE_ESCAPE.finditer(line))
    paired = False  # the previous match was a high escape this one completes
    for number, match in enumerate(matches):
        if paired:
            paired = False
            continue
        following = matches[number + 1] if number + 1 < len(matches) else None
        if (
            match.group(2) is not None
            and following is not None
            and following.group(3) is not None
            and following.start() == match.end()
            and not following.group(1)
        ):
            paired = True
            continue
        start = match.end(1)
        if first is None:
            first = (start, line[start : match.end()].decode("ascii"))
        pieces.append(line[at:start])
        pieces.append(b"\\ufffd")
        at = match.end()
    if first is None:
        return None
    pieces.append(line[at:])
    return first[0], first[1], b"".join(pieces)


def _problem(probe: _Probe, request_id: str | int | None) -> str | None:
    """Why ``probe`` is not a valid request or notification (Rule 4), or None."""
    if probe.jsonrpc != "2.0":
        if probe.jsonrpc is msgspec.UNSET:
            return '`jsonrpc` is missing; it must be "2.0"'
        return f'`jsonrpc` must be "2.0", got {cut(msgspec.json.encode(probe.jsonrpc).decode())}'
    if probe.id is not msgspec.UNSET and request_id is None:
        return "`id` must be a string or an integer in the i64 range"
    if not isinstance(probe.method, str):
        return "`method` is missing or not a string"
    if probe.params is msgspec.UNSET and probe.method in _METHODS_WITH_PARAMS:
        return f"`params` is missing; {probe.method!r} takes an object of params"
    if probe.session_id is not msgspec.UNSET and not (
        isinstance(probe.session_id, str) and probe.session_id
    ):
        return "`session_id` must be a non-empty string"
    return None
