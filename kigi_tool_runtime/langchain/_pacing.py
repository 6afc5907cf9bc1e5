"""Pacing a kigi call to the consumer of LangGraph's stream: backpressure, not
buffering.

Invariants:

Rule 1. ``emit_output_delta`` returns at once, leaving the delta in the run's
        stream queue (unbounded, LangGraph's own) until the run's consumer
        takes it. While more than ``bound`` items wait there, a call takes no
        new frame, so a slow consumer pauses the tool (the shell tool's
        bounded tail then reports what it skipped as a gap, marked live) and
        the queue stays bounded.
Rule 2. Only a queue drained live is waited on: one whose consumer has been
        seen waiting on it, or taking from it, while a call probed it
        (:data:`PROBE_S` at most, once the bound is passed), as in an eager or
        concurrent stream. A queue that no consumer drains while the call
        runs (a run that hands the tools events over only when the node ends)
        is never paced, since waiting there would never end. Once judged,
        the queue is known for every call of the run.
Rule 3. The queue is found through LangGraph 1.x internals (the writer's
        handler, its ``put``); when it is not found, nothing is paced and the
        call runs as before.
Rule 4. A queue not drained live (LangGraph's default: ``stream_mode="tools"``
        without ``stream_eager``) is bounded too: once judged so, a call puts
        no more frames into it while more than :data:`STILL_EVENTS` items wait
        there (:meth:`Pacer.admits` says no); the driver counts the frames it
        held back and says so with a marker, and the call's end (the
        ``ToolMessage``) is whole as ever. The judgement is made once more
        than ``min(bound, STILL_EVENTS)`` items wait, so the queue never holds
        many more than that.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Sized
from typing import Any, Final

from .._call._limits import CALL_BUFFER_FRAMES, PENDING_POLL_S

# LangGraph 1.x offers no public way to reach the run's stream queue from a
# tool (Rule 3): this context variable is private, so its absence in another
# release only turns pacing off (tests/test_langchain.py pins its presence and
# the pacing it gives with the pinned release).
try:
    from langgraph.pregel import _tools as _langgraph_tools

    _tool_call_writer: Any = _langgraph_tools._tool_call_writer
except (ImportError, AttributeError):  # pragma: no cover - another LangGraph release
    _tool_call_writer = None

__all__ = ()

#: Items that may wait in a run's stream queue before a call stops taking
#: frames (Rule 1): as many as the stdio client holds for a call, 1024 full
#: 16 KiB deltas (16 MiB), so a consumer busy elsewhere for a while loses
#: nothing, and one that falls behind for good costs a bounded amount. A paused
#: call looks at the queue again every ``PENDING_POLL_S``.
MAX_PENDING_EVENTS: Final = CALL_BUFFER_FRAMES

#: Items a queue not drained live may hold before calls stop putting frames
#: into it (Rule 4): 256 full 16 KiB deltas, 4 MiB of text (each held twice,
#: as the event's text and in its frame), enough to show a long output's
#: beginning when the node ends, while a flood of any size costs no more.
STILL_EVENTS: Final = 256

#: How long a call past the bound watches a queue for a consumer before it
#: judges the queue not drained live (Rule 2). A consumer slower than this per
#: item is not waited for.
PROBE_S: Final = 1.0

#: The stream queues judged drained live, and not drained live (Rule 2).
_live_queues: weakref.WeakSet[Any] = weakref.WeakSet()
_still_queues: weakref.WeakSet[Any] = weakref.WeakSet()


def _queue_of(writer: Callable[[Any], None] | None) -> Any:
    """The stream queue ``writer`` (a LangGraph tool-call writer) puts into."""
    if writer is None:
        return None
    names = getattr(getattr(writer, "__code__", None), "co_freevars", ())
    cells = getattr(writer, "__closure__", None) or ()
    handler = dict(zip(names, (cell.cell_contents for cell in cells), strict=False)).get("self")
    put = getattr(handler, "stream", None)
    if isinstance(put, functools.partial) and put.args:
        put = put.args[0]  # async: partial(loop.call_soon_threadsafe, queue.put_nowait)
    return getattr(put, "__self__", None)


def _pending(queue: Any) -> Sized | None:
    """The items waiting in ``queue`` (an ``AsyncQueue`` or a ``SyncQueue``)."""
    items = getattr(queue, "_queue", None)
    return items if isinstance(items, Sized) else None


def _consumer_waits(queue: Any) -> bool:
    """Whether the run's consumer waits on ``queue`` right now (Rule 2)."""
    getters = getattr(queue, "_getters", None)  # AsyncQueue (asyncio.Queue)
    if getters is not None:
        return any(not getter.done() for getter in getters)
    cond = getattr(getattr(queue, "_count", None), "_cond", None)  # SyncQueue
    return bool(getattr(cond, "_waiters", None))


class Pacer:
    """Pace one call to the run's stream consumer (see the module's rules);
    ``writer`` is the tool-call writer LangGraph set for the call."""

    __slots__ = ("_bound", "_pending", "_queue")

    def __init__(self, writer: Callable[[Any], None] | None, bound: int) -> None:
        self._bound = bound
        self._queue = _queue_of(writer)
        self._pending = _pending(self._queue)

    @classmethod
    def of_current_call(cls, bound: int) -> Pacer:
        """The pacer of the call running in this context (its writer is the
        one LangGraph set when the call started)."""
        writer = None if _tool_call_writer is None else _tool_call_writer.get()
        return cls(writer, bound)

    def waiting(self) -> int:
        """The items waiting in the run's stream queue (0 when not found)."""
        return 0 if self._pending is None else len(self._pending)

    def admits(self) -> bool:
        """Whether the next frame may go into the run's stream queue: always,
        unless the queue is not drained live and holds more than
        :data:`STILL_EVENTS` items (Rule 4)."""
        pending = self._pending
        return pending is None or self._queue not in _still_queues or len(pending) <= STILL_EVENTS

    async def pace(self) -> None:
        """Wait while more than the bound of items wait for a live consumer;
        judge the queue once it holds more than a still queue may (Rule 2)."""
        pending, queue = self._pending, self._queue
        if pending is None or queue in _still_queues:
            return
        if queue not in _live_queues:
            if len(pending) <= min(self._bound, STILL_EVENTS):
                return
            if not await self._probe(pending):
                _still_queues.add(queue)
                return
        while len(pending) > self._bound:
            await asyncio.sleep(PENDING_POLL_S)

    async def _probe(self, pending: Sized) -> bool:
        """Watch the queue for a consumer, :data:`PROBE_S` at most (Rule 2)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE_S
        before = len(pending)
        while loop.time() < deadline:
            if _consumer_waits(self._queue) or len(pending) < before:
                _live_queues.add(self._queue)
                return True
            if self._queue in _live_queues:
                return True
            if self._queue in _still_queues:
                return False
            before = len(pending)
            await asyncio.sleep(PENDING_POLL_S)
        return False
