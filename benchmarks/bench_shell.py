"""Shell tool throughput against a raw asyncio read of the same child, same run.

A child writes N MiB to stdout as fast as it can. The baseline reads its stdout
with asyncio (``create_subprocess_exec(stdout=PIPE)`` and 64 KiB
``StreamReader.read`` calls) and only counts bytes. The shell tool runs the same
child through ``run_tool``: 64 KiB pipe reads into a tail buffer, 16 KiB UTF-8
deltas, the runner's channel, and a consumer that counts delta characters and gap
bytes; a second row reads the pipe 8 KiB at a time instead of 64 KiB. Memory
is this process's resident set, sampled while the bytes flow.

    python benchmarks/bench_shell.py            # 256 MiB, best of 3
    python benchmarks/bench_shell.py --quick    # 32 MiB, once

It ends with which goals were met; ``--check`` exits 1 when one was missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import NamedTuple

from _goals import Goals, add_check_flag

from kigi_tool_protocol import CustomProgress, PartialResultPayload
from kigi_tool_runtime import ShellOutcome, ShellTool, ToolContext, ToolResult, run_tool
from kigi_tool_runtime._tools._shell import READ_CHUNK_BYTES

MIB = 1024 * 1024
#: The goal: the shell tool streams at least this fraction of the raw read rate.
GOAL = 0.5
#: The read size of the comparison row: what docs/design.md §4 first asked for.
SMALL_READ = 8 * 1024
#: Sample memory every this many reads or frames (cheap: one small /proc read).
SAMPLE_EVERY = 64

CHILD = """
import os, sys
block = b"abcdefghijklmno\\n" * 4096
remaining = int(sys.argv[1])
while remaining > 0:
    remaining -= os.write(1, block[: min(remaining, len(block))])
"""

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * PAGE


class Figures(NamedTuple):
    seconds: float
    cpu_seconds: float  # this process's CPU time: less sensitive to a busy machine
    bytes: int
    rss_growth: int
    frames: int = 0
    gap_bytes: int = 0

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds


async def raw(size: int) -> Figures:
    base = peak = rss()
    start, cpu = time.perf_counter(), time.process_time()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(size), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    got = reads = 0
    while chunk := await proc.stdout.read(64 * 1024):
        got += len(chunk)
        reads += 1
        if reads % SAMPLE_EVERY == 0:
            peak = max(peak, rss())
    await proc.wait()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert got == size, (got, size)
    return Figures(seconds, cpu, got, max(peak, rss()) - base)


async def tool(size: int, read_chunk: int = READ_CHUNK_BYTES) -> Figures:
    base = peak = rss()
    start, cpu = time.perf_counter(), time.process_time()
    frames = surfaced = 0
    args = {"command": [sys.executable, "-c", CHILD, str(size)]}
    outcome: ShellOutcome | None = None
    shell = ShellTool(read_chunk=read_chunk)
    async for item in run_tool(shell, args, ctx=ToolContext("bench")):
        if isinstance(item, CustomProgress):
            payload = item.payload
            assert isinstance(payload, PartialResultPayload)
            surfaced += len(payload.delta)  # ASCII: characters are bytes
            frames += 1
            if frames % SAMPLE_EVERY == 0:
                peak = max(peak, rss())
        elif isinstance(item, ToolResult):
            assert isinstance(item.value, ShellOutcome)
            outcome = item.value
        else:
            raise SystemExit(f"the tool failed: {item!r}")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert outcome is not None
    assert outcome.exit_code == 0
    assert outcome.total_bytes == size, (outcome.total_bytes, size)
    return Figures(seconds, cpu, size, max(peak, rss()) - base, frames, size - surfaced)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB, one round")
    parser.add_argument("--mib", type=int, help="MiB per child (default 256; 32 with --quick)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    add_check_flag(parser)
    options = parser.parse_args()
    size = (options.mib or (32 if options.quick else 256)) * MIB
    rounds = options.rounds or (1 if options.quick else 3)

    raws: list[Figures] = []
    tools: list[Figures] = []
    small: list[Figures] = []
    for _ in range(rounds):  # alternate, so both see the same machine load
        raws.append(asyncio.run(raw(size)))
        tools.append(asyncio.run(tool(size)))
        small.append(asyncio.run(tool(size, SMALL_READ)))

    def line(name: str, runs: list[Figures]) -> str:
        best = max(runs, key=lambda f: f.mib_per_s)
        median = statistics.median(f.mib_per_s for f in runs)
        extra = f"  frames {best.frames}  gap bytes {best.gap_bytes}" if best.frames else ""
        return (
            f"{name:>12}: best {best.mib_per_s:8.1f} MiB/s  median {median:8.1f} MiB/s"
            f"  ({best.seconds:.3f} s, CPU {min(f.cpu_seconds for f in runs):.3f} s)"
            f"  peak RSS growth"
            f" {max(f.rss_growth for f in runs) / MIB:6.1f} MiB{extra}"
        )

    print(f"{size // MIB} MiB per child, {rounds} round(s), Python {sys.version.split()[0]}")
    print(line("raw asyncio", raws))
    print(line("shell tool", tools))
    print(line("8 KiB reads", small))
    raw_best = max(f.mib_per_s for f in raws)
    goals = Goals()
    for name, runs in (("shell tool", tools), ("8 KiB reads", small)):
        ratio = max(f.mib_per_s for f in runs) / raw_best
        goals.record(f"{name}: share of the raw read rate", ratio, GOAL)
    return goals.finish(options.check)


if __name__ == "__main__":
    sys.exit(main())
