"""``ClientProtocol``: the client's side of the JSON-RPC rules, without I/O.

Requests out as line bytes, lines in as events (as h11 does it for HTTP): the
driver (``Client``) asks :meth:`ClientProtocol.start_call` or
:meth:`ClientProtocol.start_request` for the line to write, feeds every line it
reads to :meth:`ClientProtocol.receive_line`, and acts on the events that come
back: :class:`ProgressReceived` for a call, :class:`CallEnded` with its outcome,
:class:`RequestEnded` for any other request. Nothing here awaits, reads or
writes.

Rules:

Rule 1. Each request gets its own id (1, 2, 3, ...). A response ends the call
        or request with that id exactly once; a response for no pending id, a
        progress frame for no pending call, and any line that is not a JSON-RPC
        message are counted as unused and change nothing. A
        ``tool_call_heartbeat`` (the server's Rule 9) is used: it only says a
        call is alive.
Rule 2. :meth:`ClientProtocol.connection_lost` ends everything pending at once,
        each with a ``connection_lost`` failure, and anything started after it
        is not registered (the driver fails it at once).
Rule 3. A call id names one pending call: starting a second call under it is a
        ``ValueError``. A call the driver gives up on
        (:meth:`ClientProtocol.forget_call`) is no longer pending: its later
        frames and its response are unused.
Rule 4. A ``tools.list`` result is a ``tools`` list or an ``internal_error``
        (:meth:`ClientProtocol.tools_listed`); a listed tool that declares its
        ``max_frame_bytes`` has longer progress lines of its calls refused
        (:class:`ProgressRefused`), at most the client's own bound.
Rule 6. A line longer than the client takes is skipped unread, never
        silently: the call it belonged to, read from the line's first bytes
        (:func:`owner_of`: a response's ``id``, a progress line's
        ``tool_call_id``), ends with ``frame_too_large``; a line whose owner
        cannot be read ends every pending call and request so, since any of
        them may have lost its answer in it.
Rule 5. The bounds and timeouts a driver is given are checked here: a line or
        item bound below 1, a timeout that is not positive and one longer
        than ``deadline_ms`` carries (infinity included) are a ``ValueError``
        (:func:`check_bounds`, :func:`check_timeout`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

import msgspec

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
    ToolCallParams,
    ToolCallProgressFrame,
    ToolCallResult,
    json_codec,
)
from kigi_tool_protocol._hooks import HookFrame
from kigi_tool_protocol._identifiers import TOOL_ID_PATTERN
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_HOOK, METHOD_TOOL_CALL, METHOD_TOOL_CALL_PROGRESS
from kigi_tool_protocol._progress_line import decode_progress_frame, decode_progress_line
from kigi_tool_protocol._tool_error import (
    ConnectionLostWire,
    FrameTooLargeWire,
    InternalErrorWire,
    TimeoutWire,
)

from .._call._heartbeat import METHOD_TOOL_CALL_HEARTBEAT
from .._call._response import Failure, failure_of, outcome_of
from .._wire._split import OversizedLine

__all__ = ()

_TOOL_ID: Final = re.compile(TOOL_ID_PATTERN)


def tool_id_of(method: str) -> str:
    """The tool id the errors of a request that is no tool call name: its
    method spelled as a valid tool id (``tools.list`` -> ``tools:list``)."""
    spelled = method.replace(".", ":", 1).replace(".", "_")
    return spelled if _TOOL_ID.match(spelled) else "request"


def check_bounds(max_frame_bytes: int, call_buffer_frames: int) -> None:
    """Refuse a client's line bound or per-call item bound below 1.

    Raises:
        ValueError: either is below 1.
    """
    if max_frame_bytes < 1 or call_buffer_frames < 1:
        raise ValueError(
            "max_frame_bytes and call_buffer_frames must be at least 1, got"
            f" {max_frame_bytes} and {call_buffer_frames}"
        )


#: The longest timeout (seconds) a call's ``deadline_ms``, a u64 of
#: milliseconds, carries (Rule 5).
MAX_TIMEOUT_S: Final = (2**64 - 1) / 1000


def check_timeout(timeout: float | None) -> None:
    """Refuse a timeout (seconds) that is not positive, or longer than
    ``deadline_ms`` carries, infinity included (``None``: no timeout).

    Raises:
        ValueError: ``timeout`` is not positive, or past :data:`MAX_TIMEOUT_S`.
    """
    if timeout is None:
        return
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if not timeout * 1000 < 2**64:
        raise ValueError(
            f"timeout must be at most {MAX_TIMEOUT_S:.4g} seconds (deadline_ms is a u64"
            f" of milliseconds; None for no timeout), got {timeout}"
        )


def check_timeout_grace(timeout_grace: float) -> None:
    """Refuse a client's timeout grace (seconds) that is not positive and finite.

    Raises:
        ValueError: ``timeout_grace`` is not a positive, finite number.
    """
    if not 0 < timeout_grace < math.inf:
        raise ValueError(f"timeout_grace must be > 0 seconds and finite, got {timeout_grace}")


def deadline_ms_of(timeout: float | None) -> int | None:
    """The ``deadline_ms`` a call with ``timeout`` (seconds) sends: at least 1."""
    return None if timeout is None else max(int(timeout * 1000), 1)


def request_timed_out(method: str, timeout: float | None, elapsed: float) -> Failure:
    """The ``timeout`` failure of request ``method`` unanswered after
    ``elapsed`` seconds, its ``timeout``."""
    wire = TimeoutWire(tool_id=method, elapsed_ms=int(elapsed * 1000))
    return Failure(wire, f"{method} got no answer within {timeout} s")


class ProgressReceived(NamedTuple):
    """A progress frame for pending call ``call_id``, with its envelope ``seq``."""

    call_id: str
    frame: ToolCallProgressFrame[Any]
    seq: int | None


class ProgressRefused(NamedTuple):
    """A progress line of ``size`` bytes for pending call ``call_id`` was past
    the ``limit`` its tool declared (``max_frame_bytes``): not taken, and the
    call's report should say so."""

    call_id: str
    size: int
    limit: int


class CallEnded(NamedTuple):
    """Pending call ``call_id`` ended: its result, or how it failed."""

    call_id: str
    outcome: ToolCallResult | Failure


class RequestEnded(NamedTuple):
    """Request ``request_id`` (not a call) was answered: ``result`` (a plain JSON
    value), unless ``failure`` says how it failed."""

    request_id: int
    result: Any
    failure: Failure | None


ClientEvent = ProgressReceived | ProgressRefused | CallEnded | RequestEnded


# The keys that say whose a line is, as any JSON writer spells them.
_CALL_ID: Final = re.compile(rb'"tool_call_id"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ID: Final = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*[,}]')
_PROGRESS: Final = re.compile(rb'"method"\s*:\s*"tool_call_progress"')


def owner_of(head: bytes) -> tuple[int | str | None, str | None]:
    """Whose a line is, read from its first bytes (Rule 6): the ``id`` of a
    response, the ``tool_call_id`` of a progress line (else ``None``). Only
    keys read whole count; a ``tool_call_id`` inside a response's result is not
    its owner, so a response names its ``id`` alone."""
    request_id: int | str | None = None
    found = _ID.search(head)
    if found is not None:
        try:
            value = msgspec.json.decode(found.group(1))
        except msgspec.DecodeError:
            value = None
        if isinstance(value, int | str) and not isinstance(value, bool):
            request_id = value
    if _PROGRESS.search(head) is not None:
        call = _CALL_ID.search(head)
        if call is not None:
            try:
                call_id = msgspec.json.decode(b'"' + call.group(1) + b'"')
            except msgspec.DecodeError:
                return None, None
            if isinstance(call_id, str):
                return None, call_id
        return None, None
    return request_id, None


def _too_large(line: OversizedLine, *, owner_known: bool = True) -> Failure:
    """The ``frame_too_large`` failure of a call or request whose line was skipped."""
    wire = FrameTooLargeWire(bytes=line.size, limit=line.limit)
    whose = (
        "its line"
        if owner_known
        else "a line whose call could not be read (so every pending call is ended)"
    )
    return Failure(
        wire,
        f"{whose} of {line.size} bytes from the server exceeds the client's limit of"
        f" {line.limit} bytes; it was skipped unread",
    )


class _Pending(NamedTuple):
    request_id: int
    tool_id: str


class ClientProtocol:
    """The client's side of one connection, sans I/O (Rules 1-3).

    ``session_id`` goes on every message; ``max_frame_bytes`` bounds a line
    taken from the server.
    """

    def __init__(self, session_id: str, *, max_frame_bytes: int = MAX_FRAME_BYTES_CEILING) -> None:
        self.session_id = session_id
        self._max_frame_bytes = max_frame_bytes
        self._ids: Iterator[int] = itertools.count(1)
        self._calls: dict[str, _Pending] = {}
        self._by_request: dict[int, str] = {}  # request id -> call id
        self._requests: dict[int, str] = {}  # request id -> method
        self._frame_limits: dict[str, int] = {}  # tool id -> its declared max_frame_bytes
        #: Why the connection was lost (None while it is up).
        self.lost: str | None = None
        #: Lines received, lines that were of no use, calls started.
        self.lines = 0
        self.lines_unused = 0
        self.calls_made = 0

    def is_pending(self, call_id: str) -> bool:
        """Whether call ``call_id`` waits for its response."""
        return call_id in self._calls

    def limit_frames(self, tool_id: str, limit: int) -> None:
        """Refuse progress lines longer than ``limit`` bytes for calls of
        ``tool_id`` (the ``max_frame_bytes`` it declared; at most the client's own)."""
        self._frame_limits[tool_id] = min(limit, self._max_frame_bytes)

    def tools_listed(self, result: Any) -> list[dict[str, Any]]:
        """The tools a ``tools.list`` ``result`` lists; every tool that declares
        its ``max_frame_bytes`` has its progress lines bounded by it
        (:meth:`limit_frames`).

        Raises:
            RemoteToolError: the result has no ``tools`` list (``internal_error``).
        """
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            detail = "tools.list result has no `tools` list"
            raise Failure(InternalErrorWire(detail=detail), detail).error()
        for tool in tools:
            caps = tool.get("capabilities") if isinstance(tool, dict) else None
            declared = caps.get("max_frame_bytes") if isinstance(caps, dict) else None
            if isinstance(tool, dict) and isinstance(declared, int) and declared > 0:
                self.limit_frames(str(tool.get("id")), declared)
        return tools

    @property
    def pending_requests(self) -> int:
        """How many calls and other requests wait for their response."""
        return len(self._calls) + len(self._requests)

    # -- out ------------------------------------------------------------------------

    def start_call(
        self,
        tool_id: str,
        arguments: Any,
        *,
        tool_call_id: str,
        deadline_ms: int | None,
        trace_context: str | None = None,
    ) -> tuple[int, bytes]:
        """The request id and line (newline included) of a new call. It is pending
        from now on, unless the connection is lost (the driver then fails it).
        ``trace_context``: the caller's W3C ``traceparent``, sent as the
        request's optional ``trace_context`` (the server's span is its child).

        Raises:
            ValueError: ``tool_call_id`` is pending already.
            WireError: ``arguments`` hold a value JSON cannot carry (nothing is
                registered).
        """
        if tool_call_id in self._calls:
            raise ValueError(f"tool_call_id {tool_call_id!r} is already in flight")
        request_id = next(self._ids)
        params: ToolCallParams[Any] = ToolCallParams(
            tool_call_id=tool_call_id,
            tool_id=tool_id,
            arguments=arguments,
            deadline_ms=deadline_ms,
            trace_context=trace_context,
        )
        request: JsonRpcRequest[Any] = JsonRpcRequest(
            id=request_id, session_id=self.session_id, method=METHOD_TOOL_CALL, params=params
        )
        # Encoded before the call is registered: arguments JSON cannot carry
        # must not leave a call that nothing will ever answer.
        line = json_codec.encode(request) + b"\n"
        self.calls_made += 1
        if self.lost is None:
            self._calls[tool_call_id] = _Pending(request_id, tool_id)
            self._by_request[request_id] = tool_call_id
        return request_id, line

    def start_request(self, method: str, params: Any) -> tuple[int, bytes]:
        """The request id and line of a request that is not a call; pending
        until answered, :meth:`forget_request` or the connection is lost.

        Raises:
            WireError: ``params`` hold a value JSON cannot carry.
        """
        request_id = next(self._ids)
        request: JsonRpcRequest[Any] = JsonRpcRequest(
            id=request_id, session_id=self.session_id, method=method, params=params
        )
        line = json_codec.encode(request) + b"\n"
        if self.lost is None:
            self._requests[request_id] = method
        return request_id, line

    def forget_request(self, request_id: int) -> None:
        """Stop waiting for request ``request_id`` (its answer will be unused)."""
        self._requests.pop(request_id, None)

    def forget_call(self, call_id: str) -> bool:
        """Stop waiting for call ``call_id``; True when it was pending."""
        pending = self._calls.pop(call_id, None)
        if pending is None:
            return False
        del self._by_request[pending.request_id]
        return True

    def cancel_line(self, tool_id: str, call_id: str) -> bytes:
        """The hook ``Cancel`` notification line for a call."""
        hook = HookFrame.cancel(self.session_id, tool_id, call_id)
        note: JsonRpcNotification[Any] = JsonRpcNotification(
            session_id=self.session_id, method=METHOD_HOOK, params=hook
        )
        return json_codec.encode(note) + b"\n"

    # -- in -------------------------------------------------------------------------

    def receive_line(self, line: bytes | OversizedLine) -> list[ClientEvent]:
        """What one line from the server (without its newline) means. Never raises
        for bad input: a line of no use is counted (Rule 1)."""
        self.lines += 1
        if isinstance(line, OversizedLine):
            self.lines_unused += 1
            return self._skipped(line)
        try:
            message = decode_progress_line(line, max_bytes=self._max_frame_bytes)
        except DecodeError:
            self.lines_unused += 1
            return []
        if isinstance(message, JsonRpcResponse):
            event = self._response(message)
        elif (
            isinstance(message, JsonRpcNotification) and message.method == METHOD_TOOL_CALL_PROGRESS
        ):
            event = self._progress(message.params, message.seq, len(line))
        elif (
            isinstance(message, JsonRpcNotification)
            and message.method == METHOD_TOOL_CALL_HEARTBEAT
        ):
            return []
        else:
            event = None
        if event is None:
            self.lines_unused += 1
            return []
        return [event]

    def _skipped(self, line: OversizedLine) -> list[ClientEvent]:
        """Rule 6: end whatever the skipped ``line`` belonged to."""
        request_id, call_id = owner_of(line.head)
        if call_id is None and isinstance(request_id, int):
            call_id = self._by_request.get(request_id)
            if call_id is None and request_id in self._requests:
                del self._requests[request_id]
                return [RequestEnded(request_id, None, _too_large(line))]
        if call_id is not None:
            pending = self._calls.pop(call_id, None)
            if pending is None:
                return []  # no pending call's line: unused, as any other
            del self._by_request[pending.request_id]
            return [CallEnded(call_id, _too_large(line))]
        if request_id is not None:
            return []  # an id of no request of ours
        events: list[ClientEvent] = [
            CallEnded(call_id, _too_large(line, owner_known=False))
            for call_id, pending in self._calls.items()
        ]
        events.extend(
            RequestEnded(request_id, None, _too_large(line, owner_known=False))
            for request_id in self._requests
        )
        self._calls.clear()
        self._by_request.clear()
        self._requests.clear()
        return events

    def _progress(self, frame: Any, seq: int | None, size: int) -> ClientEvent | None:
        if not isinstance(frame, ToolCallProgressFrame):
            try:
                frame = decode_progress_frame(frame, max_bytes=self._max_frame_bytes)
            except DecodeError:
                return None
        pending = self._calls.get(frame.tool_call_id)
        if pending is None:
            return None
        limit = self._frame_limits.get(pending.tool_id)
        if limit is not None and size > limit:
            self.lines_unused += 1  # refused, yet the call hears of it
            return ProgressRefused(frame.tool_call_id, size, limit)
        return ProgressReceived(frame.tool_call_id, frame, seq)

    def _response(self, response: JsonRpcResponse[msgspec.Raw]) -> ClientEvent | None:
        request_id = response.id
        if not isinstance(request_id, int):
            return None
        method = self._requests.pop(request_id, None)
        if method is not None:
            if response.error is not None:
                return RequestEnded(request_id, None, failure_of(response))
            assert response.result is not None
            try:
                return RequestEnded(request_id, json_codec.decode(response.result), None)
            except DecodeError as exc:
                wire = InternalErrorWire(detail=f"the server's {method} result: {exc}")
                return RequestEnded(request_id, None, Failure(wire, wire.detail or ""))
        call_id = self._by_request.pop(request_id, None)
        if call_id is None:
            return None
        del self._calls[call_id]
        return CallEnded(call_id, outcome_of(response, "the server's"))

    # -- the end ----------------------------------------------------------------------

    def lost_failure(self, what: str) -> Failure:
        """The ``connection_lost`` failure of ``what`` (a tool id or a method)."""
        why = self.lost or "the client was closed"
        return Failure(
            ConnectionLostWire(tool_id=what), f"connection to the tool server lost: {why}"
        )

    def connection_lost(self, why: str) -> list[ClientEvent]:
        """The connection is gone: every pending call and request ends with a
        ``connection_lost`` failure, at once (Rule 2). Only the first call counts."""
        if self.lost is not None:
            return []
        self.lost = why
        events: list[ClientEvent] = [
            CallEnded(call_id, self.lost_failure(pending.tool_id))
            for call_id, pending in self._calls.items()
        ]
        events.extend(
            RequestEnded(request_id, None, self.lost_failure(tool_id_of(method)))
            for request_id, method in self._requests.items()
        )
        self._calls.clear()
        self._by_request.clear()
        self._requests.clear()
        return events
