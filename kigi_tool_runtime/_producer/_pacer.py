"""``Pacer``: when a stream's pending bytes become frames (sans-IO).

A tool writes bytes whenever it likes; the pacer says when they are cut into
frames, given the time (``now``, any monotonic clock in seconds) and what the
stream could emit (``whole``: a whole frame's worth is ready; ``partial``: a
drain would also emit bytes that make less than a frame)::

    pace = pacer.poll(now, whole=stream.whole_ready, partial=stream.partial_ready)
    if pace.emit is Emit.ALL:
        frames = stream.drain()
    elif pace.emit is Emit.WHOLE:
        frames = stream.drain_whole()
    # then sleep until pace.next_poll, or until a write for which
    # pacer.wake_on_write(pace.next_poll, whole=...) is true

Invariants:

Rule 1. A whole frame goes at once: every poll that sees one says at least
        ``WHOLE``. A flood is then cut at the cap, never held for a clock.
Rule 2. Partial frames (``ALL``, the bytes that make less than a frame) are
        at least ``interval`` apart: after one at ``t`` the next is at
        ``t + interval`` at the earliest.
Rule 3. The first partial bytes after a quiet spell (no partial frame for an
        ``interval``) go at once: the leading edge. A line every 37 ms is then
        visible as it is written, not a tick later.
Rule 4. Nothing waits longer than ``interval``: a poll that holds partial
        bytes back returns the time they are due (``next_poll``), at most
        ``interval`` after the poll, and a driver that polls then (and on the
        writes :meth:`Pacer.wake_on_write` names) emits every written byte
        within ``interval`` of its write, except the bytes of a character not
        yet complete (the stream holds those until the rest arrives).
Rule 5. A poll with nothing to emit asks for nothing: ``next_poll`` is
        ``math.inf`` when no partial bytes wait, so an idle driver sleeps until
        the next write instead of ticking.

The pacer keeps one number (when it last let partial bytes go) and counts its
decisions; it never reads a clock or touches a stream.
"""

from __future__ import annotations

import enum
import math
from typing import Final, NamedTuple

__all__ = ()

#: The pacing interval when none is given: partial frames at most every 20 ms.
#: A line every 37 ms is then always a leading edge (visible at once: 0.5 ms at
#: the median through ``kigi-stream serve``, where a 100 ms tick gave 52 ms); a
#: faster trickle waits at most 20 ms (half the 40 ms p99 goal); and a trickle
#: costs at most 50 partial frames a second however fast it writes
#: (``benchmarks/bench_latency.py``).
DEFAULT_PACING_S: Final = 0.02


class Emit(enum.Enum):
    """What a poll lets go now."""

    #: Nothing: no frame is due.
    NOTHING = "nothing"
    #: The whole frames only (:meth:`OutputStream.drain_whole`).
    WHOLE = "whole"
    #: Everything a drain emits, the partial last frame included
    #: (:meth:`OutputStream.drain`).
    ALL = "all"


class Pace(NamedTuple):
    """A poll's answer: what to emit now, and when to poll next at the latest
    (``math.inf``: only when a write wakes the driver)."""

    emit: Emit
    next_poll: float


class PacerStats(NamedTuple):
    """Counters of a :class:`Pacer`: polls that let partial bytes go, those at
    a leading edge (the bytes went at the first poll that saw them) among them,
    and polls that held partial bytes back for the interval."""

    partial: int
    leading: int
    held: int


class Pacer:
    """The pacing policy of one stream (see the module's rules).

    Raises:
        TypeError: ``interval`` is not a number.
        ValueError: ``interval`` is not a positive, finite number of seconds.
    """

    __slots__ = ("_held", "_last_partial", "_leading", "_partial", "_waiting", "interval")

    def __init__(self, interval: float = DEFAULT_PACING_S) -> None:
        if not isinstance(interval, int | float) or isinstance(interval, bool):
            raise TypeError(f"interval must be a number of seconds, not {type(interval).__name__}")
        if not 0 < interval < math.inf:
            raise ValueError(f"interval must be > 0 seconds and finite, got {interval}")
        self.interval: Final = float(interval)
        self._last_partial = -math.inf
        self._partial = 0
        self._leading = 0
        self._held = 0
        self._waiting = False  # partial bytes are held back for the interval

    def __repr__(self) -> str:
        return f"Pacer(interval={self.interval})"

    def poll(self, now: float, *, whole: bool, partial: bool) -> Pace:
        """What to emit at ``now``, given whether whole frames (``whole``) and
        partial bytes (``partial``) are ready; an ``ALL`` answer counts as the
        partial frame of ``now`` (Rule 2), so emit what it says."""
        if partial:
            due = self._last_partial + self.interval
            if now >= due:
                if not self._waiting:
                    self._leading += 1  # Rule 3: nothing was held back before it
                self._waiting = False
                self._last_partial = now
                self._partial += 1
                return Pace(Emit.ALL, math.inf)
            self._held += 1
            self._waiting = True
            return Pace(Emit.WHOLE if whole else Emit.NOTHING, due)  # Rule 4
        return Pace(Emit.WHOLE if whole else Emit.NOTHING, math.inf)  # Rule 5

    @staticmethod
    def wake_on_write(next_poll: float, *, whole: bool) -> bool:
        """Whether a write must wake a driver that sleeps until ``next_poll``:
        when a whole frame is ready (Rule 1), or when the driver sleeps with no
        poll due (new partial bytes may be a leading edge, Rule 3). A driver
        already due to poll lets its timer take the partial bytes."""
        return whole or math.isinf(next_poll)

    def statistics(self) -> PacerStats:
        """The pacer's counters (see :class:`PacerStats`)."""
        return PacerStats(self._partial, self._leading, self._held)
