"""``run_command``: run one command in its own process group and pour its output
into a sink, returning how it ended (the asyncio edge under ``Output.run``).

Invariants:

Rule 1. stdout and stderr share one pipe, so their bytes arrive in the order
        the child wrote them, and nothing is re-encoded on the way.
Rule 2. An event-loop reader takes the pipe a buffer at a time and only hands
        the bytes to the sink (the call's bounded output), so memory is bounded
        whatever the child writes and however slowly frames are taken.
Rule 3. The child leads its own process group. At the deadline or on
        cancellation the whole group gets SIGTERM (and SIGCONT, so a stopped
        member sees it), then SIGKILL after a grace period, and the child is
        reaped: no process of the group and no zombie is left behind. The pipe
        is read until then, so a member that writes while it stops (a SIGTERM
        handler's last words) is not killed by SIGPIPE before its grace is over.
Rule 4. After the child exits the pipe is drained for at most ``exit_drain``
        seconds: a grandchild that keeps it open cannot hang the call (its
        later writes fail once the pipe is closed). A background process that
        outlives a normal exit is not killed; only the deadline and
        cancellation are.
Rule 5. While the command runs, its process group dies with the process that
        runs it, however that process dies (a SIGKILLed server's commands do
        not run on): the command is held on the lifeline (``_process``) from
        before it can run until the command is done with; on Linux with a
        writable cgroup v2 that holds whatever it starts, ``setsid`` and
        ``timeout`` included (``docs/containment.md``).
Rule 6. The pipe is asked for :data:`CHILD_PIPE_BYTES` (Linux only, best
        effort: ``_process.widen_pipe``), one readiness callback's read budget:
        a flooding child is then taken in about a quarter of the wake-ups a
        64 KiB pipe costs, and at most that much waits in the kernel besides
        the tail.
Rule 7. With a :class:`Backpressure` (``kigi-stream run`` into a pipe or a
        file), nothing is skipped: the pipe is read only while the output has
        room for every byte not yet surfaced, so a consumer that falls behind
        pauses the reading (the child then blocks on its full pipe, as it
        would writing into ``cat``) instead of seeing a gap. Memory stays
        bounded by the same tail. The exit drain of Rule 4 does not run out
        while the reading waits on the consumer, and a stopped command's pipe
        is read regardless, so its last words never block it.

POSIX only: process groups, ``killpg`` and a non-blocking pipe read from the
event loop (``add_reader``).
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from .._process import (
    group_alive,
    release,
    signal_name,
    spawn_in_group,
    stop_group,
    widen_pipe,
)
from .._scope import TaskScope
from ._errors import ToolError, ToolErrorKind

__all__ = ("CommandNotStarted", "CommandResult")

#: One read from the pipe: 64 KiB (a default Linux pipe buffer; the widened pipe
#: of Rule 6 holds four) per system call. Reading a pipe in 8 KiB pieces costs
#: eight calls (and eight tail writes) where one does, which in Python caps a
#: flood at about 0.4 of a raw asyncio read; at 64 KiB the tool keeps above half
#: of it (``benchmarks/bench_shell.py``); a 256 KiB read cost no less CPU
#: through ``kigi-stream serve``. The bytes go straight into the tail, so a
#: bigger read holds no more memory.
READ_CHUNK_BYTES: Final = 64 * 1024

#: The smallest read a command may be configured with: below a page, the
#: per-call cost dominates everything else.
MIN_READ_CHUNK_BYTES: Final = 4 * 1024

#: Bytes read per readiness callback before the event loop gets its turn back
#: (256 KiB, what asyncio's own pipe transport reads at once): a flooding child
#: cannot starve the frame side, and one callback fills at most a quarter of the
#: default tail, so a frame side that keeps up never sees a gap.
WAKEUP_READ_BYTES: Final = 256 * 1024

#: The pipe buffer asked for (Rule 6): one wakeup's read budget. The default
#: 64 KiB pipe holds a quarter of it, so a flood woke the tool, the runner, the
#: call and the server's writer once per 64 KiB; at 256 KiB a flood through
#: ``kigi-stream serve`` cost the server 2.2 ms of CPU per MB instead of 2.7
#: (``benchmarks/bench_transport.py``). It is kernel memory, allocated only as
#: the child fills it.
CHILD_PIPE_BYTES: Final = WAKEUP_READ_BYTES

#: Seconds between SIGTERM and SIGKILL: time for a well-behaved process group to
#: flush and exit, short enough that a stuck one is not waited on for long.
TERM_GRACE_S: Final = 2.0

#: Seconds the pipe is still read after the child exits, for output in flight
#: and children that exit soon after; a grandchild that keeps the pipe open
#: longer is no longer waited for.
EXIT_DRAIN_S: Final = 1.0

#: What receives the child's bytes: a view valid only during the call.
Sink = Callable[[memoryview], object]


class CommandNotStarted(ToolError):
    """Raised when the system refused to start a command (no such program, not
    executable, no such working directory): an ``execution`` error that a
    caller can tell apart by type, e.g. for the shell's exit code 127."""

    def __init__(self, message: str) -> None:
        super().__init__(ToolErrorKind.EXECUTION, message)


class CommandResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a command run by ``Output.run`` ended (a JSON-able value a function
    tool may return as it is).

    Exactly one of ``exit_code`` (it exited) and ``signal`` (a signal killed
    it, e.g. ``"SIGKILL"``) is set; ``timed_out`` says its deadline stopped
    it; ``duration_ms`` is the time from its start to its exit.
    """

    exit_code: int | None
    signal: str | None
    timed_out: bool
    duration_ms: int


class CommandSettings(NamedTuple):
    """How commands are run: ``shell`` runs a command given as a string;
    ``grace`` is the SIGTERM-to-SIGKILL wait; ``exit_drain`` how long the pipe
    is read after the child exits; ``read_chunk`` the size of one pipe read."""

    shell: str
    grace: float = TERM_GRACE_S
    exit_drain: float = EXIT_DRAIN_S
    read_chunk: int = READ_CHUNK_BYTES


class Backpressure(Protocol):
    """What lets a consumer that falls behind pause the reading (Rule 7)."""

    def room(self) -> int:
        """Bytes that may be read before one not yet surfaced is pushed out."""
        ...

    def on_drain(self, resume: Callable[[], None] | None) -> None:
        """Call ``resume`` (on the event loop) after the next drain; ``None``
        forgets it."""
        ...


def default_shell() -> str:
    """The shell a string command runs in: ``bash`` when found, else ``/bin/sh``."""
    return shutil.which("bash") or "/bin/sh"


class _PipeReader:
    """Reads the child's pipe from event-loop callbacks into the sink, and wakes
    the waiting run when the pipe has ended (or the child exited)."""

    __slots__ = (
        "_backpressure",
        "_budget",
        "_buf",
        "_fd",
        "_loop",
        "_sink",
        "_view",
        "_waiter",
        "eof",
        "paused",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        sink: Sink,
        chunk: int,
        backpressure: Backpressure | None,
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._sink = sink
        self._budget = max(WAKEUP_READ_BYTES // chunk, 1)
        self._buf = bytearray(chunk)
        self._view = memoryview(self._buf)
        self._waiter: asyncio.Future[None] | None = None
        self._backpressure = backpressure
        self.eof = False
        #: Whether reading waits for the consumer to drain (Rule 7).
        self.paused = False
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        self._read(self._budget)
        if self.eof or self.paused:
            self.wake()

    def _read(self, budget: int) -> None:
        buf, view, sink = self._buf, self._view, self._sink
        for _ in range(budget):
            into: bytearray | memoryview = buf
            if self._backpressure is not None:
                room = self._backpressure.room()
                if room <= 0:
                    # Rule 7: a byte more would push an unsurfaced one out.
                    self.paused = True
                    self._loop.remove_reader(self._fd)
                    self._backpressure.on_drain(self.resume)
                    return
                if room < len(buf):
                    into = view[:room]
            try:
                size = os.readv(self._fd, [into])
            except BlockingIOError:
                return
            except OSError:
                size = 0  # a broken pipe reads as its end
            if not size:
                self.eof = True
                self._loop.remove_reader(self._fd)
                return
            sink(view[:size])
            if size < len(into):
                return  # the pipe is empty: skip a read that would only fail

    def resume(self) -> None:
        """Read again after a drain made room (Rule 7)."""
        if self.paused and self._fd >= 0 and not self.eof:
            self.paused = False
            self._loop.add_reader(self._fd, self._on_readable)
            self.wake()

    def stop_waiting(self) -> None:
        """Read whatever comes from now on, room or not: the command is being
        stopped, and a member writing as it stops must not block (Rule 7)."""
        if self._backpressure is not None:
            self._backpressure.on_drain(None)
            self._backpressure = None
        self.resume()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, until: float) -> None:
        """Sleep until woken or until loop time ``until`` (``inf``: no timer)."""
        waiter = self._waiter = self._loop.create_future()
        timer = None if math.isinf(until) else self._loop.call_at(until, self.wake)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None

    def close(self) -> None:
        """Take what is immediately readable (one wakeup's worth), stop reading,
        close the pipe. Idempotent."""
        if self._fd < 0:
            return
        if self._backpressure is not None:
            self._backpressure.on_drain(None)
            self._backpressure = None  # what is left is taken (a gap, if any, is reported)
        if not self.eof:
            if not self.paused:
                self._loop.remove_reader(self._fd)
            self.paused = False
            self._read(self._budget)
        os.close(self._fd)
        self._fd = -1


async def run_command(
    sink: Sink,
    command: str | Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    settings: CommandSettings,
    backpressure: Backpressure | None = None,
) -> CommandResult:
    """Run ``command`` (a string for ``settings.shell``, or an argv) with its
    stdout and stderr poured into ``sink`` (see the module's rules); ``env``
    is added to the inherited environment; ``timeout`` (seconds, ``None``: no
    deadline) stops the group and the result says ``timed_out``;
    ``backpressure`` pauses the reading while the consumer is behind (Rule 7).

    Raises:
        CommandNotStarted: the command could not be started.
        ToolError: ``invalid_params``, the command or environment holds what no
            process can take (a NUL byte, a ``=`` in a variable name).
        asyncio.CancelledError: the run was cancelled; the group is gone.
    """
    loop = asyncio.get_running_loop()
    proc, reader = await _spawn(loop, command, cwd, env, sink, settings, backpressure)
    started = loop.time()
    exited_at: list[float] = []

    def on_exit(_: object) -> None:
        exited_at.append(loop.time())
        reader.wake()

    # Rule 3: the exit watch and the watchdog end with the run (cancelled and
    # awaited on the way out); a failure of either is raised, not lost.
    async with TaskScope() as tasks:
        exit_task = tasks.start(proc.wait(), name=f"exit of {proc.pid}")
        exit_task.add_done_callback(on_exit)
        timed_out: list[bool] = []
        watchdog = (
            None
            if timeout is None
            else tasks.start(
                _watchdog(proc, started + timeout, timed_out, settings.grace),
                name=f"watchdog of {proc.pid}",
            )
        )
        finished = False
        try:
            drain_until = math.inf
            while not (reader.eof and exit_task.done()):
                if exit_task.done() and drain_until == math.inf:
                    drain_until = loop.time() + settings.exit_drain
                if reader.paused:
                    # Rule 7: time spent waiting on the consumer is not the
                    # exit drain's; the pipe gets its window again.
                    if not math.isinf(drain_until):
                        drain_until = math.inf
                    await reader.wait(math.inf)
                    continue
                if loop.time() >= drain_until:
                    break  # Rule 4: a grandchild holds the pipe open
                await reader.wait(drain_until)
            reader.close()
            returncode = await exit_task
            finished = True
            return CommandResult(
                exit_code=returncode if returncode >= 0 else None,
                signal=signal_name(-returncode) if returncode < 0 else None,
                timed_out=bool(timed_out),
                duration_ms=round(((exited_at or [loop.time()])[0] - started) * 1000),
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()
            try:
                reader.stop_waiting()  # Rule 7: a stopping member never blocks
                if not finished and (proc.returncode is None or group_alive(proc.pid)):
                    # Cancelled (or failed) mid-run: stop the whole group. The pipe
                    # is still read meanwhile (into the bounded sink), so a member
                    # that writes while it stops is not killed by SIGPIPE before
                    # its grace is over.
                    await stop_group(proc, settings.grace)
            finally:
                release(proc.pid)
                reader.close()
                if not exit_task.done():
                    exit_task.cancel()


async def _spawn(
    loop: asyncio.AbstractEventLoop,
    command: str | Sequence[str],
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    sink: Sink,
    settings: CommandSettings,
    backpressure: Backpressure | None,
) -> tuple[asyncio.subprocess.Process, _PipeReader]:
    argv = [settings.shell, "-c", command] if isinstance(command, str) else list(command)
    merged = None if env is None else {**os.environ, **env}
    read_fd, write_fd = os.pipe()
    widen_pipe(read_fd, CHILD_PIPE_BYTES)  # Rule 6
    try:
        try:
            proc = await spawn_in_group(  # Rule 3: its own process group
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,  # Rule 1: one pipe, arrival order kept
                cwd=cwd,
                env=merged,
            )
        finally:
            os.close(write_fd)  # the child holds the only write end now
    except OSError as exc:
        os.close(read_fd)
        raise CommandNotStarted(f"cannot start {argv[0]!r}: {exc}") from exc
    except ValueError as exc:  # a NUL byte, a '=' in a variable name
        os.close(read_fd)
        raise ToolError.invalid_params(
            f"cannot start {argv[0]!r}: {exc}", details={"reason": str(exc)}
        ) from exc
    except BaseException:
        os.close(read_fd)
        raise
    # Rule 5: spawn_in_group held the command (its group, its cgroup where one
    # can be made) before it could run anything.
    return proc, _PipeReader(loop, read_fd, sink, settings.read_chunk, backpressure)


async def _watchdog(
    proc: asyncio.subprocess.Process, deadline: float, timed_out: list[bool], grace: float
) -> None:
    """At the command's deadline, stop its process group."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(deadline - loop.time(), 0))
    if proc.returncode is None:
        timed_out.append(True)
        await stop_group(proc, grace)
