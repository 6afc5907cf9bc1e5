"""Streamed text through a pydantic-ai agent against the served call alone, in
the same run.

    python benchmarks/bench_pydantic_ai.py [--quick] [--mb N] [--check]

Baseline: ``ServedCall`` alone (the shell tool's frames taken in-process, no
framework). pydantic-ai: the same command called by a real ``Agent`` (its
``FunctionModel`` scripted to call the shell tool once) through
``KigiToolset``, every frame a ``kigi.tool_output`` event read from
``run_stream_events`` and folded by a ``ToolOutputFolder``. Each child writes
``N`` MB of text as fast as it can; a consumer slower than the child loses the
middle (reported as gaps, not hidden), so the figures are delivered text per
second, frames per second, and the share of the bytes delivered. Rates swing
with the load on a shared machine: compare figures from the same run only. It
ends with which goals were met (every frame reached the run's consumer as one
event, and the fold accounts for every byte); ``--check`` exits 1 on a miss.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from _flood import flood_command
from _goals import Goals
from _timing import MB, Round, flood_parser, flood_plan, median_line, median_rate
from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.function import DeltaToolCall, FunctionModel

from kigi_tool_runtime import ServedCall, ShellTool
from kigi_tool_runtime.pydantic_ai import KigiToolOutput, KigiToolset, ToolOutputFolder


@dataclass
class AgentRound(Round):
    """One call's figures (:class:`Round`), the bytes the fold accounts for
    (delivered + lost), and how many kigi.tool_output events the run's consumer
    read (the frames, for the baseline)."""

    accounted: int
    events: int


async def served_call(size: int) -> AgentRound:
    started = time.perf_counter()
    async with ServedCall(ShellTool(), {"command": flood_command(size)}, call_id="c1") as call:
        async for _ in call:
            pass
    elapsed = time.perf_counter() - started
    report = call.end.report
    assert report is not None
    return AgentRound(
        elapsed,
        report.text_bytes,
        report.frames,
        len(report.gaps),
        _accounted(report),
        report.frames,
    )


def _accounted(report: Any) -> int:
    return int(report.text_bytes + report.lost_bytes)


def _model(size: int) -> FunctionModel:
    async def stream(messages: list[Any], info: Any) -> AsyncIterator[Any]:
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            yield "done"
        else:
            arguments = json.dumps({"command": flood_command(size)})
            yield {0: DeltaToolCall("bash", arguments, tool_call_id="c1")}

    return FunctionModel(stream_function=stream)


async def through_agent(size: int) -> AgentRound:
    agent = Agent(_model(size), toolsets=[KigiToolset([ShellTool()])])
    folder = ToolOutputFolder(keep_text=False)
    events = 0
    started = time.perf_counter()
    async with agent.run_stream_events("go") as agent_events:
        async for event in agent_events:
            folder.absorb(event)
            events += isinstance(event, KigiToolOutput)
    elapsed = time.perf_counter() - started
    report = folder["c1"].report()
    assert report is not None
    return AgentRound(
        elapsed, report.text_bytes, report.frames, len(report.gaps), _accounted(report), events
    )


def _line(name: str, rounds: list[AgentRound], size: int) -> str:
    return median_line(name, rounds, size, width=34, per="frames")


async def main() -> int:
    args = flood_parser(__doc__, "two short rounds").parse_args()
    size, rounds = flood_plan(args, mb=100, rounds=4, quick_mb=20, quick_rounds=2)
    print(f"{size // MB} MB of text per round, {rounds} round(s), median rates")
    base: list[AgentRound] = []
    agent: list[AgentRound] = []
    for _ in range(rounds):
        base.append(await served_call(size))
        agent.append(await through_agent(size))
    print(_line("ServedCall alone (baseline)", base, size))
    print(_line("pydantic-ai Agent, KigiToolset", agent, size))
    share = median_rate(agent) / median_rate(base)
    print(f"pydantic-ai / ServedCall alone (median MB/s): {share:.0%}")
    per_event = statistics.median(
        (a.seconds - b.seconds) / max(a.frames, 1) * 1e6 for a, b in zip(agent, base, strict=True)
    )
    print(f"time added per frame (median of rounds): {per_event:.0f} us")
    goals = Goals()
    goals.record(
        "frames that reached the consumer as no event",
        sum(abs(r.frames - r.events) for r in agent),
        0,
        at_most=True,
    )
    goals.record(
        "bytes the fold does not account for",
        sum(abs(size - r.accounted) for r in agent),
        0,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
