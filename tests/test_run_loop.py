"""The call's one loop (``_call/_run_loop``): frames in order, the terminal
kept and not yielded, a host's stop as the end, the tool stopped when the loop
is left early."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from bounded import run_within

from kigi_tool_protocol import ToolCallProgressFrame
from kigi_tool_runtime import ShellTool, ToolContext, ToolError, ToolResult
from kigi_tool_runtime._call._run_loop import CallLoop, ended_early
from kigi_tool_runtime._tools._runner import run_tool


def _loop(command: str, call_id: str = "c1") -> CallLoop:
    return CallLoop(run_tool(ShellTool(), {"command": command}, ctx=ToolContext(call_id)))


def test_the_loop_yields_frames_and_keeps_the_terminal() -> None:
    """Every yielded item is a frame of the call; the run's terminal is the
    loop's, after the frames."""

    async def main() -> tuple[list[ToolCallProgressFrame[Any]], Any]:
        loop = _loop("printf 'a\\nb\\n'")
        async with contextlib.aclosing(loop.frames()) as frames:
            seen = [frame async for frame in frames]
        return seen, loop.terminal

    frames, terminal = run_within(main(), 30)
    assert frames
    assert all(isinstance(f, ToolCallProgressFrame) and f.tool_call_id == "c1" for f in frames)
    assert isinstance(terminal, ToolResult)


def test_a_hosts_stop_is_the_end_and_stops_the_tool() -> None:
    """``stop`` then leaving the loop: the call's end is the host's error, and
    the tool (a process that would run for a minute) is stopped."""

    async def main() -> Any:
        loop = _loop("echo go; sleep 60")
        async with contextlib.aclosing(loop.frames()) as frames:
            async for _ in frames:
                loop.stop(ToolError.frame_too_large(99, 10))
                break
        return loop.terminal

    terminal = run_within(main(), 50)  # the run's close waits for the stopped tool
    assert isinstance(terminal, ToolError)
    assert terminal.kind.value == "frame_too_large"


def test_ending_the_span_twice_does_nothing() -> None:
    """Without a span, ``end`` and ``abandon`` are no-ops, any number of times."""
    loop = _loop("true")
    loop.end()
    loop.abandon()
    loop.end()
    assert loop.span is None


@pytest.mark.parametrize(
    ("failure", "kind", "says"),
    [
        (RuntimeError("disk gone"), "internal_error", "RuntimeError: disk gone"),
        (asyncio.CancelledError(), "cancelled", "stopped"),
        (None, "cancelled", "stopped"),
    ],
)
def test_a_call_left_early_is_named_by_what_left_it(
    failure: BaseException | None, kind: str, says: str
) -> None:
    """A producer left before the run's terminal gives its reader an end that
    says why: the failure by name, or that the call was stopped."""
    end = ended_early(failure)
    assert end.kind.value == kind
    assert says in end.message
