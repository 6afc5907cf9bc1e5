"""``ShellTool``: run a command, stream its output, return how it ended.

Invariants:

Rule 1. stdout and stderr share one pipe, so their bytes arrive in the order
        the child wrote them, and nothing is re-encoded on the way.
Rule 2. Memory is bounded whatever the child writes and however slowly frames
        are taken: an event-loop reader takes the pipe a buffer at a time and
        only writes into an :class:`OutputStream` (a bounded tail and a bounded
        head); frames are cut from it when the tool is asked for more. A
        consumer that falls behind sees a gap frame saying what was skipped.
Rule 3. Every byte read is surfaced in a delta or skipped in a reported gap;
        ``finish`` at the end flushes what is pending, so none is stranded.
Rule 4. The child leads its own process group. On timeout or cancellation the
        whole group gets SIGTERM (and SIGCONT, so a stopped member sees it),
        then SIGKILL after a grace period, and the child is reaped: no process
        of the group and no zombie is left behind. The pipe is read until
        then, so a member that writes while it stops (a SIGTERM handler's
        last words) is not killed by SIGPIPE before its grace is over.
Rule 5. After the child exits the pipe is drained for at most ``exit_drain``
        seconds: a grandchild that keeps it open cannot hang the tool (its
        later writes fail once the pipe is closed). A background process that
        outlives a normal exit is not killed; only timeout and cancellation are.
Rule 6. While the tool runs the command, its process group dies with the
        process the tool runs in, however that process dies (a SIGKILLed
        server's commands do not run on): the group is held on the lifeline
        (``_process.hold``) from its start until the tool is done with it.
Rule 8. With ``wait_for_reader`` (``kigi-stream run`` into a pipe or a file),
        nothing is skipped: the pipe is read only while the tail has room for
        every byte not yet surfaced, so a consumer that falls behind pauses
        the reading (the child then blocks on its full pipe, as it would
        writing into ``cat``) instead of seeing a gap. Memory stays bounded by
        the same tail. The exit drain of Rule 5 does not run out while the
        reading waits on the consumer, and a stopped command's pipe is read
        regardless, so its last words never block it.
Rule 7. The pipe is asked for :data:`CHILD_PIPE_BYTES` (Linux only, best
        effort: ``_process.widen_pipe``), one readiness callback's read budget:
        a flooding child is then taken in about a quarter of the wake-ups a
        64 KiB pipe costs, and at most that much waits in the kernel besides
        the tail.

POSIX only: process groups, ``killpg`` and a non-blocking pipe read from the
event loop (``add_reader``).
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

import msgspec

from kigi_tool_protocol import DEFAULT_MAX_DELTA_BYTES, StreamingSpec, ToolCapabilities

from .._process import (
    group_alive,
    hold,
    release,
    signal_name,
    spawn_in_group,
    stop_group,
    widen_pipe,
)
from .._producer._chunk import cap_of
from .._producer._output import OutputStream
from .._scope import TaskScope
from ._errors import ToolError, ToolErrorKind
from ._shell_outcome import ShellOutcome
from ._tool import Tool, ToolContext, ToolEvent, ToolResult

__all__ = (
    "SHELL_SPEC",
    "CommandNotStarted",
    "ShellArgs",
    "ShellOutcome",
    "ShellTool",
)

#: The shell tool's streaming contract: the subkind harnesses know, deltas of the
#: default cap (16 KiB), stated on the wire.
SHELL_SPEC: Final = StreamingSpec(
    subkind="bash_output_chunk", max_delta_bytes=DEFAULT_MAX_DELTA_BYTES
)

#: One read from the pipe: 64 KiB (a default Linux pipe buffer; the widened pipe
#: of Rule 7 holds four) per system call. Reading a pipe in 8 KiB pieces costs
#: eight calls (and eight tail writes) where one does, which in Python caps a
#: flood at about 0.4 of a raw asyncio read; at 64 KiB the tool keeps above half
#: of it (``benchmarks/bench_shell.py``); a 256 KiB read cost no less CPU
#: through ``kigi-stream serve``. The bytes go straight into the tail, so a
#: bigger read holds no more memory.
READ_CHUNK_BYTES: Final = 64 * 1024

#: The smallest read a ``ShellTool`` may be configured with: below a page, the
#: per-call cost dominates everything else.
MIN_READ_CHUNK_BYTES: Final = 4 * 1024

#: Bytes read per readiness callback before the event loop gets its turn back
#: (256 KiB, what asyncio's own pipe transport reads at once): a flooding child
#: cannot starve the frame side, and one callback fills at most a quarter of the
#: default tail, so a frame side that keeps up never sees a gap.
WAKEUP_READ_BYTES: Final = 256 * 1024

#: The pipe buffer asked for (Rule 7): one wakeup's read budget. The default
#: 64 KiB pipe holds a quarter of it, so a flood woke the tool, the runner, the
#: call and the server's writer once per 64 KiB; at 256 KiB a flood through
#: ``kigi-stream serve`` cost the server 2.2 ms of CPU per MB instead of 2.7
#: (``benchmarks/bench_transport.py``). It is kernel memory, allocated only as
#: the child fills it.
CHILD_PIPE_BYTES: Final = WAKEUP_READ_BYTES

#: How often pending output is cut into frames when less than a frame is waiting.
#: A tenth of a second reads as live to a person and costs little.
DEFAULT_TICK_S: Final = 0.1

#: The newest bytes kept between drains. A consumer that falls further behind
#: than this loses the middle (reported as a gap). 1 MiB is 64 frames at the
#: 16 KiB cap: a consumer stalled for a moment loses nothing.
DEFAULT_TAIL_CAPACITY: Final = 1024 * 1024

#: Bytes of output handed to the model in the result when the call sets none:
#: the first half and the last half of the output around a marker. About 8k
#: tokens: enough to see a failure, little enough not to flood a context.
DEFAULT_OUTPUT_LIMIT: Final = 32 * 1024

#: The largest ``output_limit`` a call may ask for (it is kept in memory twice
#: over at most: the head and the tail).
MAX_OUTPUT_LIMIT: Final = 1024 * 1024

#: The smallest ``output_limit``: room for the omission marker and a little
#: output on each side of it.
MIN_OUTPUT_LIMIT: Final = 256

#: A command's deadline when the call sets none (a ``ShellTool``'s default
#: ``default_timeout_ms``): two minutes, so a command a model starts that never
#: ends (a server, a prompt waiting for input) is stopped, and the model told.
DEFAULT_COMMAND_TIMEOUT_MS: Final = 120_000

#: The longest deadline a call may ask for (ten minutes). The tool's own
#: ``ToolCapabilities.timeout_ms`` is this (or a longer ``default_timeout_ms``)
#: plus the time a kill and a drain take, so the command's deadline always fires
#: first and its output is kept.
MAX_COMMAND_TIMEOUT_MS: Final = 600_000

#: Seconds between SIGTERM and SIGKILL: time for a well-behaved process group to
#: flush and exit, short enough that a stuck one is not waited on for long.
TERM_GRACE_S: Final = 2.0

#: Seconds the pipe is still read after the child exits, for output in flight
#: and children that exit soon after; a grandchild that keeps the pipe open
#: longer is no longer waited for.
EXIT_DRAIN_S: Final = 1.0

# The capability deadline's margin over the longest command deadline: a kill
# (grace) plus a drain plus scheduling slack on a loaded machine.
_DEADLINE_MARGIN_MS: Final = 10_000


def _duration(ms: int) -> str:
    if ms % 60_000 == 0:
        minutes = ms // 60_000
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms} ms"


def _timeout_field_text(default_ms: int | None) -> str:
    """What the input schema says of ``timeout_ms`` given the tool's default."""
    default = "no deadline" if default_ms is None else f"{default_ms}, {_duration(default_ms)}"
    return (
        f"Deadline in milliseconds (default: {default}). At the deadline the command's"
        " whole process group is stopped and the result says timed_out."
    )


def _description(default_ms: int | None) -> str:
    """The tool's description given its default deadline."""
    longest = _duration(MAX_COMMAND_TIMEOUT_MS)
    call = _duration(MAX_COMMAND_TIMEOUT_MS + _DEADLINE_MARGIN_MS)
    deadline = (
        f" The command has no deadline of its own unless `timeout_ms` sets one (at most"
        f" {longest}); the call's deadline of {call} still applies."
        if default_ms is None
        else f" The command is stopped after {_duration(default_ms)} unless `timeout_ms`"
        f" sets its deadline (at most {longest})."
    )
    return (
        "Run a command and stream its combined stdout and stderr. `command` is a shell"
        " command line (run by bash) or an argv list (run directly). Returns the exit"
        " code or signal, the duration, and the output (head and tail when long)." + deadline
    )


# The field types of ShellArgs, named so that a value built in Python is checked
# against the very constraints its JSON form is decoded with.
_Command = (
    Annotated[str, msgspec.Meta(min_length=1, description="A shell command line.")]
    | Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1)]],
        msgspec.Meta(min_length=1, description="A program and its arguments, no shell."),
    ]
)
_Cwd = Annotated[str, msgspec.Meta(description="Working directory.")] | None
_Env = (
    Annotated[
        dict[str, str],
        msgspec.Meta(description="Variables added to the inherited environment."),
    ]
    | None
)
_TimeoutMs = (
    Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_COMMAND_TIMEOUT_MS,
            description=_timeout_field_text(DEFAULT_COMMAND_TIMEOUT_MS),
        ),
    ]
    | None
)
_OutputLimit = (
    Annotated[
        int,
        msgspec.Meta(
            ge=MIN_OUTPUT_LIMIT,
            le=MAX_OUTPUT_LIMIT,
            description="Most bytes of output in the result (head and tail).",
        ),
    ]
    | None
)


# ShellArgs built in Python is checked against the same constraints as its JSON
# form. On construction it raises TypeError for a field of the wrong type
# (``command=5``) and ValueError for one out of range (an empty ``command``,
# ``timeout_ms`` below 1 or past MAX_COMMAND_TIMEOUT_MS, ``output_limit``
# outside MIN_OUTPUT_LIMIT..MAX_OUTPUT_LIMIT). Its docstring is the input
# schema's description, so the contract lives here.
class ShellArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The shell tool's input."""

    command: _Command
    cwd: _Cwd = None
    env: _Env = None
    timeout_ms: _TimeoutMs = None
    output_limit: _OutputLimit = None

    def __post_init__(self) -> None:
        # A decoded value has passed these checks already; a constructed one
        # has not. Checking again costs about 6 us per call, next to the
        # milliseconds a process start takes.
        for name, kind in _SHELL_ARG_TYPES:
            try:
                msgspec.convert(getattr(self, name), kind)
            except msgspec.ValidationError as exc:
                problem = str(exc).removesuffix(" - at `$`")
                if ", got `" in problem:
                    raise TypeError(f"ShellArgs.{name}: {problem}") from None
                value = getattr(self, name)
                raise ValueError(f"ShellArgs.{name}: {problem}, got {value!r}") from None


_SHELL_ARG_TYPES: Final = (
    ("command", _Command),
    ("cwd", _Cwd),
    ("env", _Env),
    ("timeout_ms", _TimeoutMs),
    ("output_limit", _OutputLimit),
)


class CommandNotStarted(ToolError):
    """Raised by :class:`ShellTool` when the system refused to start the command
    (no such program, not executable, no such working directory): an
    ``execution`` error that a caller can tell apart by type, e.g. for the
    shell's exit code 127."""

    def __init__(self, message: str) -> None:
        super().__init__(ToolErrorKind.EXECUTION, message)


class _PipeReader:
    """Reads the child's pipe from event-loop callbacks into an OutputStream, and
    wakes the frame side when a frame's worth is pending or the pipe has ended."""

    __slots__ = (
        "_budget",
        "_buf",
        "_fd",
        "_loop",
        "_room",
        "_stream",
        "_view",
        "_waiter",
        "eof",
        "paused",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        stream: OutputStream,
        chunk: int,
        *,
        wait_for_reader: bool = False,
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._stream = stream
        self._budget = max(WAKEUP_READ_BYTES // chunk, 1)
        self._buf = bytearray(chunk)
        self._view = memoryview(self._buf)
        self._waiter: asyncio.Future[None] | None = None
        # Rule 8: the tail's room is what may be read before a drain.
        self._room = stream.buffer.capacity if wait_for_reader else None
        self.eof = False
        #: Whether reading waits for the frame side to drain (Rule 8).
        self.paused = False
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        self._read(self._budget)
        if self._stream.frame_ready or self.eof or self.paused:
            self.wake()

    def _read(self, budget: int) -> None:
        buf, view, stream = self._buf, self._view, self._stream
        for _ in range(budget):
            into: bytearray | memoryview = buf
            if self._room is not None:
                room = self._room - stream.pending
                if room <= 0:
                    # Rule 8: a byte more would push an unsurfaced one out.
                    self.paused = True
                    self._loop.remove_reader(self._fd)
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
            stream.write(view[:size])
            if size < len(into):
                return  # the pipe is empty: skip a read that would only fail

    def resume(self) -> None:
        """Read again after a drain made room (Rule 8)."""
        if self.paused and self._fd >= 0 and not self.eof:
            self.paused = False
            self._loop.add_reader(self._fd, self._on_readable)

    def stop_waiting(self) -> None:
        """Read whatever comes from now on, room or not: the command is being
        stopped, and a member writing as it stops must not block (Rule 8)."""
        self._room = None
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
        if not self.eof:
            if not self.paused:
                self._loop.remove_reader(self._fd)
            self.paused = False
            self._room = None  # what is left is taken (a gap, if any, is reported)
            self._read(self._budget)
        os.close(self._fd)
        self._fd = -1


class ShellTool(Tool[ShellArgs]):
    """Run a command (a shell string or an argv list), stream its merged stdout
    and stderr as ``bash_output_chunk`` deltas, and return a :class:`ShellOutcome`.

    The keyword arguments tune the bounds (defaults are the module constants).
    ``default_timeout_ms`` is a command's deadline when its call sets none
    (:data:`DEFAULT_COMMAND_TIMEOUT_MS`; ``None``: no deadline of the command's
    own, for a person at a terminal; the runner still applies the capability
    deadline unless its caller lifts it, as ``kigi-stream run`` does).
    ``max_delta_bytes`` sets the stream's cap (its ``StreamingSpec``, declared in
    this instance's ``capabilities``); ``limit`` is a hard cap on the bytes
    streamed per call: bytes past it are read and counted but dropped, the
    stream says ``truncated`` (its last frame is the truncation notice when no
    delta frame could carry the flag), and the result says how many were dropped.
    ``tail_capacity`` is the output kept between drains, exactly as given (a
    reader further behind sees a gap); the result's excerpt keeps the first
    half of its ``output_limit`` and at most this much of the output's end.
    ``wait_for_reader``: a reader further behind than the tail pauses the
    reading of the command's pipe instead of seeing a gap (the command then
    waits on its full pipe; module Rule 8). Off by default: a host's call must
    not stall its command on a slow peer.

    Raises:
        TypeError: an argument has the wrong type (``tick="fast"``), named in
            the message.
        ValueError: a bound is out of range (``tick``, ``grace`` or
            ``exit_drain`` not positive, ``tail_capacity`` below one frame,
            ``read_chunk`` below :data:`MIN_READ_CHUNK_BYTES`, a negative
            ``max_delta_bytes`` or ``limit``, a ``default_timeout_ms`` below 1).
    """

    id = "bash"
    description = _description(DEFAULT_COMMAND_TIMEOUT_MS)
    args_type = ShellArgs
    result_type = ShellOutcome
    capabilities = ToolCapabilities(
        streaming=SHELL_SPEC,
        supports_cancel=True,
        timeout_ms=MAX_COMMAND_TIMEOUT_MS + _DEADLINE_MARGIN_MS,
    )

    def __init__(
        self,
        *,
        tick: float = DEFAULT_TICK_S,
        tail_capacity: int = DEFAULT_TAIL_CAPACITY,
        grace: float = TERM_GRACE_S,
        exit_drain: float = EXIT_DRAIN_S,
        read_chunk: int = READ_CHUNK_BYTES,
        max_delta_bytes: int | None = None,
        limit: int | None = None,
        shell: str | None = None,
        default_timeout_ms: int | None = DEFAULT_COMMAND_TIMEOUT_MS,
        wait_for_reader: bool = False,
    ) -> None:
        for name, value in (("tick", tick), ("grace", grace), ("exit_drain", exit_drain)):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value}")
        for name, count in (("tail_capacity", tail_capacity), ("read_chunk", read_chunk)):
            if not isinstance(count, int) or isinstance(count, bool):
                raise TypeError(f"{name} must be an int, not {type(count).__name__}")
        for name, bound in (
            ("max_delta_bytes", max_delta_bytes),
            ("limit", limit),
            ("default_timeout_ms", default_timeout_ms),
        ):
            if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool)):
                raise TypeError(f"{name} must be an int or None, not {type(bound).__name__}")
        if not isinstance(wait_for_reader, bool):
            raise TypeError(f"wait_for_reader must be a bool, not {type(wait_for_reader).__name__}")
        if shell is not None and not isinstance(shell, str):
            raise TypeError(f"shell must be a str or None, not {type(shell).__name__}")
        if max_delta_bytes is not None:
            cap_of(max_delta_bytes, "max_delta_bytes")  # refuses a negative cap
            spec = StreamingSpec(subkind=SHELL_SPEC.subkind, max_delta_bytes=max_delta_bytes)
            self.capabilities = msgspec.structs.replace(self.capabilities, streaming=spec)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        cap = cap_of(self.spec.max_delta_bytes)
        if tail_capacity < cap:
            raise ValueError(f"tail_capacity {tail_capacity} is below one frame ({cap} bytes)")
        if read_chunk < MIN_READ_CHUNK_BYTES:
            raise ValueError(f"read_chunk {read_chunk} is below {MIN_READ_CHUNK_BYTES} bytes")
        if default_timeout_ms is not None:
            if default_timeout_ms < 1:
                raise ValueError(
                    f"default_timeout_ms must be >= 1 or None, got {default_timeout_ms}"
                )
            if default_timeout_ms > MAX_COMMAND_TIMEOUT_MS:
                # The call's own deadline must still fire after the command's.
                self.capabilities = msgspec.structs.replace(
                    self.capabilities, timeout_ms=default_timeout_ms + _DEADLINE_MARGIN_MS
                )
        self.default_timeout_ms = default_timeout_ms
        if default_timeout_ms != DEFAULT_COMMAND_TIMEOUT_MS:
            self.description = _description(default_timeout_ms)
        self.tick = tick
        self.read_chunk = read_chunk
        self.tail_capacity = tail_capacity
        self.grace = grace
        self.exit_drain = exit_drain
        self.limit = limit
        self.wait_for_reader = wait_for_reader
        self.shell = shell or shutil.which("bash") or "/bin/sh"

    def __repr__(self) -> str:
        return f"ShellTool(tick={self.tick}, tail_capacity={self.tail_capacity})"

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of :class:`ShellArgs`, its ``timeout_ms`` stating this
        instance's default deadline."""
        schema = super().input_schema()
        field = schema["$defs"]["ShellArgs"]["properties"]["timeout_ms"]["anyOf"][0]
        field["description"] = _timeout_field_text(self.default_timeout_ms)
        return schema

    @property
    def spec(self) -> StreamingSpec:
        """The stream this instance produces (``bash_output_chunk``, its cap)."""
        spec = self.capabilities.streaming
        assert spec is not None
        return spec

    async def execute(self, ctx: ToolContext, args: ShellArgs) -> AsyncIterator[ToolEvent]:
        """Run the command: ``bash_output_chunk`` progress, then a
        :class:`ShellOutcome` result.

        Raises:
            ToolError: ``execution``, the command could not be started (no such
                program or directory, not executable); ``invalid_params``, the
                command or environment holds what no process can take (a NUL
                byte, a ``=`` in a variable name).
        """
        loop = asyncio.get_running_loop()
        limit = args.output_limit or DEFAULT_OUTPUT_LIMIT
        head = limit // 2
        stream = OutputStream(
            self.spec,
            # Exactly the tail asked for: a larger one would hide the gaps a
            # caller sized it to show (the excerpt's end is then shorter).
            capacity=self.tail_capacity,
            limit=self.limit,
            head_bytes=head,
            progress=ctx.wants_progress,
        )
        # Rule 8 holds only while frames are taken: without progress nothing
        # drains, and the reading must not wait for it.
        wait = self.wait_for_reader and ctx.wants_progress
        proc, reader = await self._spawn(loop, args, stream, wait=wait)
        started = loop.time()
        exited_at: list[float] = []

        def on_exit(_: object) -> None:
            exited_at.append(loop.time())
            reader.wake()

        # Rule 4: the exit watch and the watchdog end with the run (cancelled and
        # awaited on the way out); a failure of either is raised, not lost.
        async with TaskScope() as tasks:
            exit_task = tasks.start(proc.wait(), name=f"exit of {proc.pid}")
            exit_task.add_done_callback(on_exit)
            timeout_ms = args.timeout_ms or self.default_timeout_ms
            timed_out: list[bool] = []
            watchdog = (
                None
                if timeout_ms is None
                else tasks.start(
                    self._watchdog(proc, started + timeout_ms / 1000, timed_out),
                    name=f"watchdog of {proc.pid}",
                )
            )
            finished = False
            try:
                next_tick = started + self.tick if ctx.wants_progress else math.inf
                drain_until = math.inf
                while not (reader.eof and exit_task.done()):
                    if exit_task.done() and drain_until == math.inf:
                        drain_until = loop.time() + self.exit_drain
                    if loop.time() >= drain_until and not reader.paused:
                        break  # Rule 5: a grandchild holds the pipe open
                    # Every pass suspends, so the pipe reader, the timers and the
                    # signal handlers run however the output arrives.
                    ready = stream.frame_ready or reader.paused
                    if ready:
                        await asyncio.sleep(0)
                    else:
                        await reader.wait(min(next_tick, drain_until))
                    if ready or stream.frame_ready or reader.paused or loop.time() >= next_tick:
                        frames = stream.drain()
                        if reader.paused and not math.isinf(drain_until):
                            # Rule 8: time spent waiting on the consumer is not
                            # the exit drain's; the pipe gets its window again.
                            drain_until = loop.time() + self.exit_drain
                        reader.resume()  # Rule 8: the drain made room
                        next_tick = loop.time() + self.tick
                        for frame in frames:
                            yield frame
                reader.close()
                returncode = await exit_task
                for frame in stream.finish():
                    yield frame
                excerpt = stream.excerpt(limit)
                finished = True
                yield ToolResult(
                    value=ShellOutcome(
                        exit_code=returncode if returncode >= 0 else None,
                        signal=signal_name(-returncode) if returncode < 0 else None,
                        timed_out=bool(timed_out),
                        duration_ms=round(((exited_at or [loop.time()])[0] - started) * 1000),
                        total_bytes=excerpt.total + excerpt.dropped,
                        truncated=excerpt.omitted + excerpt.dropped > 0,
                        omitted_bytes=excerpt.omitted + excerpt.dropped,
                        output=excerpt.text,
                    )
                )
            finally:
                if watchdog is not None:
                    watchdog.cancel()
                try:
                    reader.stop_waiting()
                    if not finished and (proc.returncode is None or group_alive(proc.pid)):
                        # Cancelled (or failed) mid-run: stop the whole group. The pipe
                        # is still read meanwhile (into the bounded stream), so a
                        # member that writes while it stops is not killed by SIGPIPE
                        # before its grace is over.
                        await self._terminate(proc)
                finally:
                    release(proc.pid)
                    reader.close()
                    if not exit_task.done():
                        exit_task.cancel()

    async def _spawn(
        self, loop: asyncio.AbstractEventLoop, args: ShellArgs, stream: OutputStream, *, wait: bool
    ) -> tuple[asyncio.subprocess.Process, _PipeReader]:
        argv = [self.shell, "-c", args.command] if isinstance(args.command, str) else args.command
        env = None if args.env is None else {**os.environ, **args.env}
        read_fd, write_fd = os.pipe()
        widen_pipe(read_fd, CHILD_PIPE_BYTES)  # Rule 7
        try:
            try:
                proc = await spawn_in_group(  # Rule 4: its own process group
                    *argv,
                    stdin=subprocess.DEVNULL,
                    stdout=write_fd,
                    stderr=write_fd,  # Rule 1: one pipe, arrival order kept
                    cwd=args.cwd,
                    env=env,
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
        hold(proc.pid)  # Rule 6: the group dies with this process
        return proc, _PipeReader(loop, read_fd, stream, self.read_chunk, wait_for_reader=wait)

    async def _watchdog(
        self, proc: asyncio.subprocess.Process, deadline: float, timed_out: list[bool]
    ) -> None:
        """At the command's deadline, terminate its process group."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(deadline - loop.time(), 0))
        if proc.returncode is None:
            timed_out.append(True)
            await self._terminate(proc)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        """Rule 4: SIGTERM the group, wait up to the grace period for the child to
        exit and the group to empty, then SIGKILL whatever is left and reap."""
        await stop_group(proc, self.grace)
