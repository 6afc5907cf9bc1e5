"""``ShellTool``: run a command, stream its output, return how it ended.

The shell tool is a user of the same :class:`Output` and pacer as every
function tool: its call body is one ``out.run`` (``_command.py`` holds the
process rules: one pipe for stdout and stderr, the own process group, the
deadline, the stop on cancel, the lifeline hold, the bounded exit drain) and
its :class:`ShellOutcome` is built from the run's result and the output's
excerpt. :func:`stream_output` cuts the frames (``_paced.py``).

Invariants:

Rule 1. Memory is bounded whatever the child writes and however slowly frames
        are taken: the output is a bounded tail and a bounded head; a consumer
        that falls behind sees a gap frame saying what was skipped.
Rule 2. Every byte read is surfaced in a delta or skipped in a reported gap;
        ``finish`` at the end flushes what is pending, so none is stranded.
Rule 3. A whole frame goes at once, the first output after a quiet spell goes
        at once, and partial frames come at most every ``tick`` seconds (the
        pacing interval) while output keeps coming.
Rule 4. With ``wait_for_reader`` (``kigi-stream run`` into a pipe or a file),
        nothing is skipped: a consumer that falls behind pauses the reading of
        the command's pipe instead of seeing a gap (``_command.py`` Rule 7).

POSIX only: process groups, ``killpg`` and a non-blocking pipe read from the
event loop (``add_reader``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

import msgspec

from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES

from .._producer._chunk import cap_of
from .._producer._pacer import DEFAULT_PACING_S
from ._author_output import Output
from ._command import CHILD_PIPE_BYTES as CHILD_PIPE_BYTES
from ._command import (
    EXIT_DRAIN_S,
    MIN_READ_CHUNK_BYTES,
    READ_CHUNK_BYTES,
    TERM_GRACE_S,
    CommandNotStarted,
    CommandSettings,
    default_shell,
)
from ._command import WAKEUP_READ_BYTES as WAKEUP_READ_BYTES
from ._paced import DEFAULT_OUTPUT_LIMIT, DEFAULT_TAIL_BYTES, stream_output
from ._shell_outcome import ShellOutcome
from ._tool import Tool, ToolContext, ToolEvent, ToolResult

__all__ = ("CommandNotStarted", "ShellArgs", "ShellOutcome", "ShellTool")

#: The shell tool's streaming contract: the subkind harnesses know, deltas of the
#: default cap (16 KiB), stated on the wire.
SHELL_SPEC: Final = StreamingSpec(
    subkind="bash_output_chunk", max_delta_bytes=DEFAULT_MAX_DELTA_BYTES
)

#: The pacing interval when none is given (``tick``): partial frames at most
#: this often while output keeps coming; a whole frame, and the first output
#: after a quiet spell, go at once (:class:`Pacer`).
DEFAULT_TICK_S: Final = DEFAULT_PACING_S

#: The newest bytes kept between drains (see ``DEFAULT_TAIL_BYTES``).
DEFAULT_TAIL_CAPACITY: Final = DEFAULT_TAIL_BYTES

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
    waits on its full pipe; module Rule 4). Off by default: a host's call must
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
        self.shell = shell or default_shell()
        self.wait_for_reader = wait_for_reader

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
        limit = args.output_limit or DEFAULT_OUTPUT_LIMIT
        timeout_ms = args.timeout_ms or self.default_timeout_ms

        async def body(out: Output) -> ToolResult:
            ended = await out.run(
                args.command,
                cwd=args.cwd,
                env=args.env,
                timeout=None if timeout_ms is None else timeout_ms / 1000,
            )
            excerpt = out._excerpt(limit)
            return ToolResult(
                value=ShellOutcome(
                    exit_code=ended.exit_code,
                    signal=ended.signal,
                    timed_out=ended.timed_out,
                    duration_ms=ended.duration_ms,
                    total_bytes=excerpt.total + excerpt.dropped,
                    truncated=excerpt.omitted + excerpt.dropped > 0,
                    omitted_bytes=excerpt.omitted + excerpt.dropped,
                    output=excerpt.text,
                )
            )

        settings = CommandSettings(self.shell, self.grace, self.exit_drain, self.read_chunk)
        events = stream_output(
            ctx,
            self.spec,
            body,
            pacing=self.tick,
            # Exactly the tail asked for: a larger one would hide the gaps a
            # caller sized it to show (the excerpt's end is then shorter).
            tail_bytes=self.tail_capacity,
            output_limit=limit,
            limit=self.limit,
            settings=settings,
            wait_for_reader=self.wait_for_reader,
        )
        async for event in events:
            yield event
