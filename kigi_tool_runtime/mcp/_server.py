"""``McpToolServer``: serve kigi tools to MCP hosts, their output streaming live.

The thin driver over :mod:`._mapping` and the served-call core (one
``CallQueue`` per call, ``_call/_queue``, fed by ``_call/_feed``), on the
official SDK's low-level ``Server``. Invariants:

Rule 1. A ``tools/call`` with a ``progressToken`` sends one ``notifications/progress``
        per frame the tool yields, numbered at sending (``_mapping`` Rule 1).
        Each is *awaited* into the request's own outbound channel (first in,
        first out) before the next is made, and the handler returns, so the
        response is queued, only after the last: every notification of a call
        is on the wire before its response, never sent from a task of its own
        that could lose the race. Without a token the tool is told nobody
        wants progress and nothing is sent.
Rule 2. A slow host slows the tool first: while the host keeps taking
        notifications, a full queue pauses the call (the runner then pauses
        the tool; the shell tool keeps reading into its bounded tail and
        reports what it skipped as a gap). Once one notification has waited
        ``stall_s`` (:data:`STALL_S` unless set) to be taken, the queue drops
        its oldest frames instead
        (``_call/_queue`` Rule 2); the loss is in the next frame's
        ``dropped_count`` (``_queued`` Rule 2), in the result's ``_meta``, and
        in its text, with the output's gaps (``_call/_outcome`` Rule 2).
Rule 3. ``notifications/cancelled`` for a call, the host going away (end of
        input, a closed HTTP stream) and server shutdown cancel the tool: the
        call's ``ToolContext`` is cancelled and the driver waits (bounded by the
        runner's stop wait) for the tool to stop, so the shell tool's process
        group is gone before the handler returns. A cancelled request gets no
        response on stdio (MCP forbids one); over streamable HTTP the SDK sends an error.
Rule 4. The call's deadline is the tool's own (``ToolCapabilities.timeout_ms``),
        or ``_meta["dev.kigi/deadline_ms"]`` when the request sets it; past it the
        call ends with a ``timeout`` error result.
Rule 5. An unknown tool is a protocol error (``-32602``); everything a tool does
        wrong (bad arguments, a failure, a timeout) is an ``isError`` result with
        the kigi error code.
Rule 6. A token names one running call per connection (``_claims``): a call
        that brings the progress token (or, as text, the call id) or the
        ``partialResultToken`` of a call still running on its connection is
        refused with ``-32602``, so two calls' output never shares a token.
Rule 7. Each progress ``message`` is in the server's ``message_mode``
        (``_mapping`` Rule 5): ``"status"`` (the default) the newest complete
        line after the loss marker when bytes were lost since the previous
        notification, ``"delta"`` the live text (``LiveText``, the delta after
        a one-line marker where bytes were lost: a gap in the tool's output,
        or frames the queue dropped before this one, Rule 2). A partial
        result's content is always the live text (partial results append). A
        loss known only at the end is said by one closing notification.
Rule 8. A call that declares SEP-2998 partial results (``_partial`` Rule 1) gets
        its frames as partial results instead of progress, then a ``final``
        one; any other call gets none.
Rule 9. At most ``max_calls`` calls run at once, over every connection and
        transport together; one more is refused with the kigi ``tool_busy``
        code (``-32016``), as the stdio server refuses it. Each running call
        holds at most its queue's budget of progress (``outbox_bytes``).
Rule 10. :meth:`McpToolServer.stop_calls` (server shutdown) refuses every new
        call (``session_draining``, ``-32008``) and cancels every running one,
        returning once their tools have stopped (bounded by the stop wait).
Rule 11. Over HTTP (``_http``) a call whose host went away is cancelled as by
        ``notifications/cancelled``, and its progress is sent only while fewer
        than ``_http.PIPE_EVENTS`` of its messages are on their way to its
        socket: a host that stops reading one call's stream stalls that call
        alone (Rule 2 applies to it), never the other calls of its session.
Rule 12. A call with a ``progressToken`` that has written nothing for
        ``heartbeat_s`` seconds gets a heartbeat notification (``_mapping``
        Rule 6) every ``heartbeat_s`` of its silence, timed by the call core
        (``_call/_feed`` Rule 5), so a host that aborts idle calls never sees
        a silent call idle for longer; ``progress`` goes on increasing and the
        frames' ``seq`` has no hole. ``heartbeat_s`` 0 sends none.
Rule 13. A call's producer (the tool's run feeding its queue) is a task of its
        handler's own task group: it has ended when the handler returns or
        raises (after the stop wait it is cancelled, then awaited), and its
        failure is raised from the handler as itself, never lost. The module
        is anyio code throughout, as the SDK it drives is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple, Protocol, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from pydantic import BaseModel

from kigi_tool_protocol import ToolCallProgressFrame
from kigi_tool_protocol._tool_error import ERROR_CODES

from .._call._feed import QueueFeed, produce
from .._call._heartbeat import HEARTBEAT_S, Beat
from .._call._live import LiveText
from .._call._outcome import CallEnd
from .._call._queue import CallQueue, QueuePolicy, StallWatch, Taken
from .._call._run_loop import ended_early
from .._call._status import MESSAGE_MODES, MessageMode, ProgressMessages
from .._mcp_limits import MAX_CALLS_IN_FLIGHT
from .._tools._errors import ToolError
from .._tools._runner import STOP_WAIT_S, ToolRun, run_tool
from .._tools._tool import Tool, ToolContext, ToolResult
from ._claims import Claims
from ._http import Exchange, exchange_of
from ._mapping import (
    META_DEADLINE_MS,
    ProgressNumbering,
    call_id_for,
    closing_params,
    heartbeat_params,
    mcp_tool_name,
    progress_params,
    response_envelope_bytes,
    result_from_terminal,
    tool_definition,
)
from ._partial import METHOD_PARTIAL_RESULT, final_params, partial_params, partial_result_token
from ._privates import connection_of
from ._queued import OUTBOX_BYTES, frame_size, sent_frame

__all__ = ("McpToolServer",)

#: Seconds one progress notification may wait to be taken before the host counts
#: as stalled and the call's oldest queued frames are dropped (Rule 2). Long
#: enough that a busy but live host on a loaded machine is waited for.
STALL_S: Final = 1.0

#: The name the server gives itself in the MCP handshake.
SERVER_NAME: Final = "kigi-tool-runtime"

# Bound on waiting for a cancelled tool beyond the runner's own stop wait.
_STOP_MARGIN_S: Final = 1.0


class McpServerStats(NamedTuple):
    """Counters of a :class:`McpToolServer`: calls started and still running,
    progress notifications sent, and frames dropped for slow hosts (Rule 2)."""

    calls_started: int
    calls_in_flight: int
    notifications_sent: int
    frames_dropped: int


#: One call's frames on their way to the host, then its terminal (Rule 2).
_Feed = QueueFeed[ToolCallProgressFrame[Any], ToolResult | ToolError]


def _queued(frame: ToolCallProgressFrame[Any]) -> tuple[ToolCallProgressFrame[Any], int]:
    """``frame`` as its call's queue holds it, with the bytes it counts."""
    return frame, frame_size(frame)


class McpToolServer:
    """Serve ``tools`` to MCP hosts. :attr:`server` is the SDK's low-level
    ``Server``; run it with :func:`serve_stdio_mcp` or :func:`serve_http_mcp`
    (``_transports``), or hand it to the official ``Client`` in-process.

    ``outbox_bytes`` bounds each call's queued progress (Rule 2), ``max_calls``
    the calls running at once (Rule 9); ``stop_wait`` bounds how long a stopped
    tool may take to clean up; ``message_mode`` is how hosts read the progress
    ``message`` (Rule 7: ``"status"``, the default, for hosts that show the
    latest, ``"delta"`` for hosts that append); ``heartbeat_s`` the silence
    after which a running call says it is alive (Rule 12; 0: never);
    ``stall_s`` how long one notification may wait to be taken before the
    host counts as stalled and the call drops its oldest frames (Rule 2).

    Raises:
        ValueError: two tools map to one MCP name, a schema is not an object at
            the root, ``outbox_bytes`` or ``max_calls`` is below 1, the message
            mode is not one of the two, ``heartbeat_s`` is negative, or
            ``stall_s`` is not a positive number of seconds.
    """

    def __init__(
        self,
        tools: Iterable[Tool[Any]],
        *,
        outbox_bytes: int = OUTBOX_BYTES,
        max_calls: int = MAX_CALLS_IN_FLIGHT,
        stop_wait: float = STOP_WAIT_S,
        name: str = SERVER_NAME,
        version: str = "0.1.0",
        message_mode: MessageMode = "status",
        heartbeat_s: float = HEARTBEAT_S,
        stall_s: float = STALL_S,
    ) -> None:
        if message_mode not in MESSAGE_MODES:
            raise ValueError(f"message_mode must be 'status' or 'delta', got {message_mode!r}")
        if not heartbeat_s >= 0:
            raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
        if not 0 < stall_s < float("inf"):
            raise ValueError(f"stall_s must be a positive number of seconds, got {stall_s}")
        self._stall_s = stall_s
        self._message_mode: MessageMode = message_mode
        self._heartbeat_s = heartbeat_s
        if outbox_bytes < 1:
            raise ValueError(f"outbox_bytes must be at least 1, got {outbox_bytes}")
        if max_calls < 1:
            raise ValueError(f"max_calls must be at least 1, got {max_calls}")
        self._tools: dict[str, Tool[Any]] = {}
        definitions = []
        for tool in tools:
            key = mcp_tool_name(tool.id)
            if key in self._tools:
                raise ValueError(f"two tools have the MCP name {key!r}")
            self._tools[key] = tool
            definitions.append(tool_definition(tool))
        self._definitions = [types.Tool.model_validate(d, by_name=False) for d in definitions]
        self._outbox_bytes = outbox_bytes
        self._max_calls = max_calls
        self._closing = False
        # The running calls (Rules 9 and 10): their contexts, producers and
        # queues.
        self._calls: dict[int, tuple[ToolContext, _Producer, CallQueue[Any, Any]]] = {}
        self._stop_wait = stop_wait
        self._calls_started = 0
        self._in_flight = 0
        self._sent = 0
        self._dropped = 0  # by the calls that ended
        # (connection, kind, token) of the running calls' tokens (Rule 6).
        self._tokens: Claims[tuple[int, str, str]] = Claims()
        self.server: Server[Any] = Server(
            name,
            version=version,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The served tools by MCP name (a copy)."""
        return dict(self._tools)

    def statistics(self) -> McpServerStats:
        """The server's counters (see :class:`McpServerStats`)."""
        dropped = self._dropped + sum(queue.dropped for _, _, queue in self._calls.values())
        return McpServerStats(self._calls_started, self._in_flight, self._sent, dropped)

    async def stop_calls(self) -> None:
        """Refuse new calls from now on and cancel every running one; return
        once their tools have stopped, or after the stop wait (Rule 10)."""
        self._closing = True
        for kctx, _, _ in list(self._calls.values()):
            kctx.cancel()
        producers = [producer for _, producer, _ in self._calls.values()]
        with anyio.move_on_after(self._stop_wait + _STOP_MARGIN_S):
            for producer in producers:
                await producer.ended.wait()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self._definitions))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = self._tools.get(params.name)
        if tool is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Unknown tool: {params.name!r} (tools: {', '.join(sorted(self._tools))})",
            )
        raw = ctx.params if isinstance(ctx.params, Mapping) else None
        token = progress_token_from_params(raw)
        meta = raw.get("_meta") if raw is not None else None
        deadline = meta.get(META_DEADLINE_MS) if isinstance(meta, Mapping) else None
        if deadline is not None and not (
            isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0
        ):
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"_meta[{META_DEADLINE_MS!r}] must be a whole number of milliseconds,"
                f" got {deadline!r}",
            )
        try:
            partial = partial_result_token(meta if isinstance(meta, Mapping) else None)
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        channel: _Channel | None = None
        if partial is not None:
            channel = _PartialChannel(partial, token)
        elif token is not None:
            channel = _ProgressChannel(token)
        call_id = call_id_for(token if token is not None else partial, ctx.request_id)
        try:
            call_id.encode("utf-8")
        except UnicodeEncodeError:
            raise MCPError(
                code=types.INVALID_PARAMS, message="the progressToken is not valid Unicode text"
            ) from None
        # The SDK makes a session object per request; the connection under it
        # is what a token must be unique on, read in `_privates` (Rule 1).
        connection = connection_of(ctx.session)
        keys: list[tuple[int, str, str]] = []
        if channel is not None:
            keys.append((id(connection), "call", call_id))
        if partial is not None:
            keys.append((id(connection), "partial", str(partial)))
        if self._closing:
            raise MCPError(
                code=ERROR_CODES["session_draining"],
                message="the server is shutting down and takes no new calls",
            )
        if len(self._calls) >= self._max_calls:
            raise MCPError(
                code=ERROR_CODES["tool_busy"],
                message=f"{self._max_calls} calls are already running on this server;"
                " retry when one has finished",
            )
        held = self._tokens.claim(keys)
        if held is not None:
            _, kind, _ = held
            named = (
                f"partialResultToken {partial!r}"
                if kind == "partial"
                else f"progressToken {token if token is not None else partial!r}"
            )
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"the {named} is in use by a call still running (MCP wants one"
                " token per active request); its output would mix with that call's",
            )
        exchange = exchange_of(ctx.request)
        kctx = ToolContext(call_id, wants_progress=channel is not None)
        queue: CallQueue[ToolCallProgressFrame[Any], ToolResult | ToolError] = CallQueue(
            QueuePolicy.drop_oldest_when_stalled(self._outbox_bytes)
        )
        watch = StallWatch(self._stall_s)
        feed = QueueFeed(queue, watch)
        numbering = ProgressNumbering()
        live = LiveText(call_id)
        run = run_tool(
            tool, params.arguments or {}, ctx=kctx, timeout_ms=deadline, stop_wait=self._stop_wait
        )
        self._calls_started += 1
        self._in_flight += 1
        producer = _Producer()
        self._calls[id(kctx)] = (kctx, producer, queue)
        closing = ""
        # What ended the call otherwise than by its terminal, raised after the
        # group as itself (an anyio group would wrap it); a cancellation alone
        # goes through the group.
        stopped: BaseException | None = None
        try:
            # Rule 13: the producer is this handler's; the group has awaited
            # it when the handler goes on.
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(
                    producer.run,
                    run,
                    feed,
                    self._heartbeat_s if channel is not None else 0.0,
                    meta if isinstance(meta, Mapping) else None,
                    name=f"kigi mcp call {call_id}",
                )
                with anyio.CancelScope() as gone_scope:
                    if exchange is not None:
                        exchange.on_leave = gone_scope.cancel  # Rule 11
                    try:
                        if channel is not None:
                            closing = await self._send_frames(
                                ctx, channel, live, feed, watch, numbering, exchange
                            )
                        await producer.ended.wait()
                    except BaseException as exc:
                        # Rule 3: cancelled (by the host, its going away, or shutdown).
                        await producer.stop(kctx, feed, self._stop_wait + _STOP_MARGIN_S)
                        if isinstance(exc, anyio.get_cancelled_exc_class()):
                            raise
                        stopped = producer.failed_with(exc)
        except anyio.get_cancelled_exc_class():
            if producer.failure is None:
                raise
            # Rule 13: heard even when the call was cancelled (as a TaskGroup
            # raises its tasks' failures).
            stopped = producer.failure
        finally:
            if exchange is not None:
                exchange.on_leave = None
            self._in_flight -= 1
            del self._calls[id(kctx)]
            self._dropped += queue.dropped
            self._tokens.release(keys)
        if stopped is not None:
            raise stopped
        if producer.failure is not None:
            raise producer.failure  # Rule 13: heard, as itself
        if gone_scope.cancelled_caught:
            # Rule 11: the host's HTTP stream closed and the call was cancelled;
            # this answer has nowhere to go (the SDK drops it).
            raise MCPError(
                code=ERROR_CODES["connection_lost"],
                message="the host's stream for this call closed; the call was cancelled",
            )
        terminal = producer.terminal
        assert terminal is not None, "a producer that did not fail has its terminal"
        # The call's one end (``_call/_outcome`` Rule 4): the loss of the
        # output sent (its gaps, the frames dropped) said as every host says it.
        end = CallEnd.of(
            call_id,
            tool.id,
            terminal,
            live.report(),
            frames=live.frames,
            dropped=queue.dropped,
            closing=closing,
        )
        result = result_from_terminal(
            end,
            tool,
            requested=channel is not None,
            beats=numbering.beats,
            envelope_bytes=response_envelope_bytes(ctx.request_id),
        )
        return types.CallToolResult.model_validate(result, by_name=False)

    async def _send_frames(
        self,
        ctx: ServerRequestContext[Any],
        channel: _Channel,
        live: LiveText,
        feed: _Feed,
        watch: StallWatch,
        numbering: ProgressNumbering,
        exchange: Exchange | None,
    ) -> str:
        """Send every queued frame, in order, until the queue's reply (the
        tool's terminal, Rule 1), each with its message (Rule 7) and the
        ``seq`` its queue took it with, folded into ``live``, and each
        heartbeat (Rule 12); then the channel's closing notification, if it
        has one; over HTTP only while the call's pipe has room (Rule 11).
        Returns the live text's closing text."""
        clock = anyio.current_time
        session = ctx.session
        request_id = ctx.request_id
        messages = ProgressMessages(self._message_mode, clock())
        while True:
            taken = await feed.get()
            note: types.ServerNotification | None
            if isinstance(taken, Beat):
                note = channel.beat(numbering, taken, messages.heartbeat(taken))
                if note is None:
                    continue
            elif isinstance(taken, Taken):
                frame = sent_frame(taken)
                # The producer checked that the body and kind encode, and the call
                # checked its id: this cannot fail, so no seq is ever skipped.
                # The seq is the queue's, the call's one number of the frame.
                progress = numbering.frame(taken.seq)
                delta = live.add(frame, taken.seq)
                text = delta.text if channel.appends else messages.frame(delta, clock())
                note = channel.frame(taken.seq, progress, frame, text)
            else:
                break
            watch.sending(clock())
            if exchange is not None:
                await exchange.room()
            await session.send_notification(note, related_request_id=request_id)
            watch.sent()
            self._sent += 1
        finished = live.finish()
        closing_text = finished if channel.appends else messages.closing(finished, clock())
        closing = channel.end(numbering, closing_text)
        if closing is not None:
            if exchange is not None:
                await exchange.room()
            await session.send_notification(closing, related_request_id=request_id)
        return finished


class _Producer:
    """One call's producer (Rule 13): runs the tool, queues its frames (Rule 2)
    and heartbeats (Rule 12), and keeps its terminal, which is also the
    queue's reply: the sender's last item (Rule 1). Shielded from the
    handler's cancellation, which stops the tool through its context
    instead (Rule 3); :attr:`scope` cancels it outright."""

    __slots__ = ("ended", "failure", "scope", "terminal")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope(shield=True)
        self.ended = anyio.Event()
        self.terminal: ToolResult | ToolError | None = None
        self.failure: Exception | None = None

    async def run(
        self, run: ToolRun, feed: _Feed, heartbeat_s: float, meta: Mapping[str, Any] | None
    ) -> None:
        try:
            with self.scope:
                # _meta's traceparent/tracestate (VS Code sends them) parent its span.
                self.terminal = await produce(
                    run, feed, _queued, heartbeat_s=heartbeat_s, trace=meta
                )
        except Exception as failure:  # kept for the handler, which raises it
            self.failure = failure
        finally:
            # Failed or cancelled: the sender still ends (on a reply it never sends).
            terminal = self.terminal
            feed.finish(terminal if terminal is not None else ended_early(self.failure))
            self.ended.set()

    async def stop(self, ctx: ToolContext, feed: _Feed, wait_s: float) -> None:
        """Rule 3: stop the tool through its context, then wait for the
        producer's end at most ``wait_s`` (shielded: the handler is being
        cancelled), then cancel it outright (a no-op once it ended)."""
        ctx.cancel()
        feed.give_up()
        with anyio.CancelScope(shield=True), anyio.move_on_after(wait_s):
            await self.ended.wait()
        self.scope.cancel()

    def failed_with(self, exc: BaseException) -> BaseException:
        """What the handler raises when its sending failed with ``exc``: that,
        or it together with the producer's own failure (Rule 13)."""
        if self.failure is None:
            return exc
        return BaseExceptionGroup("the call's sending and its producer failed", [exc, self.failure])


class _Channel(Protocol):
    """Where a call's frames go: progress (``progressToken``) or SEP-2998
    partial results (``partialResultToken``, Rule 8). ``appends``: the host
    appends each text (partial results), so it gets the live text whatever
    the message mode."""

    appends: bool

    def frame(
        self, seq: int, progress: int, frame: ToolCallProgressFrame[Any], text: str
    ) -> types.ServerNotification: ...

    def beat(
        self, numbering: ProgressNumbering, beat: Beat, message: str | None
    ) -> types.ServerNotification | None: ...

    def end(
        self, numbering: ProgressNumbering, closing: str
    ) -> types.ServerNotification | None: ...


class _ProgressChannel:
    __slots__ = ("token",)

    appends = False

    def __init__(self, token: str | int) -> None:
        self.token = token

    def frame(
        self, seq: int, progress: int, frame: ToolCallProgressFrame[Any], text: str
    ) -> types.ServerNotification:
        return _progress_notification(progress_params(self.token, seq, frame, text, progress))

    def beat(
        self, numbering: ProgressNumbering, beat: Beat, message: str | None
    ) -> types.ServerNotification | None:
        return _beat_notification(self.token, numbering, beat, message)

    def end(self, numbering: ProgressNumbering, closing: str) -> types.ServerNotification | None:
        if not closing:
            return None
        params = closing_params(self.token, numbering.last_progress + 1, closing)
        return _progress_notification(params)


def _beat_notification(
    token: str | int, numbering: ProgressNumbering, beat: Beat, message: str | None
) -> types.ServerNotification:
    return _progress_notification(heartbeat_params(token, numbering.beat(), beat, message))


def _progress_notification(params: dict[str, Any]) -> types.ServerNotification:
    """The ``notifications/progress`` with ``params`` (``_mapping``'s wire
    spelling). Built by the mapping, so valid by construction: skip
    re-validating a 16 KiB delta per frame."""
    return types.ProgressNotification.model_construct(
        method="notifications/progress",
        params=types.ProgressNotificationParams.model_construct(
            progress_token=params["progressToken"],
            progress=params["progress"],
            message=params.get("message"),
            meta=params["_meta"],
        ),
    )


class _RawNotification(BaseModel):
    """A notification the SDK has no type for (its sender only dumps it)."""

    method: str
    params: dict[str, Any]


class _PartialChannel:
    """Partial results; heartbeats go as progress when the call also brought a
    ``progressToken`` (the draft has no notification of its own for them)."""

    __slots__ = ("progress_token", "token")

    appends = True

    def __init__(self, token: str | int, progress_token: str | int | None) -> None:
        self.token = token
        self.progress_token = progress_token

    def frame(
        self, seq: int, progress: int, frame: ToolCallProgressFrame[Any], text: str
    ) -> types.ServerNotification:
        note = _RawNotification(
            method=METHOD_PARTIAL_RESULT, params=partial_params(self.token, seq, frame, text)
        )
        return cast("types.ServerNotification", note)

    def beat(
        self, numbering: ProgressNumbering, beat: Beat, message: str | None
    ) -> types.ServerNotification | None:
        if self.progress_token is None:
            return None
        return _beat_notification(self.progress_token, numbering, beat, beat.text())

    def end(self, numbering: ProgressNumbering, closing: str) -> types.ServerNotification | None:
        note = _RawNotification(
            method=METHOD_PARTIAL_RESULT, params=final_params(self.token, numbering.sent, closing)
        )
        return cast("types.ServerNotification", note)
