"""Streamed text through the whole transport against the shell tool alone, in the
same run.

    python benchmarks/bench_transport.py [--quick] [--mb N] [--check]

Baseline: the shell tool in-process (``run_tool(ShellTool(), ...)``), counting the
deltas it yields. Transport: the same command through ``kigi-stream serve`` in a
child process, its stdout pipe, the ``Client`` and the call's ``Reassembler``;
counted is the text the reassembler holds at the end. Both run a child that
writes ``N`` MB of text as fast as it can. Prints MB/s of delivered text for
each, the gaps each saw and the share of the bytes delivered (a consumer slower
than the child loses the middle, which is reported, not hidden), and the
transport's median share of the baseline's; and the CPU time each spends per
delivered MB (the flooding child is not counted), which says how much of a gap
is the transport's cost and how much is two cores shared three ways. The goals
are issue 19's: the transport's median rate at least 80% of in-process, and its
CPU per delivered MB at most twice in-process. ``bench_transport_floor.py``
measures how low that CPU can go with this wire (its JSON encode, pipe, split
and decode passes alone). Rates swing with the load on a shared machine: compare figures
from the same run only. It ends with which goals were met; ``--check`` exits 1
when one was missed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from _flood import flood_command
from _goals import Goals
from _timing import MB, client_flood, flood_parser, flood_plan

from kigi_tool_runtime import (
    Client,
    ShellArgs,
    ShellTool,
    ToolContext,
    ToolError,
    ToolResult,
    run_tool,
)

#: The goal: the transport delivers at least this share of the in-process rate.
GOAL_SHARE = 0.8
#: The goal: the transport's CPU per delivered MB at most this many times
#: in-process.
GOAL_CPU_RATIO = 2.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def in_process(size: int) -> tuple[float, int, int]:
    """Seconds, delivered text bytes and gap frames of the shell tool alone."""
    delivered = gaps = 0
    started = time.perf_counter()
    run = run_tool(ShellTool(), ShellArgs(command=flood_command(size)), ctx=ToolContext("bench"))
    async with run:
        async for event in run:
            if isinstance(event, ToolResult | ToolError):
                assert isinstance(event, ToolResult), event
                continue
            payload = getattr(event, "payload", None)
            delta = getattr(payload, "delta", "")
            delivered += len(delta.encode())
            gaps += bool(getattr(payload, "gap", False))
    return time.perf_counter() - started, delivered, gaps


async def in_process_costs(size: int, runs: int = 3) -> tuple[float, float]:
    """The median CPU and wall milliseconds per delivered MB of ``runs``
    in-process floods of ``size`` bytes (:func:`in_process`): the baseline the
    transport benchmarks hold their figures against."""
    cpu, wall = [], []
    for _ in range(runs):
        started = time.process_time()
        seconds, delivered, _ = await in_process(size)
        cpu.append((time.process_time() - started) / (delivered / MB) * 1000)
        wall.append(seconds / (delivered / MB) * 1000)
    return statistics.median(cpu), statistics.median(wall)


async def through_transport(client: Client, size: int) -> tuple[float, int, int]:
    """Seconds, reassembled text bytes and gaps of one call through serve."""
    elapsed, state = await client_flood(client, size)
    return elapsed, state.text_bytes, len(state.gaps)


async def main() -> int:
    args = flood_parser(__doc__, "three short rounds").parse_args()
    size, rounds = flood_plan(args, mb=200, rounds=5, quick_mb=20, quick_rounds=3)
    print(f"{size // MB} MB of text per round, {rounds} round(s), best and median rate")
    base: list[float] = []
    wire: list[float] = []
    base_gaps = wire_gaps = 0
    base_bytes = wire_bytes = 0
    base_cpu = wire_cpu = server_cpu = 0.0
    async with await Client.spawn([sys.executable, "-m", "kigi_tool_runtime", "serve"]) as client:
        await client.list_tools()  # the server is up before the clock starts
        assert client.process is not None
        pid = client.process.pid
        for _ in range(rounds):
            cpu = time.process_time()
            seconds, delivered, gaps = await in_process(size)
            base_cpu += time.process_time() - cpu
            base.append(delivered / seconds / MB)
            base_gaps += gaps
            base_bytes += delivered
            cpu, server = time.process_time(), cpu_seconds(pid)
            seconds, delivered, gaps = await through_transport(client, size)
            server_cpu += cpu_seconds(pid) - server
            wire_cpu += time.process_time() - cpu + cpu_seconds(pid) - server
            wire.append(delivered / seconds / MB)
            wire_gaps += gaps
            wire_bytes += delivered
    base_mb, wire_mb = max(base_bytes, 1) / MB, max(wire_bytes, 1) / MB
    print(
        f"CPU per delivered MB: in-process {base_cpu / base_mb * 1000:.2f} ms;"
        f" transport {wire_cpu / wire_mb * 1000:.2f} ms"
        f" (server {server_cpu / wire_mb * 1000:.2f} + client"
        f" {(wire_cpu - server_cpu) / wire_mb * 1000:.2f}), children not counted"
    )
    for name, rates, gaps, delivered in (
        ("shell tool in-process", base, base_gaps, base_bytes),
        ("serve -> pipe -> client -> reassembler", wire, wire_gaps, wire_bytes),
    ):
        print(
            f"{name:40s} best {max(rates):7.1f} MB/s  median {statistics.median(rates):7.1f} MB/s"
            f"  gap frames {gaps:4d}  delivered {delivered / (size * rounds):4.0%} of the bytes"
        )
    share = statistics.median(wire) / statistics.median(base)
    print(f"transport / in-process (median): {share:.0%}")
    goals = Goals()
    goals.record("transport's median rate as a share of in-process", share, GOAL_SHARE)
    ratio = (wire_cpu / wire_mb) / (base_cpu / base_mb)
    goals.record(
        "transport's CPU per delivered MB as a multiple of in-process",
        ratio,
        GOAL_CPU_RATIO,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
