"""``run``'s live status line on a terminal's stderr (bytes, rate, elapsed
time, redrawn while the command is silent too), and the byte sizes it shows."""

from __future__ import annotations

import asyncio
import time
from typing import IO, Final

__all__ = ()

#: A run shorter than this never shows a status line: it would only flicker.
STATUS_AFTER_S: Final = 1.0
#: How often the status line is redrawn: live enough to read, cheap to draw.
STATUS_INTERVAL_S: Final = 0.5


class Status:
    """The live status line on a terminal's stderr (Rule: piped, never drawn).

    It shows the bytes so far, the average rate and the elapsed time, and is
    redrawn by :meth:`tick` every :data:`STATUS_INTERVAL_S` whether or not
    output arrives, so a silent step still shows the clock running. While
    :attr:`held` (the output's last line is unfinished on the same terminal)
    it is not drawn.
    """

    def __init__(self, out: IO[str], enabled: bool) -> None:
        self._out = out
        self.enabled = enabled
        self.held = False
        self._total = 0
        self._shown = False
        self._started = time.monotonic()
        self._next = self._started + STATUS_AFTER_S

    def update(self, total: int) -> None:
        """Note the bytes so far, and redraw if one is due."""
        self._total = total
        if self.enabled and time.monotonic() >= self._next:
            self._draw()

    async def tick(self) -> None:
        """Redraw every :data:`STATUS_INTERVAL_S` until cancelled."""
        await asyncio.sleep(max(self._next - time.monotonic(), 0))
        while True:
            self._draw()
            await asyncio.sleep(STATUS_INTERVAL_S)

    def _draw(self) -> None:
        if self.held:
            return
        now = time.monotonic()
        self._next = now + STATUS_INTERVAL_S
        elapsed = now - self._started
        rate = self._total / max(elapsed, 1e-9)
        self._out.write(
            f"\r\x1b[K[kigi-stream] {size_text(self._total)} at {size_text(rate)}/s,"
            f" {elapsed:.1f} s"
        )
        self._out.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._out.write("\r\x1b[K")
            self._out.flush()
            self._shown = False


def size_text(count: float) -> str:
    """``count`` bytes as people read them: ``512 B``, ``1.5 KiB``, ``16.0 MiB``."""
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
