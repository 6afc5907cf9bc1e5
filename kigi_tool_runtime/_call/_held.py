"""Frames a host's driver holds back from a queue it must not grow: how many,
and the last one, which still goes out at the end so a fold sees the loss in
its ``seq`` and ``total_bytes``.

Invariants:

Rule 1. :class:`HeldBack` keeps a fixed set of fields whatever the number of
        frames held back: their count, the last one, and whether the text shown
        so far ends a line (the marker starts a line of its own).
Rule 2. :class:`BlindCap` bounds a call whose host queue cannot be seen (its
        dependency's internals gone, ``kigi_tool_runtime/_upstream.py``): the
        first :data:`BLIND_FRAMES` frames go out, the rest are held back, so
        the queue never holds more than that of a call.

Nothing here imports an event loop or a framework.
"""

from __future__ import annotations

from typing import Final

from .._text import plural
from ._live import DROPPED_MARKER, LiveDelta

__all__: tuple[str, ...] = ()

#: Frames a call puts into a host queue it cannot see (Rule 2): 256 full
#: 16 KiB deltas, 4 MiB of text, as much as a LangGraph queue nobody drains
#: live may take (``langchain/_pacing.py`` ``STILL_EVENTS``).
BLIND_FRAMES: Final = 256


class HeldBack:
    """The frames of a call held back (Rule 1)."""

    __slots__ = ("_at_line_start", "count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last: LiveDelta | None = None
        self._at_line_start = True

    def shown(self, text: str) -> None:
        """``text`` went out."""
        if text:
            self._at_line_start = text.endswith("\n")

    def add(self, delta: LiveDelta) -> None:
        """``delta`` is held back."""
        self.count += 1
        self.last = delta

    def marker(self) -> str:
        """The line said before the last frame: the frames held back before it."""
        held = plural(self.count - 1, "frame", "frames")
        return ("" if self._at_line_start else "\n") + DROPPED_MARKER.format(frames=held) + "\n"

    def closing_text(self) -> str:
        """What a text-only consumer reads where the last frame goes out: the
        marker when frames before it were held back, then its own text."""
        last = self.last
        if last is None:
            return ""
        return (self.marker() if self.count > 1 else "") + last.text


class BlindCap:
    """How many more frames a call may put into a queue it cannot see (Rule 2)."""

    __slots__ = ("left",)

    def __init__(self, frames: int = BLIND_FRAMES) -> None:
        self.left = frames

    def admits(self) -> bool:
        """Whether the next frame goes out (and count it if so)."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True
