"""``fuzz_streaming_tool``: a Hypothesis test for any streaming tool in one call.

The test draws a source (any bytes by default) and a write/tick schedule for
it, asks the caller to turn them into the tool's arguments, runs the tool
through :func:`run_tool` under a deadline, and judges its frames with
:func:`check_stream`::

    test_my_tool = fuzz_streaming_tool(
        MyTool(), lambda source, steps: MyArgs(data=source), max_examples=50
    )

A function tool (``@tool``) is a tool like any other: pass it, or a factory
that decorates the function for a cap (``lambda cap: tool(max_delta_bytes=cap)(fn)``),
its arguments made from the schedule (its writes, or a writer child for
``out.run``).

Given a factory that builds the tool for a cap instead of a tool, the test also
draws the cap, mostly 0 to 4 bytes: at those caps a character split across
writes is held back between ticks, where a drain loop that does not suspend
spins forever, which the deadline turns into a failure.

:func:`python_writer_argv` makes a command that writes a schedule from a real
child process, for tools that run commands (the shell tool).
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from kigi_tool_protocol import StreamingSpec

from .._producer._chunk import cap_of
from .._tools._errors import ToolError
from .._tools._tool import Tool
from ._check import CheckedStream, check_stream
from ._collect import Collected, collect
from ._strategies import ScheduleStep, byte_sources, schedules, tiny_caps

__all__ = ("fuzz_streaming_tool", "python_writer_argv")

#: How long one fuzzed call may take, start to end, before the example fails as
#: a hang (see :func:`collect`): far above what a correct tool needs for the
#: drawn sources, so only a tool that never ends or never suspends reaches it.
CALL_DEADLINE_S: Final = 30.0

#: How long a child made by :func:`python_writer_argv` pauses on a tick: long
#: enough for the tool to see the bytes so far as one read, short enough that a
#: schedule of a hundred ticks costs half a second.
WRITER_TICK_S: Final = 0.005

#: Source bytes per argument of a writer command. Linux refuses one argument
#: over 128 KiB (``MAX_ARG_STRLEN``); 72 KiB is 96 KiB of base64, well below.
WRITER_ARG_BYTES: Final = 72 * 1024

# Each argument is "t" (pause), "a<base64>" (bytes to append to the next write)
# or "w<base64>" (append, then write everything pending in one os.write loop).
_WRITER_SCRIPT: Final = """\
import base64, os, sys, time
pending = b""
for arg in sys.argv[1:]:
    if arg == "t":
        time.sleep(%r)
        continue
    pending += base64.b64decode(arg[1:])
    if arg[0] == "w":
        view = memoryview(pending)
        while view:
            view = view[os.write(1, view):]
        pending = b""
"""


def python_writer_argv(
    steps: Sequence[ScheduleStep], *, tick_s: float = WRITER_TICK_S
) -> list[str]:
    """An argv (``sys.executable -c ...``) whose process writes each step's bytes
    to stdout as one write, in order, and pauses ``tick_s`` seconds on each
    tick (``None``); runs of ticks pause once.

    Raises:
        ValueError: ``tick_s`` is negative.
    """
    if tick_s < 0:
        raise ValueError(f"tick_s must be >= 0, got {tick_s}")
    argv = [sys.executable, "-c", _WRITER_SCRIPT % tick_s]
    for step in steps:
        if step is None:
            if argv[-1] != "t":
                argv.append("t")
            continue
        pieces = [step[at : at + WRITER_ARG_BYTES] for at in range(0, len(step), WRITER_ARG_BYTES)]
        pieces = pieces or [b""]
        for number, piece in enumerate(pieces, 1):
            mark = "w" if number == len(pieces) else "a"
            argv.append(mark + base64.b64encode(piece).decode("ascii"))
    return argv


def fuzz_streaming_tool(
    tool: Tool[Any] | Callable[[int | None], Tool[Any]],
    make_args: Callable[[bytes, list[ScheduleStep]], Any],
    *,
    sources: st.SearchStrategy[bytes] | None = None,
    tail_capacity: int | None = None,
    limit: int | None = None,
    lossless: bool = False,
    max_examples: int | None = None,
    hypothesis_settings: settings | None = None,
    check_result: Callable[[bytes, Collected, CheckedStream], None] | None = None,
    call_deadline_s: float = CALL_DEADLINE_S,
) -> Callable[[], None]:
    """A Hypothesis test (assign it to a ``test_*`` name) that streams drawn
    sources through ``tool`` and checks every frame sequence with
    :func:`check_stream`.

    Args:
        tool: a streaming tool (``capabilities.streaming`` set): its spec gives
            the subkind and the cap checked. Or a factory that builds one for
            a ``max_delta_bytes`` (``None``: the default cap): then each
            example draws the cap from :func:`tiny_caps`.
        make_args: the tool's arguments for a source and a write/tick schedule
            of it (the schedule's writes concatenate to the source; use it when
            the tool can write in pieces, e.g. :func:`python_writer_argv`).
        sources: the sources to draw (default :func:`byte_sources`).
        tail_capacity: the tool's tail size, when known (see
            :func:`check_stream`).
        limit: the tool's hard output limit, when it has one: bytes past it are
            refused, so the stream accounts for ``min(len(source), limit)``, and
            must say ``truncated`` when it refused any.
        lossless: the tool must never report a gap.
        max_examples: examples to run (default: the active profile's). The
            test has no deadline: a run starts an event loop, often a process.
        hypothesis_settings: a whole ``hypothesis.settings`` to run under
            instead (``max_examples`` and the deadline are then its own).
        check_result: called with the source, the collected call and the
            checked stream, to assert on the tool's result as well.
        call_deadline_s: how long one call may take before the example fails
            with :class:`ToolHangError` (the test must run in the main thread).
            Hypothesis then shrinks the example, and each shrinking step that
            still hangs costs this long again: to stop at the first hang, pass
            ``hypothesis_settings`` whose ``phases`` leave out ``Phase.shrink``.

    Returns:
        a test function taking no arguments.

    Raises:
        ValueError: ``tool`` (or what the factory builds for the default cap)
            does not stream, ``limit`` is negative, ``tail_capacity`` is below
            1, or ``call_deadline_s`` is not a positive number.
    """
    factory = None if isinstance(tool, Tool) else tool
    probe = tool if isinstance(tool, Tool) else tool(None)
    _spec_of(probe)  # refuse a tool that does not stream when the test is built
    if not (isinstance(call_deadline_s, (int, float)) and 0 < call_deadline_s < float("inf")):
        raise ValueError(f"call_deadline_s must be a positive number, got {call_deadline_s!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if tail_capacity is not None and tail_capacity < 1:
        # Refused here, not by check_stream inside every example.
        raise ValueError(f"tail_capacity must be >= 1 or None, got {tail_capacity}")
    drawn = byte_sources() if sources is None else sources

    def fuzz(source: bytes, data: st.DataObject) -> None:
        subject = probe
        if factory is not None:
            subject = factory(data.draw(tiny_caps(), label="max_delta_bytes"))
        spec = _spec_of(subject)
        cap = cap_of(spec.max_delta_bytes)
        steps = data.draw(schedules(source), label="steps")
        collected = collect(subject, make_args(source, steps), deadline_s=call_deadline_s)
        terminal = collected.terminal
        if isinstance(terminal, ToolError):
            raise AssertionError(
                f"tool {subject.id!r} failed ({terminal.kind.value}): {terminal.message}"
            )
        checked = check_stream(
            collected.frames,
            source,
            cap=cap,
            tail_capacity=tail_capacity,
            total=len(source) if limit is None else min(len(source), limit),
            truncated=limit is not None and len(source) > limit,
            subkind=spec.subkind,
            lossless=lossless,
        )
        if collected.dropped_after_terminal:
            raise AssertionError(
                f"tool {subject.id!r} yielded {collected.dropped_after_terminal} items after"
                " its terminal"
            )
        if check_result is not None:
            check_result(source, collected, checked)

    fuzz.__name__ = fuzz.__qualname__ = f"test_fuzz_{probe.id.replace(':', '_')}"
    fuzz.__doc__ = (
        f"Tool {probe.id!r} keeps the streaming contract over drawn sources and schedules."
    )
    test: Callable[[], None] = given(source=drawn, data=st.data())(fuzz)
    if hypothesis_settings is not None:
        return hypothesis_settings(test)
    # A run starts an event loop and often a process: its time says nothing
    # about the tool's correctness, so no example has a deadline.
    if max_examples is None:
        return settings(deadline=None)(test)
    return settings(deadline=None, max_examples=max_examples)(test)


def _spec_of(tool: Tool[Any]) -> StreamingSpec:
    spec = tool.capabilities.streaming
    if spec is None:
        raise ValueError(f"tool {tool.id!r} does not stream (capabilities.streaming is unset)")
    return spec
