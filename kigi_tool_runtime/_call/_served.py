"""``ServedCall``: one tool call as a host serves it, the thin asyncio driver
over the runner (:func:`run_tool`) and :class:`LiveText`.

Invariants:

Rule 1. Iterating a served call yields one :class:`LiveDelta` per frame the
        tool streams, in order, numbered from 0, as each is produced; then
        :attr:`ServedCall.end` says how the call ended. A call always ends:
        bad arguments, a failure, a deadline and a cancel are error ends.
Rule 2. Backpressure, not buffering: the next frame is made only when the host
        asks for it, so a slow host pauses the tool (whose own bounded tail
        keeps the newest bytes and reports what it skipped as a gap).
Rule 3. Leaving ``async with`` before the end (a ``break``, an exception, the
        host's task cancelled) cancels the call and waits, bounded by the
        runner's stop wait, for the tool to stop: the shell tool's process
        group is gone when ``__aexit__`` returns.
Rule 4. :meth:`ServedCall.cancel` may be called from any thread; the call then
        ends with a ``cancelled`` error.
Rule 5. :meth:`ServedCall.events` yields the same deltas and, with a
        ``heartbeat_s``, a :class:`Beat` each time the call has written nothing
        for that long, for hosts that tell a silent call is alive. The beats
        are timed where every queued server's are (``_call/_feed``'s
        ``produce``, run in a task of the call's own that may make at most
        :data:`BEATING_AHEAD_FRAMES` frames ahead of the host: Rule 2 holds
        past those); leaving early cancels
        that task and waits for it, and Rule 3 holds as before. Plain
        iteration yields no beats and makes no task.
Rule 6. With OpenTelemetry, each call records one span (``_otel``), a child
        of the span current where it is iterated (or of ``trace``), ended
        with the call's end and its live text's loss reports.
Rule 7. Both ways run the call through its one loop (``_call/_run_loop``'s
        :class:`CallLoop`): plain iteration steps it in the host's task, a
        beating call hands it to ``produce``; the loop decides the terminal
        and ends the span (left early: ``cancelled``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final, cast

from kigi_tool_protocol import ToolCallProgressFrame

from .._closing import AsyncClosing
from .._otel import start_call_span
from .._scope import TaskScope
from .._tools._errors import ToolError
from .._tools._runner import STOP_WAIT_S, decode_args, run_tool
from .._tools._tool import Tool, ToolContext, ToolResult
from ._feed import QueueFeed, produce
from ._heartbeat import Beat
from ._live import LiveDelta, LiveText
from ._outcome import CallEnd
from ._queue import CallQueue, QueuePolicy, StallWatch, Taken
from ._run_loop import CallLoop, ended_early

__all__ = ("ServedCall",)


def check_arguments(tool: Tool[Any], raw_arguments: Any) -> Any:
    """``raw_arguments`` decoded strictly as ``tool.args_type`` (JSON text, JSON
    values, or an instance of the type), as every host checks them.

    Raises:
        ToolError: ``invalid_params``, naming the offending field's path.
    """
    return decode_args(tool, raw_arguments)


class ServedCall(AsyncClosing):
    """Serve one call of ``tool`` with ``arguments`` (see the module's rules).

    ``call_id`` is the call's ``tool_call_id``; ``wants_progress``: whether the
    host takes live output (without it no frame is made); ``timeout_ms``: the
    call's deadline (``None``: the tool's own); ``stop_wait``: how long a
    stopped tool may take to clean up; ``heartbeat_s``: the silence after
    which :meth:`events` yields a :class:`Beat` (Rule 5; 0: never);
    ``trace``: the trace context the call came with (``traceparent``,
    ``tracestate``), for its span (Rule 6).

    Raises:
        ValueError: ``heartbeat_s`` is negative.
    """

    def __init__(
        self,
        tool: Tool[Any],
        arguments: Any,
        *,
        call_id: str,
        wants_progress: bool = True,
        timeout_ms: float | None = None,
        stop_wait: float = STOP_WAIT_S,
        heartbeat_s: float = 0.0,
        trace: Mapping[str, Any] | None = None,
    ) -> None:
        if not heartbeat_s >= 0:
            raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
        self._heartbeat_s = heartbeat_s
        self._trace = trace
        self._tool = tool
        self._ctx = ToolContext(call_id, wants_progress=wants_progress)
        self._run = run_tool(
            tool, arguments, ctx=self._ctx, timeout_ms=timeout_ms, stop_wait=stop_wait
        )
        self._live = LiveText(call_id)
        self._end: CallEnd | None = None
        self._gen: AsyncGenerator[Any, None] | None = None

    def __repr__(self) -> str:
        return f"ServedCall(tool={self._tool.id!r}, call_id={self._ctx.call_id!r})"

    @property
    def call_id(self) -> str:
        return self._ctx.call_id

    @property
    def tool(self) -> Tool[Any]:
        return self._tool

    @property
    def ctx(self) -> ToolContext:
        """The call's context (its id, whether progress is wanted, its cancel)."""
        return self._ctx

    @property
    def live(self) -> LiveText:
        """The call's live text so far (its fold and loss report)."""
        return self._live

    @property
    def end(self) -> CallEnd:
        """How the call ended.

        Raises:
            RuntimeError: the call has not ended yet.
        """
        if self._end is None:
            raise RuntimeError(f"call {self.call_id!r} has not ended yet")
        return self._end

    @property
    def ended(self) -> bool:
        return self._end is not None

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the call (Rule 4); ``reason`` (why it was stopped) is its
        ``cancelled`` error's message (``ToolContext.cancel``). Idempotent:
        the first reason is kept."""
        self._ctx.cancel(reason)

    def __aiter__(self) -> AsyncIterator[LiveDelta]:
        if self._gen is None:
            self._gen = self._frames(beating=False)
        return cast("AsyncIterator[LiveDelta]", self._gen)  # no beats without beating

    def events(self) -> AsyncIterator[LiveDelta | Beat]:
        """The call's deltas and its heartbeats (Rule 5); iterate it once, in
        place of iterating the call."""
        if self._gen is None:
            self._gen = self._frames(beating=bool(self._heartbeat_s))
        return self._gen

    async def _frames(self, *, beating: bool) -> AsyncGenerator[LiveDelta | Beat, None]:
        call_id = self._ctx.call_id
        live = self._live
        span = start_call_span(self._tool.id, call_id, self._trace)
        loop = CallLoop(self._run, span, reports=lambda: live.reassembler.reports(ended=True))
        terminal: ToolResult | ToolError | None = None
        try:
            if beating:
                # Closed here, not left to the collector: its task must stop first (Rule 3).
                async with contextlib.aclosing(self._beating(loop)) as items:
                    async for item in items:
                        if isinstance(item, Beat):
                            yield item
                            continue
                        if isinstance(item, ToolResult | ToolError):
                            terminal = item
                            break
                        # The seq its queue took it with: the call's one number.
                        yield live.add(item.item, item.seq)
            else:
                # The call's one loop, iterated here: no task, no handover (Rule 2).
                async with contextlib.aclosing(loop.frames()) as frames:
                    seq = 0
                    async for frame in frames:
                        delta = live.add(frame, seq)
                        seq += 1
                        yield delta
        except BaseException:
            loop.abandon()
            raise
        if terminal is None:
            terminal = loop.terminal
        closing = live.finish()
        self._end = CallEnd.of(
            call_id, self._tool.id, terminal, live.report(), frames=live.frames, closing=closing
        )
        loop.end(self._end.terminal, live.reassembler.reports(ended=True))

    async def _beating(
        self, loop: CallLoop
    ) -> AsyncGenerator[Taken[ToolCallProgressFrame[Any]] | Beat | ToolResult | ToolError, None]:
        """Rule 5: the call core's own driver (``produce``, whose timer puts the
        beats) in a task, handing over frames through a queue that holds at
        most :data:`BEATING_AHEAD_FRAMES`; then the terminal. Left early, the task is
        cancelled, and the run's cleanup (Rule 3) runs in it before this ends."""
        feed: QueueFeed[ToolCallProgressFrame[Any], ToolResult | ToolError] = QueueFeed(
            CallQueue(QueuePolicy.wait(BEATING_AHEAD_FRAMES)), StallWatch(_NEVER_DROPS_S)
        )
        # A TaskScope, held across this generator's yields: leaving it cancels
        # the task and waits for it (the run's cleanup runs in it), and a
        # failure of the task is raised from it, never lost.
        async with TaskScope() as tasks:
            pump = tasks.start(
                _pump(loop, feed, self._heartbeat_s), name=f"kigi call {self.call_id}"
            )
            try:
                while True:
                    item = await feed.get()
                    if isinstance(item, Taken | Beat):
                        yield item
                    else:
                        await asyncio.wait((pump,))  # its failure, if any, is the scope's
                        yield item
                        return
            finally:
                if not pump.done():
                    feed.give_up()

    async def run(self) -> CallEnd:
        """Serve the call to its end, taking every frame, and say how it ended
        (for a host that shows no live output)."""
        async for _ in self:
            pass
        return self.end

    async def aclose(self) -> None:
        """Stop the call if it is still running (Rule 3)."""
        if self._gen is not None:
            await self._gen.aclose()
        elif self._end is None:
            await self._run.aclose()


#: Frames a beating call may make ahead of its host (Rule 5): as many as the
#: runner's own channel holds (``CHANNEL_DEPTH``), so the handover costs a task
#: switch per batch, not per frame (one frame at a time cost about 4 times the
#: plain iteration's time per frame); past it the call pauses as in Rule 2.
BEATING_AHEAD_FRAMES: Final = 64

# The feed's stall figure: its queue waits and never drops, so this only sets
# how often a waiting put looks again.
_NEVER_DROPS_S: Final = 1.0


def _frame_item(frame: ToolCallProgressFrame[Any]) -> tuple[ToolCallProgressFrame[Any], int]:
    return frame, 1


async def _pump(
    loop: CallLoop,
    feed: QueueFeed[ToolCallProgressFrame[Any], ToolResult | ToolError],
    heartbeat_s: float,
) -> None:
    """Run the call's loop into ``feed``, its terminal the feed's reply (the
    loop's span is the served call's, so ``produce`` records none)."""
    try:
        terminal = await produce(loop, feed, _frame_item, heartbeat_s=heartbeat_s)
    except BaseException as failure:
        feed.finish(ended_early(failure))
        raise
    feed.finish(terminal)
