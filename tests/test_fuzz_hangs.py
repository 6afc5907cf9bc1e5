"""The fuzz kit drives tiny caps and characters split across ticks, and turns a
tool that never suspends into a failing example instead of a hung run."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_runtime import (
    OutputStream,
    ShellArgs,
    ShellTool,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
)
from kigi_tool_runtime.testing import (
    ToolHangError,
    collect,
    fuzz_streaming_tool,
    python_writer_argv,
    schedules,
    utf8_text_sources,
)
from kigi_tool_runtime.testing._strategies import ScheduleStep, tiny_caps

#: Finds a bug without shrinking: each failing example here costs a deadline.
FIND_HANG = settings(
    max_examples=50,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


class StepArgs(msgspec.Struct):
    steps: list[bytes | None]


def step_args(source: bytes, steps: list[ScheduleStep]) -> StepArgs:
    return StepArgs(steps=steps)


class DrainWhileFull(Tool[StepArgs]):
    """Broken: on a tick it drains for as long as a cap's worth of bytes is
    pending, never awaiting. A held incomplete character stays pending and a
    drain cannot move it, so at caps below a character the loop spins."""

    id = "drain_while_full"
    args_type = StepArgs

    def __init__(self, cap: int | None) -> None:
        self.spec = StreamingSpec(subkind="spin_chunk", max_delta_bytes=cap)
        self.capabilities = ToolCapabilities(streaming=self.spec)

    async def execute(self, ctx: ToolContext, args: StepArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(self.spec, capacity=1 << 20)
        bound = max(
            16 * 1024 if self.spec.max_delta_bytes is None else self.spec.max_delta_bytes, 1
        )
        for step in args.steps:
            if step is None:
                while stream.pending >= bound:
                    for frame in stream.drain():
                        yield frame
            else:
                stream.write(step)
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=stream.total)


class Held(DrainWhileFull):
    """Correct: the same tool draining once per tick."""

    id = "held"

    async def execute(self, ctx: ToolContext, args: StepArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(self.spec, capacity=1 << 20)
        for step in args.steps:
            if step is None:
                for frame in stream.drain():
                    yield frame
            else:
                stream.write(step)
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=stream.total)


def test_collect_with_a_deadline_interrupts_a_spinning_tool() -> None:
    """A lone lead byte held at cap 1: the broken tool spins; the watchdog stops it
    at the deadline with ToolHangError, and the process goes on."""
    started = time.monotonic()
    with pytest.raises(ToolHangError, match=r"did not finish within 0\.5 s.*never suspended"):
        collect(DrainWhileFull(1), StepArgs(steps=[b"\xc3", None, b"\xa9"]), deadline_s=0.5)
    assert time.monotonic() - started < 20  # the bound of the wait, never a timing goal
    # The same call without the pause, and a correct tool, end normally.
    assert collect(Held(1), StepArgs(steps=[b"\xc3", None, b"\xa9"]), deadline_s=5).text == "é"


def test_collect_refuses_a_bad_deadline() -> None:
    with pytest.raises(ValueError, match="deadline_s must be a positive number"):
        collect(Held(1), StepArgs(steps=[]), deadline_s=0)
    with pytest.raises(ValueError, match="deadline_s must be a positive number"):
        collect(Held(1), StepArgs(steps=[]), deadline_s=float("nan"))
    failure: list[BaseException] = []

    def off_main() -> None:
        try:
            collect(Held(1), StepArgs(steps=[]), deadline_s=1)
        except BaseException as error:  # the assertion is in the main thread
            failure.append(error)

    thread = threading.Thread(target=off_main)
    thread.start()
    thread.join(30)
    assert len(failure) == 1
    assert isinstance(failure[0], ValueError)
    assert "main thread" in str(failure[0])


def test_fuzz_finds_a_tool_that_spins_on_a_held_character() -> None:
    """Given a factory, the fuzzer draws tiny caps and split characters across
    ticks, and the tool that spins on a held character fails as a hang."""
    test = fuzz_streaming_tool(
        DrainWhileFull,
        step_args,
        sources=utf8_text_sources(),
        call_deadline_s=0.5,
        hypothesis_settings=FIND_HANG,
    )
    with pytest.raises(ToolHangError, match="drain_while_full"):
        test()


def test_fuzz_refuses_a_bad_call_deadline() -> None:
    with pytest.raises(ValueError, match="call_deadline_s must be a positive number"):
        fuzz_streaming_tool(Held, step_args, call_deadline_s=-1)


# A correct tool passes at every drawn cap.
test_held_tool_fuzzed_at_tiny_caps = fuzz_streaming_tool(Held, step_args, max_examples=60)

# The shell tool, at tiny caps, with a real child writing characters split
# across ticks: nothing spins, nothing is lost, every character comes whole.
test_shell_tool_fuzzed_at_tiny_caps = fuzz_streaming_tool(
    lambda cap: ShellTool(tick=0.002, max_delta_bytes=cap),
    lambda source, steps: ShellArgs(command=python_writer_argv(steps, tick_s=0.004)),
    sources=utf8_text_sources(),
    lossless=True,
    max_examples=12,
)


@given(cap=tiny_caps())
def test_tiny_caps_are_mostly_below_a_character(cap: int | None) -> None:
    assert cap is None or cap >= 0


def test_tiny_caps_reach_every_cap_from_0_to_4() -> None:
    seen: set[int | None] = set()

    @settings(max_examples=200, derandomize=True, database=None)
    @given(cap=tiny_caps())
    def draw(cap: int | None) -> None:
        seen.add(cap)

    draw()
    assert {0, 1, 2, 3, 4} <= seen


def test_schedules_cut_inside_characters() -> None:
    """Half the cuts fall inside multi-byte characters, so split characters are
    drawn often, not by chance."""
    source = "é✓😀".encode() * 20
    inside = 0

    @settings(max_examples=100, derandomize=True, database=None)
    @given(data=st.data())
    def draw(data: st.DataObject) -> None:
        nonlocal inside
        steps = data.draw(schedules(source))
        writes = [step for step in steps if step is not None]
        assert b"".join(writes) == source
        inside += sum(1 for write in writes[1:] if write and 0x80 <= write[0] < 0xC0)

    draw()
    assert inside >= 100
