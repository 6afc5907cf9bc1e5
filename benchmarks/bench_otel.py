"""What tracing costs a call, beside the same calls untraced, in the same run.

    python benchmarks/bench_otel.py [--quick] [--check]

Each mode runs in its own child process: ``off`` (OpenTelemetry not
importable: the baseline), ``api`` (``opentelemetry-api`` installed, no SDK:
spans do not record) and ``sdk`` (the SDK with an in-memory exporter: every
call recorded, its output accounted). Each makes ``CALLS`` calls of a tool
that streams ``FRAMES`` frames through ``ServedCall`` (the in-process hosts'
driver) and through ``produce`` with a call queue (the stdio, MCP and NATS
servers' driver). Figures: median microseconds per call over rounds, and the
cost per call against ``off``. Compare figures from the same run only.

Goal: with the API alone (no SDK configured) a call costs at most
:data:`API_GOAL` of the untraced call's time more: tracing that records
nothing must cost next to nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _goals import Goals, add_check_flag

#: The most a call may cost with the API alone, as a fraction of the untraced call.
API_GOAL = 0.10

CHILD = r"""
import asyncio, json, statistics, sys, time
mode, calls, frames, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if mode == "off":
    sys.modules["opentelemetry"] = None
elif mode == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
import msgspec
from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_runtime import OutputStream, ServedCall, Tool, ToolContext, ToolResult, run_tool
from kigi_tool_runtime._call._feed import QueueFeed, produce
from kigi_tool_runtime._call._queue import CallQueue, QueuePolicy, StallWatch

SPEC = StreamingSpec(subkind="b_chunk", max_delta_bytes=64)

class Args(msgspec.Struct):
    pass

class Lines(Tool[Args]):
    id = "lines"
    args_type = Args
    capabilities = ToolCapabilities(streaming=SPEC)
    async def execute(self, ctx, args):
        stream = OutputStream(SPEC, capacity=4096)
        for n in range(frames):
            stream.write(b"line %d of the output\n" % n)
            for frame in stream.drain():
                yield frame
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=None)

async def served():
    for n in range(calls):
        async with ServedCall(Lines(), {}, call_id=f"s{n}") as call:
            await call.run()

async def queued():
    for n in range(calls):
        queue = CallQueue(QueuePolicy.wait(1 << 20))
        feed = QueueFeed(queue, StallWatch(5.0))
        run = run_tool(Lines(), {}, ctx=ToolContext(f"q{n}"))
        def item_of(frame):
            return frame, 64
        # The budget holds every frame: no put waits, the host takes after.
        await produce(run, feed, item_of)
        while feed.take() is not None:
            pass

out = {}
for name, body in (("served", served), ("queued", queued)):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        asyncio.run(body())
        times.append((time.perf_counter() - start) / calls * 1e6)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small rounds")
    add_check_flag(parser)
    args = parser.parse_args()
    goals = Goals()
    calls, frames, rounds = (100, 20, 3) if args.quick else (300, 50, 5)
    print(f"{calls} calls of {frames} frames each, median of {rounds} rounds, µs per call")
    figures = {}
    for mode in ("off", "api", "sdk"):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(calls), str(frames), str(rounds)],
            capture_output=True,
            check=True,
            timeout=300,
        )
        figures[mode] = json.loads(done.stdout)
    for driver in ("served", "queued"):
        base = figures["off"][driver]
        row = "  ".join(
            f"{mode} {figures[mode][driver]:8.0f} ({figures[mode][driver] - base:+6.0f})"
            for mode in ("off", "api", "sdk")
        )
        print(f"{driver:>7}: {row}")
        goals.record(
            f"{driver}: API-only cost per call, of the untraced call",
            (figures["api"][driver] - base) / base,
            API_GOAL,
            at_most=True,
        )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
