"""``Output``: what a tool author writes to; the call streams it.

A tool gets one ``Output`` per call. ``out.write(text_or_bytes)`` puts bytes
into the call's bounded output and returns at once; ``await out.run(command)``
runs a command whose stdout and stderr go into the same output. When frames
are cut is the call's business (its :class:`Pacer`), not the author's.

Invariants:

Rule 1. :meth:`Output.write` never blocks and never fails for size: the bytes
        go into a bounded tail (the newest bytes are kept; a reader further
        behind sees a gap that says how much it lost) and a bounded head (for
        the model's excerpt). A character split across writes is held, never
        broken.
Rule 2. :meth:`Output.write` may be called from any thread (a plain ``def``
        tool runs in a worker thread): the stream is touched under one lock,
        and the waiting driver is woken through the event loop.
Rule 3. A write wakes the driver only when the pacer says the bytes may go now
        (a whole frame, or the first bytes after a quiet spell); otherwise the
        driver's timer takes them within the pacing interval.
Rule 4. After the call has ended its ``Output`` refuses writes (a
        ``RuntimeError``): a thread left running after a cancel stops at its
        next write instead of writing into nothing.
Rule 5. With ``wait_for_reader`` a command's pipe is read only while the tail
        has room for every byte not yet surfaced (``_command.py`` Rule 7): the
        output is the command's :class:`Backpressure`, and each drain that cut
        frames lets a paused reading go on.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from kigi_tool_protocol import CustomProgress

from .._producer._output import Data, Excerpt, OutputStream
from .._producer._pacer import Emit, Pacer
from ._command import Backpressure, CommandResult, CommandSettings, run_command

if TYPE_CHECKING:
    from ._tool import ToolContext

__all__ = ("Output",)


class Output:
    """One call's output, written by the tool (see the module's rules).

    The runtime makes it (a function tool gets it as its first argument; a
    class tool through :func:`paced_output`); an author only calls
    :meth:`write` and :meth:`run`.
    """

    __slots__ = (
        "_backpressure",
        "_closed",
        "_ctx",
        "_lock",
        "_loop",
        "_next_poll",
        "_settings",
        "_stream",
        "_thread",
        "_waiter",
        "_woken",
    )

    def __init__(
        self,
        stream: OutputStream,
        ctx: ToolContext,
        settings: CommandSettings,
        loop: asyncio.AbstractEventLoop,
        *,
        wait_for_reader: bool = False,
    ) -> None:
        self._stream = stream
        self._ctx = ctx
        self._settings = settings
        self._loop = loop
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._next_poll = math.inf
        self._woken = False
        self._closed = False
        self._backpressure = _TailRoom(self) if wait_for_reader else None

    def __repr__(self) -> str:
        return f"Output(call_id={self._ctx.call_id!r}, total={self._stream.total})"

    @property
    def call_id(self) -> str:
        """The call's ``tool_call_id``."""
        return self._ctx.call_id

    @property
    def cancelled(self) -> bool:
        """True once the call was cancelled (a plain ``def`` tool polls this:
        it is not interrupted by itself)."""
        return self._ctx.cancelled

    @property
    def total(self) -> int:
        """Bytes written so far (by :meth:`write` and by commands)."""
        return self._stream.total

    def write(self, data: str | Data) -> None:
        """Append ``data`` (a ``str`` is written as UTF-8; a lone surrogate from
        ``surrogateescape`` goes back to its byte, any other as ``?``).

        Raises:
            TypeError: ``data`` is neither text nor bytes-like.
            RuntimeError: the call has ended (Rule 4).
        """
        if isinstance(data, str):
            try:
                encoded = data.encode("utf-8")
            except UnicodeEncodeError:
                encoded = data.encode("utf-8", "surrogateescape" if _escaped(data) else "replace")
            self._accept(encoded)
        elif isinstance(data, bytes | bytearray | memoryview):
            self._accept(data)
        else:
            raise TypeError(f"Output.write takes str or bytes-like data, not {type(data).__name__}")

    def _accept(self, data: Data) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"call {self._ctx.call_id!r} has ended: its output is closed")
            self._stream.write(data)
            if (
                self._waiter is None
                or self._woken
                or not Pacer.wake_on_write(self._next_poll, whole=self._stream.whole_ready)
            ):
                return
            self._woken = True
        if threading.get_ident() == self._thread:
            self._wake()
        else:  # Rule 2
            self._loop.call_soon_threadsafe(self._wake)

    async def run(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Run ``command`` (a string: a shell command line; a sequence: a
        program and its arguments, no shell) in its own process group, its
        stdout and stderr streamed into this output in arrival order, and
        return how it ended. ``env`` adds to the inherited environment;
        ``timeout`` (seconds) stops the whole group at the deadline (the result
        says ``timed_out``). Cancelling the call stops the whole group too.

        Raises:
            CommandNotStarted: the command could not be started.
            ToolError: ``invalid_params``, the command or environment holds
                what no process can take (a NUL byte, a ``=`` in a name).
            ValueError: ``command`` is empty, or ``timeout`` is not positive.
            TypeError: ``command`` is neither a string nor a sequence of strings.
        """
        if isinstance(command, str):
            if not command:
                raise ValueError("command must not be empty")
        elif isinstance(command, bytes) or not all(isinstance(arg, str) for arg in command):
            raise TypeError("command must be a str or a sequence of str")
        elif not command:
            raise ValueError("command must not be empty")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        return await run_command(
            self._accept,
            command,
            cwd=cwd,
            env=env,
            timeout=timeout,
            settings=self._settings,
            backpressure=self._backpressure,
        )

    # -- the driver's side (package-private: ``_paced``) ------------------------------

    def _poll(self, pacer: Pacer, now: float) -> tuple[list[CustomProgress], float, int]:
        """The frames the pacer lets go at ``now``, when to poll next, and the
        byte count they were cut at (for :meth:`_wait`)."""
        stream = self._stream
        with self._lock:
            pace = pacer.poll(now, whole=stream.whole_ready, partial=stream.partial_ready)
            if pace.emit is Emit.ALL:
                frames = stream.drain()
            elif pace.emit is Emit.WHOLE:
                frames = stream.drain_whole()
            else:
                frames = []
            seen = stream.total
        if frames and self._backpressure is not None:
            self._backpressure.drained()  # Rule 5
        return frames, pace.next_poll, seen

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, until: float, seen: int) -> None:
        """Sleep until a write wakes the driver (Rule 3), :meth:`_wake`, or loop
        time ``until`` (``inf``: no timer). ``seen`` is the byte count of the
        last poll: a write since then (from a thread, before the driver slept)
        is judged as if it came now."""
        loop = self._loop
        with self._lock:
            stream = self._stream
            if stream.total != seen and Pacer.wake_on_write(until, whole=stream.whole_ready):
                return
            waiter = self._waiter = loop.create_future()
            self._next_poll = until
            self._woken = False
        timer = None if math.isinf(until) else loop.call_at(until, self._wake)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            with self._lock:
                self._waiter = None

    def _close(self) -> None:
        with self._lock:
            self._closed = True

    def _finish(self) -> list[CustomProgress]:
        """Close the output (Rule 4) and return its last frames."""
        with self._lock:
            self._closed = True
            return self._stream.finish()

    def _excerpt(self, max_bytes: int) -> Excerpt:
        with self._lock:
            return self._stream.excerpt(max_bytes)


class _TailRoom(Backpressure):
    """An output's room for unsurfaced bytes, and who waits for it (Rule 5)."""

    __slots__ = ("_out", "_resume")

    def __init__(self, out: Output) -> None:
        self._out = out
        self._resume: Callable[[], None] | None = None

    def room(self) -> int:
        out = self._out
        with out._lock:
            stream = out._stream
            return stream.buffer.capacity - stream.pending

    def on_drain(self, resume: Callable[[], None] | None) -> None:
        self._resume = resume
        if resume is not None:
            self._out._wake()  # the driver drains at once

    def drained(self) -> None:
        resume, self._resume = self._resume, None
        if resume is not None:
            resume()


def _escaped(text: str) -> bool:
    """Whether every lone surrogate in ``text`` is one ``surrogateescape`` made
    (U+DC80..U+DCFF, a byte that did not decode)."""
    return all(not 0xD800 <= ord(ch) <= 0xDFFF or 0xDC80 <= ord(ch) <= 0xDCFF for ch in text)
