"""``kigi-stream run``'s text printer: each frame's text as it lands, a gap's
marker (a line of its own) and the text after it held by a :class:`MarkerHold`
until the frame that proves the gap's bounds lands, or :data:`MARKER_HOLD_S`
passes.

The wait is a timer beside the frames, not a deadline on reading the next one:
a frame that lands is printed in the same step that absorbed it, so the hold
costs a flood nothing per frame. What the timer releases is written under the
same lock as what the frames release, so the text keeps its order. A timed
release runs in a task of the caller's :class:`TaskScope` (``tasks``): it ends
with the caller's block, and a failure of it other than a closed stdout is
raised there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from .._consumer._loss import DEFAULT_GAP_MARKER, Gap, render_gap_marker
from .._consumer._marker_hold import MarkerHold
from .._consumer._reassembler import Appended, Reassembler
from .._scope import TaskScope
from ._fdwriter import FdWriter, OutputStalled
from ._status import Status

__all__ = ()

#: Seconds `run` holds a gap's marker (and the text after it) at most, waiting
#: for the frame that proves how many bytes the gap lost: the next drain, a
#: tick later while the command floods, and still waited for when a loaded
#: machine makes it late. Past it, the marker is printed with the bounds known
#: then (at least 1 byte), so the output of a command that falls silent right
#: after a gap is shown within a second all the same.
MARKER_HOLD_S: Final = 1.0
#: When ticks are longer (``--tick``), the hold is this many ticks instead.
MARKER_HOLD_TICKS: Final = 3


class HeldPrinter:
    """Print what each frame appended to ``out``; see the module's docstring.
    ``on_closed`` is called when stdout turns out closed under a timed release
    (the frames' own writes raise ``BrokenPipeError`` to their caller).
    ``tasks``: the scope the timed releases run in."""

    def __init__(
        self,
        out: FdWriter,
        status: Status,
        reassembler: Reassembler,
        *,
        tick: float,
        on_terminal: bool,
        on_closed: Callable[[], None],
        tasks: TaskScope,
    ) -> None:
        self._tasks = tasks
        self._out = out
        self._status = status
        self._on_terminal = on_terminal
        self._on_closed = on_closed
        self._hold = MarkerHold(reassembler)
        self._hold_s = max(MARKER_HOLD_S, MARKER_HOLD_TICKS * tick)
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._timed: Gap | None = None  # the held gap the timer is for
        self._release: asyncio.Task[None] | None = None
        #: Whether the output so far is empty or ends with a newline.
        self.ends_line = True
        #: Whether stdout was found closed by a timed release.
        self.closed = False

    async def print(self, item: Appended) -> None:
        """Print what ``item`` (just absorbed) appended, or hold it."""
        async with self._lock:
            await self._write(self._hold.push(item))
        self._arm()

    async def finish(self, *, ended: bool) -> None:
        """Print everything held; ``ended``: the stream has ended (see
        :meth:`MarkerHold.release`)."""
        self._disarm()
        async with self._lock:
            await self._write(self._hold.release(ended=ended))

    def close(self) -> None:
        """Stop waiting: no timed release happens after this."""
        self._disarm()
        if self._release is not None:
            self._release.cancel()

    def _arm(self) -> None:
        gap = self._hold.held_gap
        if gap is self._timed:
            return
        self._disarm()
        if gap is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._hold_s, self._give_up)
            self._timed = gap

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timed = None

    def _give_up(self) -> None:
        self._timer = None
        self._timed = None
        if self._release is None or self._release.done():
            self._release = self._tasks.start(self._timed_release(), name="kigi run timed release")

    async def _timed_release(self) -> None:
        try:
            async with self._lock:
                await self._write(self._hold.release())
        except BrokenPipeError:
            self.closed = True
            self._on_closed()

    def _render(self, items: list[Appended]) -> str:
        """The text of ``items``, each gap's marker a line of its own, so that it
        never splits a line of the output's (``352[...]2868929``): a newline
        before it when the text so far ends mid-line, and one after it unless
        the text right after it starts with its own."""
        parts: list[str] = []
        ends_line = self.ends_line
        for item in items:
            text = item.text or ""
            if item.gap is not None:
                marker = render_gap_marker(DEFAULT_GAP_MARKER, item.gap)
                before = "" if ends_line else "\n"
                after = "" if text.startswith("\n") else "\n"
                parts.append(f"{before}{marker}{after}")
                ends_line = True
            if text:
                parts.append(text)
                ends_line = text.endswith("\n")
        return "".join(parts)

    async def _write(self, items: list[Appended]) -> None:
        text = self._render(items)
        if not text:
            return
        status = self._status
        status.clear()
        # Not drawn while the text is on its way: it would land between the
        # status line and its clearing.
        status.held = True
        with contextlib.suppress(OutputStalled):  # counted in out.unwritten
            await self._out.write(text.encode("utf-8", "surrogateescape"))
            if status.enabled:  # the status line shares the screen: in order
                await self._out.drain()
        self.ends_line = text.endswith("\n")
        status.held = self._on_terminal and not self.ends_line
