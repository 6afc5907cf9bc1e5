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
Rule 3. The queue is found through LangGraph 1.x internals, read only in
        ``_privates`` (Rule 1 there); where they cannot be read, a call that
        streams is bounded blind: at most ``_call/_held.py`` ``BLIND_FRAMES``
        of its frames go into the queue, the rest are held back as in Rule 4,
        and one ``RuntimeWarning`` says so.
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
import weakref
from collections.abc import Sized
from typing import Any, Final

from .._call._held import BlindCap
from .._call._limits import CALL_BUFFER_FRAMES, PENDING_POLL_S
from ._privates import UNSEEN, StreamQueue, stream_queue

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


class Pacer:
    """Pace one call to the run's stream consumer (see the module's rules);
    ``queue`` is the run's stream queue as ``_privates`` reads it (``None``:
    nothing is streamed; ``UNSEEN``: it cannot be read, Rule 3)."""

    __slots__ = ("_blind", "_bound", "_pending", "_queue")

    def __init__(self, queue: StreamQueue | None, bound: int) -> None:
        self._bound = bound
        self._blind = BlindCap() if queue is UNSEEN else None
        self._queue = None if queue is None or queue is UNSEEN else queue
        self._pending: Sized | None = None if self._queue is None else self._queue.pending

    @classmethod
    def of_current_call(cls, bound: int) -> Pacer:
        """The pacer of the call running in this context (its queue is the
        one LangGraph's writer for the call puts into)."""
        return cls(stream_queue(), bound)

    def waiting(self) -> int:
        """The items waiting in the run's stream queue (0 when not found)."""
        return 0 if self._pending is None else len(self._pending)

    def admits(self) -> bool:
        """Whether the next frame may go into the run's stream queue: always,
        unless the queue is not drained live and holds more than
        :data:`STILL_EVENTS` items (Rule 4)."""
        if self._blind is not None:
            return self._blind.admits()
        pending, queue = self._pending, self._queue
        if pending is None or queue is None:
            return True
        return queue.key not in _still_queues or len(pending) <= STILL_EVENTS

    async def pace(self) -> None:
        """Wait while more than the bound of items wait for a live consumer;
        judge the queue once it holds more than a still queue may (Rule 2)."""
        pending, queue = self._pending, self._queue
        if pending is None or queue is None or queue.key in _still_queues:
            return
        if queue.key not in _live_queues:
            if len(pending) <= min(self._bound, STILL_EVENTS):
                return
            if not await self._probe(queue):
                _still_queues.add(queue.key)
                return
        while len(pending) > self._bound:
            await asyncio.sleep(PENDING_POLL_S)

    @staticmethod
    async def _probe(queue: StreamQueue) -> bool:
        """Watch the queue for a consumer, :data:`PROBE_S` at most (Rule 2)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE_S
        pending = queue.pending
        before = len(pending)
        while loop.time() < deadline:
            if queue.consumer_waits() or len(pending) < before:
                _live_queues.add(queue.key)
                return True
            if queue.key in _live_queues:
                return True
            if queue.key in _still_queues:
                return False
            before = len(pending)
            await asyncio.sleep(PENDING_POLL_S)
        return False
