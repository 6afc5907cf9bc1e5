"""``FdWriter``: write to a file descriptor without ever blocking the event loop.

A blocking write into a pipe nobody reads never returns, and made from the
event loop it freezes everything else: the signal handlers, the timers, the
tool. An ``FdWriter`` queues what it is given and writes it from a thread of
its own, so the loop only ever awaits.

Invariants:

- Order is kept, and memory is bounded: :meth:`FdWriter.write` queues its bytes
  and returns at once while at most :data:`WRITE_BUFFER_BYTES` wait; past that
  it waits until the thread has written them down to the bound (a slow reader
  slows the caller; nothing is dropped while the caller waits).
  :meth:`FdWriter.drain` waits until every byte is written.
- A write that cannot block is made at once, on the loop's thread, when
  nothing is queued before it: to a regular file or ``/dev/null``, or to a pipe
  with room for all of it (Linux says how much). Otherwise the thread takes
  everything queued at once, so a burst of small writes costs one hand-over and
  one system call per :data:`WRITE_SLICE_BYTES`, not one each.
- A write failure (``BrokenPipeError``: the reader is gone) is raised by the
  next :meth:`~FdWriter.write` or :meth:`~FdWriter.drain`.
- Writing can be given up (:meth:`FdWriter.give_up_at`, :meth:`FdWriter.give_up`):
  a wait in progress then, and every later write or drain, raises
  :class:`OutputStalled`; the bytes not written by then are counted
  (``unwritten``; the thread's write in flight counts to within one slice).
- The thread writes with ``os.write`` on the bare descriptor, never through a
  buffered file object, and is a daemon: a write that never completes holds no
  lock that interpreter shutdown needs, and cannot hold up the exit.
- The descriptor's blocking mode is left as it is (a terminal or a pipe is
  shared with other processes); a non-blocking one is waited on with ``select``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import select
import stat
import struct
import termios
import threading
from typing import Final

__all__ = ()

#: Bytes that may wait to be written before :meth:`FdWriter.write` waits: the
#: shell tool's default tail, so a reader that pauses briefly costs no wait.
WRITE_BUFFER_BYTES: Final = 1024 * 1024

#: Bytes per system call: a pipe's default size, so a write given up midway
#: knows how much of it was taken to within one pipe's worth.
WRITE_SLICE_BYTES: Final = 64 * 1024

_STOP: Final = None

_F_GETPIPE_SZ: Final = getattr(fcntl, "F_GETPIPE_SZ", None)  # Linux only


def _kind(fd: int) -> str:
    """``"file"``: a write never waits on a reader; ``"pipe"``: a pipe whose size
    is known; ``"other"``: a terminal, a socket, anything else."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and not os.isatty(fd)):
        return "file"
    if stat.S_ISFIFO(mode) and _F_GETPIPE_SZ is not None:
        return "pipe"
    return "other"


class OutputStalled(Exception):
    """Raised by :class:`FdWriter` once writing was given up: the reader did not
    take the output in time."""


class FdWriter:
    """Writes to ``fd`` from a daemon thread; create it in a running event loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._kind = _kind(fd)
        self._pipe_size = 0
        if self._kind == "pipe" and _F_GETPIPE_SZ is not None:
            self._pipe_size = fcntl.fcntl(fd, _F_GETPIPE_SZ)
        self._loop = asyncio.get_running_loop()
        self._jobs: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = bytearray()  # queued, not yet handed to the thread
        self._in_flight = 0  # bytes handed to the thread, not yet written
        self._progress = 0  # bytes of the job in flight written (set by the thread)
        self._error: OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._given_up = False
        self._timer: asyncio.TimerHandle | None = None
        #: Bytes handed to :meth:`write` that were never written (given up).
        self.unwritten = 0

    async def write(self, data: bytes) -> None:
        """Queue ``data`` for writing; wait while too much is queued.

        Raises:
            OutputStalled: writing was given up.
            OSError: an earlier write failed (``BrokenPipeError``: the reader is gone).
        """
        if self._given_up:
            self.unwritten += len(data)
            raise OutputStalled
        self._check()
        if not self._pending and not self._in_flight:
            data = self._write_now(data)
            if not data:
                return
        self._pending += data
        self._start()
        if len(self._pending) + self._in_flight > WRITE_BUFFER_BYTES:
            await self._wait(WRITE_BUFFER_BYTES)

    async def drain(self) -> None:
        """Wait until every queued byte is written.

        Raises:
            OutputStalled: writing was given up.
            OSError: a write failed.
        """
        if self._given_up:
            raise OutputStalled
        self._check()
        if self._pending or self._in_flight:
            await self._wait(0)

    def give_up_at(self, when: float) -> None:
        """Give up writing at loop time ``when`` (the earliest time asked wins)."""
        if self._given_up:
            return
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self.give_up)

    def give_up(self) -> None:
        """Give up writing now: what is queued is dropped and counted."""
        if self._timer is not None:
            self._timer.cancel()
        if self._given_up:
            return
        self._given_up = True
        self.unwritten += len(self._pending) + max(self._in_flight - self._progress, 0)
        self._pending.clear()
        self._wake()

    def close(self) -> None:
        """Let the thread end once its write in flight (if any) is done."""
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._jobs.put(_STOP)

    # -- the loop's side -----------------------------------------------------------

    def _write_now(self, data: bytes) -> bytes:
        """Write what cannot block now; return the rest (to queue)."""
        if self._kind == "pipe":
            used = struct.unpack("i", fcntl.ioctl(self._fd, termios.FIONREAD, b"\0" * 4))[0]
            if len(data) > self._pipe_size - used:
                return data
        elif self._kind != "file":
            return data
        written = 0
        try:
            written = os.write(self._fd, data)
            while written < len(data):
                written += os.write(self._fd, memoryview(data)[written:])
        except BlockingIOError:  # a descriptor someone made non-blocking
            pass
        return data[written:] if written < len(data) else b""

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _start(self) -> None:
        """Hand everything queued to the thread, unless a write is in flight."""
        if self._in_flight or not self._pending or self._error is not None:
            return
        job = bytes(self._pending)
        self._pending.clear()
        self._in_flight = len(job)
        self._progress = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="kigi fd writer", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    async def _wait(self, level: int) -> None:
        """Wait until at most ``level`` bytes are queued or in flight."""
        while len(self._pending) + self._in_flight > level:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
            if self._given_up:
                raise OutputStalled
            self._check()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _done(self, error: OSError | None) -> None:
        """The thread finished the job in flight (on the loop's thread)."""
        self._in_flight = 0
        if error is not None:
            self._error = error
        elif not self._given_up:
            self._start()
        self._wake()

    # -- the thread ----------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            error: OSError | None = None
            view = memoryview(job)
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
                self._loop.call_soon_threadsafe(self._done, error)
