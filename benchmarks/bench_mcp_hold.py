"""What holding a response until the host has read its notifications costs per
call, beside the same server with the hold off, in the same run.

    python benchmarks/bench_mcp_hold.py [--quick] [--calls N] [--check]

``kigi-stream serve --mcp`` holds each response that follows notifications
until the host has read them (so the official TypeScript client, which defers
notifications but not responses, loses none). Baseline: the same server with
the hold off (``serve_stdio_mcp(..., hold_responses=False)``). Each round makes
``N`` one-write shell calls with a progress token through a real client over
stdio: the official Python client, and the official TypeScript client run by
Node (installed with npm into a temporary directory; skipped as "n/a" without
Node and npm). Rounds alternate held and unheld so load drifts alike. Figures:
median milliseconds per call, the hold's cost per call (held minus unheld),
and the share of announced notifications each client's progress handler saw.
Then ``20`` calls that end together, read by a host that makes one read every
0.3 s: seconds to the last answer, held beside unheld (the hold may add one of
the host's reads, the one that takes the notifications, and no more).
Compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _goals import Goals, add_check_flag
from mcp import Client, StdioServerParameters

from kigi_tool_runtime.mcp._mapping import META_STREAM

HELD = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"]
UNHELD = [
    sys.executable,
    "-c",
    "import asyncio\n"
    "from kigi_tool_runtime._tools._shell import ShellTool\n"
    "from kigi_tool_runtime.mcp import McpToolServer, serve_stdio_mcp\n"
    "asyncio.run(serve_stdio_mcp(McpToolServer([ShellTool()]), hold_responses=False))\n",
]
COMMAND = "printf 'one write\\n'"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
TS_SDK = "@modelcontextprotocol/sdk@1.32.2"
DRIVER = Path(__file__).resolve().parents[1] / "tests" / "mcp_ts" / "driver.mjs"


class Round:
    """One round's per-call milliseconds, notifications seen and announced."""

    def __init__(self, ms: list[float], seen: int, announced: int) -> None:
        self.ms, self.seen, self.announced = ms, seen, announced


async def python_round(server: list[str], calls: int) -> Round:
    params = StdioServerParameters(command=server[0], args=server[1:])
    seen = announced = 0
    ms: list[float] = []
    async with asyncio.timeout(120), Client(params) as client:
        for _ in range(calls):
            count = 0

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                nonlocal count
                count += 1

            started = time.perf_counter()
            result = await client.call_tool(
                "bash", {"command": COMMAND}, progress_callback=on_progress
            )
            ms.append((time.perf_counter() - started) * 1000)
            # The Python client runs each progress callback in a task of its
            # own: give the last ones their turn before counting.
            await asyncio.sleep(0.01)
            seen += count
            announced += int((result.meta or {})[META_STREAM]["frames_sent"])
    return Round(ms, seen, announced)


def install_ts(directory: Path) -> Path | None:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        return None
    (directory / "package.json").write_text('{"name": "kigi-bench", "private": true}\n')
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", TS_SDK],
        cwd=directory,
        check=True,
        capture_output=True,
        timeout=300,
    )
    driver = directory / DRIVER.name
    shutil.copyfile(DRIVER, driver)
    return driver


def ts_round(driver: Path, server: list[str], calls: int) -> Round:
    plan = json.dumps({"calls": [{"command": COMMAND, "repeat": calls}]})
    done = subprocess.run(
        [shutil.which("node") or "node", str(driver), plan, "--", *server],
        cwd=driver.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return Round(
        [float(r["ms"]) for r in records],
        sum(int(r["notes"]) for r in records),
        sum(int(r["sent"]) for r in records),
    )


def together_round(server: list[str], calls: int, pause: float) -> float:
    """Seconds from the moment ``calls`` running calls are let end together to
    their last answer, with a host that makes one read every ``pause``
    seconds (a raw pipe, each read as a host makes it)."""
    with tempfile.TemporaryDirectory(prefix="kigi-bench-hold-") as tmp:
        go = Path(tmp) / "go"
        command = f"echo started; while [ ! -e {go} ]; do sleep 0.01; done; echo done"
        with subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
            assert proc.stdin is not None
            assert proc.stdout is not None

            def send(message: dict[str, object]) -> None:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()

            send(INITIALIZE)
            proc.stdout.readline()
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for n in range(1, calls + 1):
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": {
                            "name": "bash",
                            "arguments": {"command": command},
                            "_meta": {"progressToken": f"t{n}"},
                        },
                    }
                )
            started = 0
            while started < calls:
                started += b'"started\\n"' in proc.stdout.readline()
            go.touch()
            began = time.perf_counter()
            answered, rest = 0, b""
            while answered < calls:
                time.sleep(pause)
                data = os.read(proc.stdout.fileno(), 16 * 1024 * 1024)
                if not data:
                    raise RuntimeError("the server closed its output")
                *lines, rest = (rest + data).split(b"\n")
                answered += sum(b'"id"' in line and b'"method"' not in line for line in lines)
            took = time.perf_counter() - began
            proc.stdin.close()
            proc.wait(timeout=30)
    return took


def _summary(rounds: list[Round]) -> tuple[float, float]:
    ms = [value for r in rounds for value in r.ms]
    announced = sum(r.announced for r in rounds)
    share = sum(r.seen for r in rounds) / announced if announced else float("nan")
    return statistics.median(ms) if ms else float("nan"), share


def _line(name: str, median_ms: float, share: float) -> str:
    return f"  {name:<28} {median_ms:7.2f} ms/call   notifications seen {share:6.1%}"


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--calls", type=int, default=None, help="calls per round")
    add_check_flag(parser)
    args = parser.parse_args()
    calls = args.calls or (40 if args.quick else 200)
    rounds = 2 if args.quick else 3
    goals = Goals()
    print(f"{calls} one-write calls per round, {rounds} rounds per server, over stdio")
    figures: dict[str, dict[str, tuple[float, float]]] = {}

    py: dict[str, list[Round]] = {"held": [], "unheld": []}
    for _ in range(rounds):
        py["held"].append(await python_round(HELD, calls))
        py["unheld"].append(await python_round(UNHELD, calls))
    figures["official Python client"] = {k: _summary(v) for k, v in py.items()}

    with tempfile.TemporaryDirectory(prefix="kigi-bench-ts-") as tmp:
        driver = install_ts(Path(tmp))
        if driver is not None:
            ts: dict[str, list[Round]] = {"held": [], "unheld": []}
            for _ in range(rounds):
                ts["held"].append(ts_round(driver, HELD, calls))
                ts["unheld"].append(ts_round(driver, UNHELD, calls))
            figures["official TypeScript client"] = {k: _summary(v) for k, v in ts.items()}
        else:
            print("  official TypeScript client: n/a (no node/npm)")

    for client, by_mode in figures.items():
        print(client)
        held_ms, held_share = by_mode["held"]
        unheld_ms, unheld_share = by_mode["unheld"]
        print(_line("hold on (kigi-stream)", held_ms, held_share))
        print(_line("hold off (baseline)", unheld_ms, unheld_share))
        print(f"  {'cost of the hold':<28} {held_ms - unheld_ms:+7.2f} ms/call")
    ts_figures = figures.get("official TypeScript client")
    goals.record(
        "TypeScript client saw every notification with the hold (share)",
        ts_figures["held"][1] if ts_figures else float("nan"),
        1.0,
    )
    pause, together = 0.3, 20
    ends = {
        name: statistics.median(together_round(server, together, pause) for _ in range(rounds))
        for name, server in (("held", HELD), ("unheld", UNHELD))
    }
    print(f"{together} calls ending together, a host reading every {pause:g} s: last answer after")
    print(f"  {'hold on (kigi-stream)':<28} {ends['held']:7.2f} s")
    print(f"  {'hold off (baseline)':<28} {ends['unheld']:7.2f} s")
    goals.record(
        f"{together} calls ending together, last answer beyond the hold-off baseline (s)",
        max(ends["held"] - ends["unheld"], 0.0),
        pause + 0.05,
        at_most=True,
    )
    for client, by_mode in figures.items():
        cost = by_mode["held"][0] - by_mode["unheld"][0]
        goals.record(f"hold's cost per call, {client} (ms)", max(cost, 0.0), 2.0, at_most=True)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
