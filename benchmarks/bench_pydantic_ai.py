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

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from _flood import flood_command
from _goals import Goals, add_check_flag
from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.function import DeltaToolCall, FunctionModel

from kigi_tool_runtime import ServedCall, ShellTool
from kigi_tool_runtime.pydantic_ai import KigiToolOutput, KigiToolset, ToolOutputFolder

MB = 1_000_000


class Round:
    """One call: seconds, delivered text bytes, frames, gap frames, the bytes
    the fold accounts for (delivered + lost), and how many kigi.tool_output
    events the run's consumer read (the frames, for the baseline)."""

    def __init__(
        self, seconds: float, delivered: int, frames: int, gaps: int, accounted: int
    ) -> None:
        self.seconds, self.delivered, self.frames, self.gaps = seconds, delivered, frames, gaps
        self.accounted = accounted
        self.events = frames


async def served_call(size: int) -> Round:
    started = time.perf_counter()
    async with ServedCall(ShellTool(), {"command": flood_command(size)}, call_id="c1") as call:
        async for _ in call:
            pass
    elapsed = time.perf_counter() - started
    report = call.end.report
    assert report is not None
    return Round(elapsed, report.text_bytes, report.frames, len(report.gaps), _accounted(report))


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


async def through_agent(size: int) -> Round:
    agent = Agent(_model(size), toolsets=[KigiToolset([ShellTool()])])
    folder = ToolOutputFolder(keep_text=False)
    events = 0
    started = time.perf_counter()
    async with agent.run_stream_events("go") as stream:
        async for event in stream:
            folder.absorb(event)
            events += isinstance(event, KigiToolOutput)
    elapsed = time.perf_counter() - started
    report = folder["c1"].report()
    assert report is not None
    result = Round(elapsed, report.text_bytes, report.frames, len(report.gaps), _accounted(report))
    result.events = events
    return result


def _line(name: str, rounds: list[Round], size: int) -> str:
    rates = [r.delivered / r.seconds / MB for r in rounds]
    frames = [r.frames / r.seconds for r in rounds]
    delivered = sum(r.delivered for r in rounds) / (size * len(rounds))
    gaps = sum(r.gaps for r in rounds)
    return (
        f"{name:34s} median {statistics.median(rates):7.1f} MB/s"
        f" {statistics.median(frames):7.0f} frames/s"
        f"  gap frames {gaps:4d}  delivered {delivered:4.0%}"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two short rounds")
    parser.add_argument("--mb", type=int, help="MB the child writes per round")
    add_check_flag(parser)
    args = parser.parse_args()
    size = (args.mb or (20 if args.quick else 100)) * MB
    rounds = 2 if args.quick else 4
    print(f"{size // MB} MB of text per round, {rounds} round(s), median rates")
    base: list[Round] = []
    agent: list[Round] = []
    for _ in range(rounds):
        base.append(await served_call(size))
        agent.append(await through_agent(size))
    print(_line("ServedCall alone (baseline)", base, size))
    print(_line("pydantic-ai Agent, KigiToolset", agent, size))
    share = statistics.median(r.delivered / r.seconds for r in agent) / statistics.median(
        r.delivered / r.seconds for r in base
    )
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
