"""``Server``: serve tools to one peer, over a reader and a writer (stdin and
stdout, a pipe), as JSON lines of JSON-RPC 2.0.

Invariants:

Rule 1. One JSON-RPC message per line. A ``tool.call`` (or ``tool_call_request``)
        request streams ``tool_call_progress`` notifications, then exactly one
        response: the ``ToolCallResult``, or an error whose ``message`` is the
        tool error's detail, ``code`` is ``error_code_for(data)`` and ``data``
        the ``ToolErrorWire``. Any number of calls run at once (up to
        :data:`MAX_CALLS_IN_FLIGHT`). A progress item JSON cannot carry (a
        lone surrogate in its kind or body) ends its call with an
        ``internal_error`` naming the kind; the other calls go on. No line
        longer than a peer takes is written: a progress line past the tool's
        declared ``max_frame_bytes`` (else ``MAX_FRAME_BYTES_CEILING``), or a
        result line past the ceiling, ends its call with ``frame_too_large``
        instead, saying both sizes.
Rule 2. Every progress notification carries the call's own ``seq``: 0, 1, 2, ...
        in the order the notifications are *written*, so ``seq`` never has a
        hole. Frames the server had to drop are counted instead: the next frame
        written for that call carries ``dropped_count`` = how many frames were
        dropped immediately before it (absent when none). A hole in ``seq`` can
        therefore only mean the transport lost a line.
Rule 3. Memory is bounded, and a slow reader slows the tool before anything
        is dropped. Each call queues at most :data:`CALL_QUEUE_BYTES` of encoded
        progress. While the output is moving, a full queue pauses the call (the
        runner then pauses the tool; the shell tool keeps reading its child into
        its bounded tail and reports what it skipped as a gap). Once the output
        has let no byte out for :data:`WRITER_STALL_S` (the peer stopped reading), the
        call is no longer paused: a frame that would pass the budget drops the
        *oldest* queued frames instead (the newest is always kept, so every drop
        is reported on a later frame). For a streamed ``PartialResultPayload``
        the consumer sees a hole in the text between the frame before the drop
        and the frame carrying ``dropped_count``; its ``total_bytes`` still
        counts everything. The final response is never dropped and is written
        after the call's last queued frame. One writer turn hands the output at
        most :data:`MAX_WRITE_BYTES`, whatever the number of calls.
Rule 4. A bad line never stops the server: unparseable JSON (nested too deeply
        to decode included) gets -32700, a
        message that is not a valid request -32600, an unknown method -32601,
        bad params -32602 (``invalid_params`` data), a line longer than the frame
        limit -32018 (``frame_too_large`` data, without the line ever being held
        whole). The ``id`` is echoed when it could be read, else ``null`` (a
        lone surrogate escape is a -32700 that names it and keeps the id).
        :class:`JsonRpcResponse` cannot carry a ``null`` id, so those replies are
        written by hand (``null_id_error``). Unknown notifications are ignored.
        A call whose ``id`` is that of a call still in flight is refused with
        -32600 and a ``null`` id.
Rule 5. Cancellation: a ``hook`` (notification or request) whose event is
        ``Cancel`` and whose ``call_id`` names a call in flight, or
        ``tool.cancel`` with ``{"tool_call_id": ...}``, stops that call, which
        ends with a ``cancelled`` error. ``SessionEnded`` cancels every call.
Rule 6. End of input cancels every call in flight, writes their final
        responses, flushes, and returns. An output that breaks cancels
        every call and returns. The final flush waits while the output moves,
        for at most :data:`FINAL_FLUSH_S`, and gives up once no byte has left
        for :data:`WRITER_STALL_S` (a peer that stopped reading): the lines it
        never wrote are counted (``ServerStats.lines_abandoned``), and
        ``serve`` returns all the same.
Rule 7. A tool that does not stop within ``stop_wait`` of its call being
        stopped (it swallows ``CancelledError``) is given up on: its call ends
        all the same, with an error that says the tool was left running, and
        its id is listed in ``ServerStats.calls_abandoned``. Its task runs on
        in the event loop (which ``asyncio.run`` waits for on its way out;
        ``kigi-stream serve`` exits without waiting, which also ends the
        process groups the tool held on the lifeline, ``_process.hold``).
Rule 8. ``serve`` owns its tasks (the writer, the reader, one per call) in one
        ``asyncio.TaskGroup``: each has ended when it returns or raises, and a
        task's failure (the input broke, a bug) is raised from it, a lone one as
        itself, several in an exception group. The tool tasks of Rule 7 are the
        runner's, not the group's.
Rule 9. A call that has written nothing for ``heartbeat_s`` seconds gets a
        ``tool_call_heartbeat`` notification (``_wire/_rpc_lines``), again every
        ``heartbeat_s`` of its silence, timed by the call core (``_call/_feed``
        Rule 5): ``{"tool_call_id", "elapsed_ms", "silent_ms"}`` with the
        call's ``session_id`` and no ``seq``, so the frames' ``seq`` keeps no
        hole and a consumer that does not know the method skips it. Never
        after the call's response; ``heartbeat_s`` 0 sends none.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

import msgspec

from kigi_tool_protocol import ToolCallParams
from kigi_tool_protocol._capabilities import effective_max_frame_bytes
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING

from .._call._feed import QueueFeed, produce
from .._call._heartbeat import HEARTBEAT_S
from .._call._outcome import CallEnd
from .._call._queue import CallQueue, QueuePolicy
from .._call._serving import SERVER_CANCEL_MESSAGE
from .._call._sink import Sink
from .._call._writer import LineOutput
from .._lines import read_lines
from .._otel import TRACEPARENT
from .._tools._errors import ToolError
from .._tools._runner import STOP_WAIT_S, run_tool
from .._tools._tool import Tool, ToolContext
from .._wire._rpc_lines import end_line
from ._rpc_server import (
    ProgressItem,
    Reply,
    ServerProtocol,
    StartCall,
    progress_item_of,
    take_lines,
)

__all__ = ("Server",)

#: Encoded progress bytes one call may have waiting to be written. 1 MiB is 64
#: full 16 KiB deltas: a reader that pauses for a moment loses nothing; past it
#: older frames are dropped (Rule 3). This is the server's share of what a call
#: whose reader stopped holds, not all of it: a shell tool call also holds its
#: tail (1 MiB kept, in storage of twice that) and the frames on their way from
#: the tool to this queue, about 4.5 MiB in all (64 calls of ``yes``, the most one
#: connection runs, took a server from 28 to about 300 MiB).
CALL_QUEUE_BYTES: Final = 1024 * 1024


#: Replies not tied to a running call (errors for bad lines, cancel acks) that may
#: wait to be written. Past it the server stops reading input until the peer
#: reads its output, so a peer that floods garbage and never reads cannot grow it.
MAX_CONTROL_LINES: Final = 1024

#: Bytes of such replies that may wait to be written, for the same reason: an
#: error reply quotes at most an excerpt of what it answers, so this is dozens
#: of replies at least, and a peer that never reads cannot grow it past here.
MAX_CONTROL_BYTES: Final = 1024 * 1024

#: Bytes taken from one call's queue per writer turn before the next call gets
#: its turn: fairness between calls.
WRITE_BATCH_BYTES: Final = 256 * 1024

#: Bytes one writer turn hands the output at most, whatever the number of calls:
#: what sits in the transport while a peer stops reading (64 calls' turns were
#: 16 MiB). The calls left out this turn go first in the next.
MAX_WRITE_BYTES: Final = 1024 * 1024


def _failed_to_answer(exc: Exception) -> ToolError:
    """The error a call ends with when the server could not encode its answer."""
    return ToolError("internal_error", f"the server failed to answer: {exc}")


class ServerStats(NamedTuple):
    """Counters of a :class:`Server`: calls started and still in flight, progress
    frames written and dropped (Rule 3), input lines rejected (Rule 4), lines
    (replies and frames) never written because the final flush gave up on a
    peer that stopped reading (Rule 6), and the ids of calls whose tool did not
    stop within ``stop_wait`` of being stopped and was left running (Rule 7)."""

    calls_started: int
    calls_in_flight: int
    frames_written: int
    frames_dropped: int
    lines_rejected: int
    lines_abandoned: int = 0
    calls_abandoned: tuple[str, ...] = ()


class _CallOut:
    """One call's way out: its queue (kind and encoded body per frame, then the
    final response line) behind its feed, and what its lines carry."""

    __slots__ = ("_writer", "call_id", "feed", "scheduled", "session_id")

    def __init__(self, call_id: str, session_id: str | None, writer: _Writer) -> None:
        self.call_id = call_id
        self.session_id = session_id
        self._writer = writer
        self.scheduled = False  # whether it waits in the writer's turn
        queue: CallQueue[ProgressItem, bytes] = CallQueue(writer.policy)
        self.feed = QueueFeed(queue, writer, on_ready=self._ready)

    def _ready(self) -> None:
        if not self.scheduled:
            self._writer.schedule(self)


class _Writer:
    """The one task that writes: control replies first, then calls in turn,
    each batch through the output every line-batching server shares
    (``_call/_writer``'s :class:`LineOutput`), which is the calls' stall
    verdict (Rule 3)."""

    def __init__(self, sink: Sink, budget: int) -> None:
        self.policy = QueuePolicy.drop_oldest_when_stalled(budget)
        self._control: deque[bytes] = deque()
        self._control_bytes = 0
        self._ready: deque[_CallOut] = deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._closing = False
        self.frames_written = 0
        self.abandoned = 0
        self.output = LineOutput(sink, asyncio.get_running_loop().time)

    @property
    def broken(self) -> bool:
        """The output broke, or was abandoned: nothing more is written."""
        return self.output.broken

    def stalled(self, now: float) -> bool:
        """True when a write is pending and no byte of it has left for
        :data:`WRITER_STALL_S` (Rule 3). A slow reader that keeps taking bytes,
        however few, is not stalled."""
        return self.output.stalled(now)

    def recheck_in(self, now: float) -> float:
        """Seconds after which :meth:`stalled` could turn true."""
        return self.output.recheck_in(now)

    def control(self, line: bytes) -> None:
        if self.broken:
            return
        self._control.append(line)
        self._control_bytes += len(line)
        if len(self._control) >= MAX_CONTROL_LINES or self._control_bytes >= MAX_CONTROL_BYTES:
            self._space.clear()
        self._wake.set()

    async def wait_for_space(self) -> None:
        await self._space.wait()

    def schedule(self, call: _CallOut) -> None:
        """``call`` has a frame or its final response to write."""
        # A call already in the turn is seen by a writer that is not waiting.
        if call.scheduled or self.broken:
            return
        call.scheduled = True
        self._ready.append(call)
        self._wake.set()

    def close(self) -> None:
        """Finish once everything queued is written."""
        self._closing = True
        self._wake.set()

    def abandon(self) -> int:
        """Drop everything still queued (the output is not being read); returns
        how many lines that was."""
        lines = len(self._control) + self._drop_all()
        self.abandoned += lines
        return lines

    def _drop_all(self) -> int:
        """Nothing more is written: drop the queued lines, free every waiting
        call; returns how many call lines were dropped."""
        self.output.broke()
        lines = 0
        for call in self._ready:
            lines += call.feed.queue.discard()
            call.feed.give_up()
        self._ready.clear()
        self._control.clear()
        self._control_bytes = 0
        self._space.set()
        return lines

    async def run(self) -> None:
        """Write until closed and flushed (the shared writer loop,
        ``LineOutput.run``). Returns early, with ``broken`` set, if the output
        fails."""
        if not await self.output.run(self._gather):
            self._drop_all()

    async def _gather(self) -> bytearray | None:
        """The next batch: the control replies, then the calls in turn, up to
        :data:`MAX_WRITE_BYTES`; ``None`` once closed with nothing left."""
        control, ready = self._control, self._ready
        while not control and not ready:
            if self._closing:
                return None
            self._wake.clear()
            await self._wake.wait()
        batch = bytearray()
        while control:
            batch += control.popleft()
        self._control_bytes = 0
        self._space.set()
        for _ in range(len(ready)):
            if len(batch) >= MAX_WRITE_BYTES:
                break
            call = ready.popleft()
            queue = call.feed.queue
            taken, finished = take_lines(
                queue, call.call_id, call.session_id, WRITE_BATCH_BYTES, batch
            )
            if taken:
                self.frames_written += taken
                call.feed.took()
            if not finished and len(queue):
                ready.append(call)
            else:
                call.scheduled = False
        return batch


class _Call(NamedTuple):
    ctx: ToolContext
    task: asyncio.Task[None]
    request_id: str | int
    out: _CallOut


class Server:
    """Serve ``tools`` (by id) to one peer over a reader and a writer.

    ``max_frame_bytes`` bounds an input line (longer ones are rejected unread);
    ``call_queue_bytes`` is the per-call output budget of Rule 3; ``stop_wait``
    bounds how long a cancelled tool may take to clean up; ``heartbeat_s`` is
    the silence after which a running call says it is alive (Rule 9; 0: never).

    Raises:
        ValueError: two tools share an id, a bound is below 1,
            ``heartbeat_s`` is negative, or ``stop_wait`` is not positive.
    """

    def __init__(
        self,
        tools: Iterable[Tool[Any]],
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES_CEILING,
        call_queue_bytes: int = CALL_QUEUE_BYTES,
        stop_wait: float = STOP_WAIT_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        if not heartbeat_s >= 0:
            raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
        if not stop_wait > 0:  # as each call's run would find (run_tool)
            raise ValueError(f"stop_wait must be > 0 seconds, got {stop_wait}")
        self._heartbeat_s = heartbeat_s
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            if tool.id in self._tools:
                raise ValueError(f"two tools have the id {tool.id!r}")
            self._tools[tool.id] = tool
        if max_frame_bytes < 1 or call_queue_bytes < 1:
            raise ValueError(
                f"max_frame_bytes and call_queue_bytes must be at least 1, got"
                f" {max_frame_bytes} and {call_queue_bytes}"
            )
        self._max_frame_bytes = max_frame_bytes
        self._call_queue_bytes = call_queue_bytes
        self._stop_wait = stop_wait
        self._calls: dict[str, _Call] = {}
        self._writer: _Writer | None = None
        self._tasks: asyncio.TaskGroup | None = None  # the serving connection's
        self._protocol = ServerProtocol(self._tools, self._describe)
        self._abandoned: list[str] = []  # Rule 7
        self._dropped_by_ended = 0  # frames the queues of calls that ended dropped

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The served tools by id (a copy)."""
        return dict(self._tools)

    def statistics(self) -> ServerStats:
        """The server's counters (see :class:`ServerStats`)."""
        writer = self._writer
        return ServerStats(
            self._protocol.calls_started,
            len(self._calls),
            0 if writer is None else writer.frames_written,
            self._dropped_by_ended + sum(c.out.feed.queue.dropped for c in self._calls.values()),
            self._protocol.lines_rejected,
            0 if writer is None else writer.abandoned,
            tuple(self._abandoned),
        )

    async def serve(self, reader: asyncio.StreamReader, writer: Sink) -> None:
        """Serve until end of input (Rule 6) or until the output breaks.

        Raises:
            RuntimeError: this server is already serving.
            OSError: reading the input failed (Rule 8; the calls were stopped).
        """
        if self._writer is not None:
            raise RuntimeError("this Server is already serving a connection")
        out = self._writer = _Writer(writer, self._call_queue_bytes)
        try:
            await self._serve(reader, out)
        except BaseExceptionGroup as group:
            if len(group.exceptions) > 1:
                raise
            # One failure (an input that broke, say) is raised as itself.
            raise group.exceptions[0] from None

    async def _serve(self, reader: asyncio.StreamReader, out: _Writer) -> None:
        # The writer, the reader and every call live in one group, which
        # ``serve`` does not leave before each has ended. A task that fails
        # (the reader's input broke; a bug) stops the others and its error is
        # raised from ``serve``. Rule 6's orderly end runs inside the group, so
        # by the time the group closes nothing is left to cancel, unless
        # ``serve`` was cancelled again during it.
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            write_task = tasks.create_task(out.run(), name="kigi server writer")
            read_task = tasks.create_task(self._read_loop(reader, out), name="kigi server reader")
            try:
                await asyncio.wait({read_task, write_task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                read_task.cancel()
                await asyncio.wait({read_task})  # its failure is the group's to raise
                # Rule 6: cancel what is in flight; their cancelled replies still go out.
                calls = list(self._calls.values())
                for call in calls:
                    # A call its peer cancelled first keeps the peer's reason.
                    call.ctx.cancel(SERVER_CANCEL_MESSAGE)
                if calls:
                    await asyncio.wait({c.task for c in calls})
                out.close()
                await self._final_flush(out, write_task)

    @staticmethod
    async def _final_flush(out: _Writer, write_task: asyncio.Task[None]) -> None:
        """Rule 6: wait for the writer while the output moves, within bounds
        (the final flush every line-batching server shares, ``_call/_writer``)."""

        async def wait(seconds: float) -> None:
            await asyncio.wait({write_task}, timeout=seconds)

        started = asyncio.get_running_loop().time()
        if not await out.output.final_flush(started, write_task.done, wait):
            write_task.cancel()
            await asyncio.wait({write_task})  # its cancellation, not ours, ends it
            out.abandon()

    async def _read_loop(self, reader: asyncio.StreamReader, out: _Writer) -> None:
        protocol = self._protocol
        async for line in read_lines(reader, self._max_frame_bytes):
            await out.wait_for_space()
            for event in protocol.receive_line(line):
                if isinstance(event, Reply):
                    out.control(event.line)
                elif isinstance(event, StartCall):
                    self._start_call(event, out)
                else:
                    self._calls[event.call_id].ctx.cancel()

    def _describe(self) -> list[dict[str, Any]]:
        return [
            {
                "id": tool.id,
                "description": tool.description,
                "input_schema": tool.input_schema(),
                "capabilities": tool.capabilities,
            }
            for tool in self._tools.values()
        ]

    def _start_call(self, event: StartCall, out: _Writer) -> None:
        params = event.params
        call_id = params.tool_call_id
        ctx = ToolContext(call_id)
        call_out = _CallOut(call_id, event.session_id, out)
        assert self._tasks is not None  # calls start only while serving
        task = self._tasks.create_task(
            self._run_call(self._tools[params.tool_id], params, ctx, event.request_id, call_out),
            name=f"kigi call {call_id}",
        )
        self._calls[call_id] = _Call(ctx, task, event.request_id, call_out)

    async def _run_call(
        self,
        tool: Tool[Any],
        params: ToolCallParams[msgspec.Raw],
        ctx: ToolContext,
        request_id: str | int,
        out: _CallOut,
    ) -> None:
        session_id = out.session_id
        queue = out.feed.queue
        try:
            run = run_tool(
                tool,
                bytes(params.arguments),
                ctx=ctx,
                timeout_ms=params.deadline_ms,
                stop_wait=self._stop_wait,
            )
            # Rule 1: no line longer than a peer takes leaves the server; the
            # tool's declared limit, else the ceiling every peer takes.
            limit = effective_max_frame_bytes(tool.capabilities)
            item_of = progress_item_of(out.call_id, session_id, limit)
            trace = None if params.trace_context is None else {TRACEPARENT: params.trace_context}
            terminal = await produce(
                run, out.feed, item_of, heartbeat_s=self._heartbeat_s, trace=trace
            )
            if run.left_running:  # Rule 7: its error says so already
                self._abandoned.append(ctx.call_id)
            # The call's one end (``_call/_outcome`` Rule 4).
            end = CallEnd.of(
                ctx.call_id,
                tool.id,
                terminal,
                None,
                frames=queue.taken + len(queue),
                dropped=queue.dropped,
            )
            final = _final_line(request_id, session_id, end)
        except Exception as exc:  # the run failed outside the tool: still answer the call
            end = CallEnd.of(ctx.call_id, tool.id, _failed_to_answer(exc), None, frames=0)
            final = end_line(request_id, session_id, end)
        finally:
            del self._calls[ctx.call_id]
            self._protocol.call_ended(ctx.call_id)
            self._dropped_by_ended += queue.dropped
        out.feed.finish(final)


def _final_line(request_id: str | int, session_id: str | None, end: CallEnd) -> bytes:
    """The response line of ``end``; a result line no peer takes (Rule 1) or
    one that cannot be encoded ends the call with the error saying so."""
    try:
        final = end_line(request_id, session_id, end)
    except Exception as exc:  # encoding a result failed: still answer the call
        return end_line(request_id, session_id, end.failed(_failed_to_answer(exc)))
    if end.ok and len(final) - 1 > MAX_FRAME_BYTES_CEILING:
        error = ToolError.frame_too_large(len(final) - 1, MAX_FRAME_BYTES_CEILING)
        return end_line(request_id, session_id, end.failed(error))
    return final
