"""``MarkerHold``: hold a gap's marker until the frames prove how many bytes it
lost, for a printer that prints each frame as it lands (``kigi-stream run``).

A gap frame alone bounds its loss loosely: the frames after it at the same
``total_bytes`` (the rest of its run, the surviving tail) deliver more of what
its total counts, so until the run ends the marker could only say "at least 1
byte, at most all that the frame proves". The run ends at the next frame of
the stream with another total, or another gap frame; that frame proves the
bounds (``Reassembler.settled``), exact for ASCII output.

Rule 1. An item whose gap frame opened a gap is held, with every item pushed
        after it, until a record of that stream ends the gap's run; then they
        are released, in order, each settled: its gap with the fold's figures.
Rule 2. :meth:`MarkerHold.release` gives up waiting (a deadline passed: the
        printer prints with the bounds known so far) or, with ``ended``, says
        the stream has ended: the producer held nothing back, so a gap whose
        run ended with the stream gets the figures the ended report has.
Rule 3. Nothing is lost or reordered: the items returned by :meth:`push` and
        :meth:`release`, concatenated, are every item pushed, in order.
Rule 4. What is held is one gap's run (the gap frame and the frames at its
        total), so at most the producer's tail buffer of text, plus the items
        of other streams pushed meanwhile.

Sans-IO: no clock here; the driver decides when to give up waiting.
"""

from __future__ import annotations

from dataclasses import replace

from ._loss import Gap, gap_with_held
from ._reassembler import Appended, Reassembler

__all__ = ()


class MarkerHold:
    """Hold what a gap frame appended (and what came after it) until a later
    frame proves the gap's bounds; see the module's rules."""

    __slots__ = ("_held", "_reassembler")

    def __init__(self, reassembler: Reassembler) -> None:
        self._reassembler = reassembler
        self._held: list[Appended] = []

    @property
    def holding(self) -> bool:
        """Whether items are held, waiting for a frame to end a gap's run."""
        return bool(self._held)

    @property
    def held_gap(self) -> Gap | None:
        """The gap whose run the held items wait on (``None``: none held)."""
        return self._held[0].gap if self._held else None

    def push(self, item: Appended) -> list[Appended]:
        """Take ``item``, which :meth:`Reassembler.appended` has just returned
        from this hold's reassembler; return the items ready to print."""
        ready: list[Appended] = []
        if self._held:
            if not self._ends_run(item):
                self._held.append(item)
                return ready
            ready = self._settle(self._held, ended=False)
            self._held = []
        if self._opens_run(item):
            self._held.append(item)
            return ready
        ready.append(item)
        return ready

    def release(self, *, ended: bool = False) -> list[Appended]:
        """Every item held, settled as the records so far prove it (Rule 2);
        ``ended``: the stream has ended (its call returned)."""
        held, self._held = self._held, []
        return self._settle(held, ended=ended)

    def _opens_run(self, item: Appended) -> bool:
        gap = item.gap
        if gap is None or gap.inferred or item.key is None:
            return False
        state = self._reassembler.streams.get(item.key)
        return state is not None and state.total_bytes == gap.total_bytes

    def _ends_run(self, item: Appended) -> bool:
        first = self._held[0]
        assert first.gap is not None
        if item.key is None or item.key != first.key:
            return False
        if item.gap is not None and not item.gap.inferred:
            return True  # another gap frame: this gap's run is over
        state = self._reassembler.streams.get(item.key)
        return state is None or state.total_bytes != first.gap.total_bytes

    def _settle(self, items: list[Appended], *, ended: bool) -> list[Appended]:
        settled = [self._reassembler.settled(item) for item in items]
        if ended and settled:
            settled = [self._ended(item) for item in settled]
        return settled

    def _ended(self, item: Appended) -> Appended:
        """``item`` with its gap as the stream's end proves it: the run ended
        with the stream, and nothing was held back at its end (unless an
        output limit cut a character in half)."""
        gap = item.gap
        if gap is None or gap.inferred or item.key is None:
            return item
        state = self._reassembler.streams.get(item.key)
        if state is None or state.truncated or state.total_bytes != gap.total_bytes:
            return item
        gaps = state.gaps
        last = gaps[-1] if gaps else None
        if last is None or last.index != gap.index or last.inferred:
            return item  # not the run the stream ended in
        return replace(item, gap=gap_with_held(last, 0))
