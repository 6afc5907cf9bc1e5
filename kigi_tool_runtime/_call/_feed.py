"""``QueueFeed`` and :func:`produce`: one call's lifecycle between its tool and
its :class:`CallQueue`, the thin asyncio driver every queued server shares
(the stdio server, the MCP server, the NATS worker).

Invariants:

Rule 1. :func:`produce` runs the tool to its terminal through the call's one
        loop (``_call/_run_loop``) and returns it: each frame the tool streams
        is checked and made into an item by the host's ``item_of`` (which
        raises the :class:`ToolError` that ends the call when the frame cannot
        be sent: the tool is then stopped) and put in the queue. A run
        always ends with a terminal (the runner's Rule 1).
Rule 2. :meth:`QueueFeed.put` waits while the queue refuses the item (the
        queue's Rule 2): until a take makes room, or until the host has
        stalled (re-checked as the watch says) and the policy drops, or the
        queue is given up. A slow host therefore slows the tool first.
Rule 3. :meth:`QueueFeed.get` hands the host each item in order and then the
        reply, waiting while there is neither: the reply is always last.
Rule 4. ``on_ready``, when given, is called each time an item, a heartbeat or
        the reply has been queued (a host that takes from many queues in one
        task, the stdio writer, learns which call has something to send).
Rule 5. With a heartbeat interval, :func:`produce` is the one place that
        decides when a call says it is alive (:class:`HeartbeatRule`, fed the
        time of each frame): one timer per call, re-armed at each due time, puts
        a :class:`Beat` in the queue's slot (the queue's Rule 6), and
        :meth:`QueueFeed.get` hands it out before the items queued after it.
        The timer is gone when ``produce`` returns, so no beat follows the end.
Rule 6. With OpenTelemetry, :func:`produce` records one span per call
        (``_otel``), its parent the trace context the host passes (``trace``)
        or the current span, and tells it which frames the queue handed on
        and which it dropped (``_trace`` Rule 1); given a ``CallLoop`` in place
        of the run, it leaves that to the loop's owner, who records the call's
        span itself (``ServedCall``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

from kigi_tool_protocol import ToolCallProgressFrame

from .._otel import start_call_span
from .._tools._errors import ToolError
from .._tools._runner import ToolRun
from .._tools._tool import ToolResult
from ._heartbeat import Beat, HeartbeatRule
from ._queue import CallQueue, Taken
from ._run_loop import CallLoop

# Plumbing for the servers and callers, not exported.
__all__: tuple[str, ...] = ()

T = TypeVar("T")
R = TypeVar("R")

# How early the event loop may run a timer (its clock's resolution, with room).
_EARLY_S: Final = 0.001


class Stall(Protocol):
    """The verdict a feed asks for (a :class:`StallWatch`, or a driver's own
    view of its output that keeps one)."""

    def stalled(self, now: float) -> bool: ...
    def recheck_in(self, now: float) -> float: ...


class QueueFeed(Generic[T, R]):
    """The asyncio side of one :class:`CallQueue` (see the module's rules);
    ``stall`` gives the host's stall verdict; ``on_ready`` is Rule 4's."""

    __slots__ = ("_clock", "_on_ready", "_ready", "_room", "queue", "stall")

    def __init__(
        self,
        queue: CallQueue[T, R],
        stall: Stall,
        *,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.stall = stall
        self._on_ready = on_ready
        self._clock = asyncio.get_running_loop().time
        self._room = asyncio.Event()  # an item was taken, or the queue given up
        self._ready = asyncio.Event()  # an item or the reply was queued

    async def put(self, item: T, size: int) -> None:
        """Queue ``item`` (``size`` bytes), waiting as Rule 2 says."""
        queue = self.queue
        # An item that fits is queued whatever the verdict (the queue's Rule 2):
        # the verdict is asked only of one that does not.
        if not queue.offer(item, size):
            stall, clock = self.stall, self._clock
            while not queue.offer(item, size, stalled=stall.stalled(clock())):
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(stall.recheck_in(clock())):
                        await self._room.wait()
        self._ready.set()
        if self._on_ready is not None:
            self._on_ready()

    def beat(self, beat: Beat) -> None:
        """Queue ``beat`` in the heartbeat slot, unless output waits or the
        reply is set (the queue's Rule 6)."""
        if self.queue.offer_beat(beat):
            self._ready.set()
            if self._on_ready is not None:
                self._on_ready()

    def finish(self, reply: R) -> None:
        """Set the reply (the queue's Rule 4)."""
        self.queue.finish(reply)
        self._ready.set()
        if self._on_ready is not None:
            self._on_ready()

    def took(self) -> None:
        """A host that takes from :attr:`queue` itself says it took an item."""
        self._room.set()

    def give_up(self) -> None:
        """Nobody will take again: no put waits from now on."""
        self.queue.give_up()
        self._room.set()

    def take(self) -> Taken[T] | None:
        """The next item without waiting (``None``: none queued)."""
        taken = self.queue.take()
        if taken is not None:
            self._room.set()
        return taken

    async def get(self) -> Taken[T] | Beat | R:
        """The next item (a heartbeat first when one waits: it was let in before
        them), or the reply once every item is out (Rules 3 and 5)."""
        queue = self.queue
        while True:
            beat = queue.take_beat()
            if beat is not None:
                return beat
            taken = queue.take()
            if taken is not None:
                self._room.set()
                return taken
            reply = queue.take_reply()
            if reply is not None:
                return reply
            self._ready.clear()
            await self._ready.wait()


async def produce(
    run: ToolRun | CallLoop,
    feed: QueueFeed[T, Any],
    item_of: Callable[[ToolCallProgressFrame[Any]], tuple[T, int]],
    *,
    heartbeat_s: float = 0.0,
    trace: Mapping[str, Any] | None = None,
) -> ToolResult | ToolError:
    """Run the call to its terminal, feeding its frames to ``feed`` (Rule 1),
    and a heartbeat through each ``heartbeat_s`` of silence (Rule 5; 0: none);
    ``trace``: the trace context the call came with (``traceparent``,
    ``tracestate``), for its span (Rule 6). Given a :class:`CallLoop` in
    place of the run, the loop's span is its caller's (Rule 6).

    Raises:
        ValueError: ``heartbeat_s`` is negative.
    """
    if isinstance(run, CallLoop):
        loop, span = run, None
    else:
        span = start_call_span(run.tool.id, run.ctx.call_id, trace, make_current=True)
        loop = CallLoop(run, span)
    pulse = _Pulse(feed, heartbeat_s) if heartbeat_s else None
    try:
        async with contextlib.aclosing(loop.frames()) as frames:
            async for frame in frames:
                try:
                    item, size = item_of(frame)
                except ToolError as error:
                    loop.stop(error)
                    break
                if pulse is not None:
                    pulse.output()
                await feed.put(item, size)
                if span is not None:
                    # Right after the offer, before anything can take (_trace Rule 1).
                    span.trace.offered(frame)
                    span.trace.queue_moved(len(feed.queue), feed.queue.dropped)
    finally:
        if pulse is not None:
            pulse.stop()
    terminal = loop.terminal
    if span is not None:
        loop.end(terminal)
    return terminal


class _Pulse:
    """The timer of one call's heartbeats (Rule 5): armed at each due time of
    its :class:`HeartbeatRule`, a beat put in the feed's slot when one is due."""

    __slots__ = ("_feed", "_loop", "_rule", "_timer")

    def __init__(self, feed: QueueFeed[Any, Any], interval_s: float) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._feed = feed
        self._rule = HeartbeatRule(interval_s, loop.time())
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    def output(self) -> None:
        """A frame was made now (the timer, early, re-arms itself)."""
        self._rule.output(self._loop.time())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        due = self._rule.due_at()
        if due is not None:
            self._timer = self._loop.call_at(due, self._fire)

    def _fire(self) -> None:
        now = self._loop.time()
        due = self._rule.due_at()
        if due is not None and now < due <= now + _EARLY_S:
            now = due  # the loop runs a timer up to its clock's resolution early
        beat = self._rule.beat(now)
        if beat is not None:
            self._feed.beat(beat)
        self._arm()
