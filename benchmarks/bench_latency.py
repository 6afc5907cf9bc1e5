"""Write-to-visible latency of a trickle, beside a baseline measured in the same run.

    python benchmarks/bench_latency.py [--quick] [--seconds S] [--baseline REF] [--check]

A child prints a line stamped with ``time.monotonic()`` (one clock for every
process on the machine) every 37 ms; the shell tool streams it through
``kigi-stream serve`` to the stdio ``Client``, and through ``serve --mcp`` to
the official MCP client. For every whole line the consumer sees, latency is
the time it became visible minus its stamp: p50 and p99 per pipeline. A fast
trickle (a line every 2 ms) then gives frames per second, which the pacer
keeps at about one partial frame per pacing interval.

Baseline: the same pipelines served by the code of git ``REF`` (default
``main``, exported with ``git archive`` and run by this interpreter), so both
columns come from the same machine in the same minute. Without git or the
ref, the baseline is reported as not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _goals import Goals, add_check_flag
from mcp import Client as McpClient
from mcp import StdioServerParameters

from kigi_tool_runtime import CallProgress, Client

ROOT = Path(__file__).resolve().parents[1]
PERIOD_S = 0.037
FAST_PERIOD_S = 0.002

CHILD = """\
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
period = float(sys.argv[2])
n = 0
while time.monotonic() < end:
    os.write(1, b"%d %.9f\\n" % (n, time.monotonic()))
    n += 1
    time.sleep(period)
"""


class Lines:
    """Whole lines out of streamed text, each timed when it became visible."""

    def __init__(self) -> None:
        self.partial = ""
        self.latencies: list[float] = []

    def feed(self, text: str) -> None:
        now = time.monotonic()
        *whole, self.partial = (self.partial + text).split("\n")
        for line in whole:
            stamp = float(line.split()[1])
            self.latencies.append((now - stamp) * 1000)


def _args(seconds: float, period: float) -> dict[str, Any]:
    return {"command": [sys.executable, "-c", CHILD, str(seconds), str(period)]}


async def stdio(python_path: str | None, seconds: float, period: float) -> tuple[Lines, int]:
    env = None if python_path is None else {**os.environ, "PYTHONPATH": python_path}
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
    lines = Lines()
    frames = 0
    async with await Client.spawn(argv, env=env, cwd=python_path) as client:
        async for item in client.call("bash", _args(seconds, period)):
            if isinstance(item, CallProgress):
                frames += 1
                lines.feed(item.frame.body.delta)
    return lines, frames


async def mcp(python_path: str | None, seconds: float, period: float) -> tuple[Lines, int]:
    env = None if python_path is None else {**os.environ, "PYTHONPATH": python_path}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kigi_tool_runtime", "serve", "--mcp"],
        env=env,
        cwd=python_path,
    )
    lines = Lines()
    frames = [0]

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        frames[0] += 1
        lines.feed(message or "")

    async with McpClient(params) as client:
        await client.call_tool("bash", _args(seconds, period), progress_callback=on_progress)
    return lines, frames[0]


@contextmanager
def exported(ref: str) -> Iterator[str | None]:
    """The packages of git ``ref`` in a temporary directory (``None`` when
    git or the ref is not there)."""
    if shutil.which("git") is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kigi-baseline-") as where:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "kigi_tool_runtime", "kigi_tool_protocol"],
            capture_output=True,
            check=False,
        )
        if archive.returncode:
            yield None
            return
        subprocess.run(["tar", "-x", "-C", where], input=archive.stdout, check=True)
        yield where


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s trickles instead of 5 s")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per trickle")
    parser.add_argument("--baseline", default="main", help="git ref of the baseline (main)")
    add_check_flag(parser)
    options = parser.parse_args()
    seconds = options.seconds or (2.0 if options.quick else 5.0)
    goals = Goals()
    print(f"a line every {PERIOD_S * 1000:g} ms for {seconds:g} s; latency in ms (p50 / p99)")
    with exported(options.baseline) as baseline:
        rows: dict[str, dict[str, tuple[float, float, float]]] = {}
        for name, run in (("serve -> Client", stdio), ("serve --mcp -> mcp client", mcp)):
            rows[name] = {}
            for label, path in (("baseline", baseline), ("this tree", None)):
                if label == "baseline" and path is None:
                    rows[name][label] = (float("nan"),) * 3
                    continue
                lines, _ = asyncio.run(run(path, seconds, PERIOD_S))
                fast, fast_frames = asyncio.run(run(path, seconds / 2, FAST_PERIOD_S))
                rows[name][label] = (
                    _pct(lines.latencies, 0.5),
                    _pct(lines.latencies, 0.99),
                    fast_frames / (seconds / 2),
                )
                assert lines.latencies, f"{name}: no line arrived"
                assert fast.latencies, f"{name}: no line of the fast trickle arrived"
            base, now = rows[name]["baseline"], rows[name]["this tree"]
            print(f"\n{name}")
            print(f"  {'':28} {'baseline':>10} {'this tree':>10}")
            print(f"  {'p50 write-to-visible (ms)':28} {base[0]:10.1f} {now[0]:10.1f}")
            print(f"  {'p99 write-to-visible (ms)':28} {base[1]:10.1f} {now[1]:10.1f}")
            print(f"  {'frames/s, a line every 2 ms':28} {base[2]:10.1f} {now[2]:10.1f}")
            goals.record(f"{name} p50 ms", now[0], 5.0, at_most=True)
            goals.record(f"{name} p99 ms", now[1], 40.0, at_most=True)
    return goals.finish(options.check)


if __name__ == "__main__":
    sys.exit(main())
