"""A watch on the event loop of ``kigi-stream serve``: a tool that blocks it
(``time.sleep`` in an ``async def``) stops every call, the deadlines and the
stop signals with it, and the server cannot say so itself. A thread can.

Rule 1. The loop ticks every :data:`TICK_S`; a loop that has not ticked for
        :data:`BLOCKED_S` is blocked, and that is said once on stderr, naming
        the task that holds it (a tool's task is named ``tool ID call ID``).
Rule 2. When a loop said to be blocked ticks again, how long it was blocked is
        said once, naming the same task.
Rule 3. The watch's thread blocks the stop signals, so they go to the main
        thread, where a signal interrupts a blocking sleep and runs Python's
        handlers (``StopSignals``' ``exit_when_blocked``).
Rule 4. :class:`BlockWatch` decides what to say from the times it is given
        (sans-IO); :func:`watching_loop` is the thread and the tick around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Final

from ._signals import STOP_SIGNALS

__all__ = ()

#: How often the loop ticks. Cheap (one callback) and fine enough to measure
#: a block to a tenth of a second.
TICK_S: Final = 0.1

#: A loop that has not ticked for this long is blocked (Rule 1): far longer
#: than any step a well-behaved tool takes, short enough that a person waiting
#: on a stop learns why it does not come.
BLOCKED_S: Final = 1.0

#: How often the thread looks at the loop's last tick.
CHECK_S: Final = 0.25


class BlockWatch:
    """What to say about a loop from its last tick (Rules 1, 2), sans-IO."""

    def __init__(self, blocked_s: float = BLOCKED_S) -> None:
        self._blocked_s = blocked_s
        self._since: float | None = None  # the last tick before the block said
        self._holder = ""

    @property
    def blocked(self) -> bool:
        """Whether a block has been said and not yet its end."""
        return self._since is not None

    def check(self, now: float, last_tick: float, holder: str) -> str | None:
        """The line to say at ``now`` given the loop's ``last_tick`` and the
        name of what runs on it, or ``None``."""
        if self._since is None:
            if now - last_tick >= self._blocked_s:
                self._since, self._holder = last_tick, holder
                return (
                    f"the event loop has been blocked for {now - last_tick:.1f} s by {holder}"
                    " (a blocking call in an async def?); calls, deadlines and stop signals"
                    " wait for it, and a second stop signal exits at once"
                )
            return None
        if last_tick > self._since:
            lasted = last_tick - self._since
            self._since = None
            return f"the event loop was blocked for {lasted:.1f} s by {self._holder}"
        return None


@contextlib.asynccontextmanager
async def watching_loop(command: str) -> AsyncIterator[None]:
    """While inside, the running loop ticks and a thread says on stderr, as
    ``kigi-stream COMMAND: ...``, when it is blocked and for how long."""
    loop = asyncio.get_running_loop()
    last = [time.monotonic()]

    def tick() -> None:
        last[0] = time.monotonic()
        handle[0] = loop.call_later(TICK_S, tick)

    handle = [loop.call_later(TICK_S, tick)]
    done = threading.Event()
    blocks = BlockWatch()

    def say(line: str | None) -> None:
        if line is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"kigi-stream {command}: {line}\n")
                sys.stderr.flush()

    def watch() -> None:
        # A stop signal this thread took would wait for the blocked main
        # thread's system call to end (only the main thread runs Python's
        # handlers, and only a signal it receives interrupts its sleep).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        while not done.wait(CHECK_S):
            running = asyncio.current_task(loop)
            holder = "the server itself" if running is None else f"task {running.get_name()!r}"
            say(blocks.check(time.monotonic(), last[0], holder))

    thread = threading.Thread(target=watch, name="kigi loop watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        handle[0].cancel()
        thread.join(CHECK_S * 4)
        if not thread.is_alive():  # a block that ended as serving did (Rule 2)
            now = time.monotonic()
            say(blocks.check(now, now, ""))
