"""The signals that stop kigi-stream (SIGINT, SIGTERM, SIGHUP): handlers that
count them and hand each to the command, previous handlers restored after, and
the exit status 128 + N of the first."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, Final

__all__ = ()

#: Ctrl-C, a plain ``kill`` and a closed terminal. ``run``, ``serve`` and
#: ``follow`` catch each, also when started with it ignored (a background job
#: of a non-interactive shell ignores SIGINT), to stop cleanly: a command runs
#: in a process group of its own, which none of them would reach, so its
#: call is cancelled (the group stopped) instead of left running.
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """While entered (in a running event loop), each stop signal is counted and
    then handed to ``on_signal`` with its number, from the loop; on exit the
    handlers from before are back.

    The command decides what a signal does (``count`` says which one it is);
    :meth:`exit_status` is the status it ends with.

    ``exit_when_blocked``: a signal reaches the loop only when the loop runs,
    and a tool that blocks it (``time.sleep`` in an ``async def``) would keep
    every signal waiting. So a Python-level handler, which runs between
    bytecodes even while the loop is blocked, also counts them: a second
    signal that comes before the loop has taken the first exits the process
    at once (``os._exit``, 128 + N of the first; commands held on the lifeline
    end with it), saying so on stderr.

    ``ends_process``: the stop ends the process (``serve``). Once a stop signal
    has come, the process is on its way out: on exit the handlers from before
    are not put back, and a stop signal after it (the command still returning, the
    interpreter shutting down) exits at once with the first's status, as the
    command would have (once the exit handlers run, it is ignored), instead of
    killing the process with the later signal's default action (another
    status, or a ``KeyboardInterrupt``).
    """

    def __init__(
        self,
        on_signal: Callable[[int], object],
        *,
        exit_when_blocked: str | None = None,
        ends_process: bool = False,
    ) -> None:
        self._on_signal = on_signal
        self._exit_when_blocked = exit_when_blocked  # the command's name, or None
        self._ends_process = ends_process
        self._arrived: list[int] = []  # counted by the Python-level handler
        self._received: list[int] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}

    @property
    def count(self) -> int:
        """How many stop signals have come."""
        return len(self._received)

    @property
    def first(self) -> int | None:
        """The number of the first stop signal, or ``None`` while none came."""
        return self._received[0] if self._received else None

    def exit_status(self, otherwise: int = 0) -> int:
        """128 + N for the first stop signal N, ``otherwise`` when none came."""
        return otherwise if self.first is None else 128 + self.first

    def _received_one(self, number: int) -> None:
        self._received.append(number)
        self._on_signal(number)

    def __enter__(self) -> StopSignals:
        loop = asyncio.get_running_loop()
        self._loop = loop
        for number in STOP_SIGNALS:
            self._previous[number] = signal.getsignal(number)
            loop.add_signal_handler(number, self._received_one, number)
            if self._exit_when_blocked is not None:
                # The loop's wakeup descriptor still brings the signal to
                # ``_received_one``; this handler runs even if the loop cannot.
                signal.signal(number, self._arrived_one)
        return self

    def _arrived_one(self, number: int, frame: FrameType | None) -> None:
        self._arrived.append(number)
        if len(self._arrived) >= 2 and len(self._received) < len(self._arrived) - 1:
            message = (
                f"kigi-stream {self._exit_when_blocked}: a second stop signal while the event"
                " loop is blocked (a tool holds it); exiting at once\n"
            )
            with contextlib.suppress(OSError):
                os.write(2, message.encode())
            os._exit(128 + self._arrived[0])

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._loop is not None
        stopping = self._ends_process and bool(self._arrived or self._received)
        # Blocked while the handlers change: the loop's removal sets the
        # default action, which a signal in between would take.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for number, previous in self._previous.items():
                self._loop.remove_signal_handler(number)
                if stopping:
                    signal.signal(number, self._stopped_already)
                elif previous is not None:  # None: a handler not set from Python, left as it is
                    signal.signal(number, previous)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if stopping:
            atexit.register(_ignore_stop_signals)
        self._previous.clear()

    def _stopped_already(self, number: int, frame: FrameType | None) -> None:
        """A stop signal after the stop: exit with the first's status."""
        first = (self._received or self._arrived)[0]
        os._exit(128 + first)


def _ignore_stop_signals() -> None:
    """At exit after a stop: the interpreter's shutdown puts the default action
    back for every handler set from Python, which a late stop signal would then
    take (another status); ignored signals it leaves ignored."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


class Stopped(Exception):
    """Raised by :func:`raising_stop_signals`' SIGTERM and SIGHUP handlers:
    stop as Ctrl-C (``KeyboardInterrupt``) does."""


def _raise_stopped(number: int, frame: FrameType | None) -> None:
    raise Stopped(number)


@contextlib.contextmanager
def raising_stop_signals() -> Iterator[None]:
    """For code without an event loop: inside, SIGINT raises
    ``KeyboardInterrupt`` (also when the process started with it ignored) and
    SIGTERM and SIGHUP raise :class:`Stopped`; the handlers from before are
    back after."""
    handlers = {signal.SIGINT: signal.default_int_handler}
    previous = {
        number: signal.signal(number, handlers.get(number, _raise_stopped))
        for number in STOP_SIGNALS
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
