"""``FdWriter``: write to a file descriptor without ever blocking the event loop.

A blocking write into a pipe nobody reads never returns, and made from the
event loop it freezes everything else: the signal handlers, the timers, the
tool. An ``FdWriter`` makes each write from a thread of its own and lets the
loop await it instead.

Invariants:

- One write at a time: :meth:`FdWriter.write` returns once every byte of it is
  written, so a writer holds at most one chunk and a slow reader slows the
  caller down (nothing is dropped while the caller waits).
- A write can be given up (:meth:`FdWriter.give_up_at`, :meth:`FdWriter.give_up`):
  the one waiting then, and every later one, raises :class:`OutputStalled`
  instead of waiting; the bytes never written are counted (``unwritten``, to
  within the one :data:`WRITE_SLICE_BYTES` slice the thread was writing).
- The thread writes with ``os.write`` on the bare descriptor, never through a
  buffered file object, and is a daemon: a write that never completes holds
  no lock that interpreter shutdown needs, and cannot hold up the exit.
- The descriptor's blocking mode is left as it is (a terminal or a pipe is
  shared with other processes); a non-blocking one is waited on with ``select``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import select
import threading
from typing import Final

__all__ = ("WRITE_SLICE_BYTES", "FdWriter", "OutputStalled")

_STOP: Final = None

#: Bytes per system call: a pipe's default size, so a write given up midway
#: knows how much of it was taken to within one pipe's worth.
WRITE_SLICE_BYTES: Final = 64 * 1024


class OutputStalled(Exception):
    """Raised by :meth:`FdWriter.write` when writing was given up: the reader
    did not take the output in time."""


def _settle(done: asyncio.Future[None], error: OSError | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


def _consume(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()


class FdWriter:
    """Writes to ``fd`` from a daemon thread; create it in a running event loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._jobs: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._given_up = self._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._progress = 0  # bytes of the current write done (set by the thread)
        #: Bytes handed to :meth:`write` that were never written (given up).
        self.unwritten = 0

    async def write(self, data: bytes) -> None:
        """Write all of ``data``.

        Raises:
            OutputStalled: writing was given up before ``data`` was written.
            OSError: the write failed (``BrokenPipeError``: the reader is gone).
        """
        if self._given_up.done():
            self.unwritten += len(data)
            raise OutputStalled
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="kigi fd writer", daemon=True)
            self._thread.start()
        done: asyncio.Future[None] = self._loop.create_future()
        self._progress = 0
        self._jobs.put((data, done))
        await asyncio.wait({done, self._given_up}, return_when=asyncio.FIRST_COMPLETED)
        if done.done():
            done.result()
            return
        self.unwritten += len(data) - self._progress
        done.add_done_callback(_consume)  # its late failure has nobody to go to
        raise OutputStalled

    def give_up_at(self, when: float) -> None:
        """Give up writing at loop time ``when`` (the earliest time asked wins)."""
        if self._given_up.done():
            return
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self.give_up)

    def give_up(self) -> None:
        """Give up writing now."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._given_up.done():
            self._given_up.set_result(None)

    def close(self) -> None:
        """Let the thread end once its current write (if any) is done."""
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._jobs.put(_STOP)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            data, done = job
            error: OSError | None = None
            view = memoryview(data)
            try:
                while view:
                    try:
                        written = os.write(self._fd, view[:WRITE_SLICE_BYTES])
                    except BlockingIOError:  # a descriptor someone made non-blocking
                        select.select([], [self._fd], [])
                        continue
                    view = view[written:]
                    self._progress += written
            except OSError as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(_settle, done, error)
