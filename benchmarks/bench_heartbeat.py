"""What a heartbeat and the status message cost a call that streams:
microseconds per frame through the call core with heartbeats off and on (30 s,
so none is ever due), measured in the same run, for the queued servers'
``produce`` (one timer per call, a clock read per frame) and for
``ServedCall.events`` (one pump task per call while beating); and the MCP
``message`` of a 16 KiB frame of short lines in status mode against delta mode.

Run: python benchmarks/bench_heartbeat.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from _goals import Goals, add_check_flag

from kigi_tool_protocol import CustomProgress, PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import Tool, ToolContext, ToolEvent, ToolResult
from kigi_tool_runtime._call._feed import QueueFeed, produce
from kigi_tool_runtime._call._live import LiveText
from kigi_tool_runtime._call._queue import CallQueue, QueuePolicy, StallWatch, Taken
from kigi_tool_runtime._call._served import ServedCall
from kigi_tool_runtime._call._status import ProgressMessages
from kigi_tool_runtime._tools._runner import run_tool


class Count(msgspec.Struct):
    frames: int


class Frames(Tool[Count]):
    """Yields ``frames`` small deltas as fast as it can."""

    id = "frames"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i in range(args.frames):
            payload = PartialResultPayload(delta="x", total_bytes=i + 1)
            yield CustomProgress(subkind="chunk", payload=msgspec.to_builtins(payload))
            if i % 64 == 0:
                await asyncio.sleep(0)
        yield ToolResult(value="done")


def _item(frame: ToolCallProgressFrame[Any]) -> tuple[ToolCallProgressFrame[Any], int]:
    return frame, 1


async def _produce(frames: int, heartbeat_s: float) -> float:
    feed: QueueFeed[Any, Any] = QueueFeed(CallQueue(QueuePolicy.wait(1 << 20)), StallWatch(1))

    async def drain() -> None:
        while isinstance(await feed.get(), Taken):
            pass

    taker = asyncio.ensure_future(drain())
    run = run_tool(Frames(), Count(frames), ctx=ToolContext("c"))
    started = time.perf_counter()
    terminal = await produce(run, feed, _item, heartbeat_s=heartbeat_s)
    feed.finish(terminal)
    await taker
    return (time.perf_counter() - started) / frames * 1e6


async def _served(frames: int, heartbeat_s: float) -> float:
    started = time.perf_counter()
    async with ServedCall(Frames(), Count(frames), call_id="c", heartbeat_s=heartbeat_s) as call:
        if heartbeat_s:
            async for _ in call.events():
                pass
        else:
            async for _ in call:
                pass
    return (time.perf_counter() - started) / frames * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames and rounds")
    add_check_flag(parser)
    args = parser.parse_args()
    frames, rounds = (5_000, 3) if args.quick else (50_000, 5)
    goals = Goals()
    for name, bench in (("produce", _produce), ("ServedCall", _served)):
        off, on = [], []
        for _ in range(rounds):  # interleaved, so load hits both alike
            off.append(asyncio.run(bench(frames, 0.0)))
            on.append(asyncio.run(bench(frames, 30.0)))
        median_off, median_on = statistics.median(off), statistics.median(on)
        print(
            f"{name}: {median_off:.2f} us/frame heartbeats off (baseline),"
            f" {median_on:.2f} us/frame on ({median_on / median_off:.2f}x), {frames} frames"
        )
        # produce: a clock read per frame; ServedCall: a task per event.
        goals.record(
            f"{name} heartbeat cost",
            median_on / median_off,
            1.5 if name == "produce" else 1.6,
            at_most=True,
        )
    live = LiveText("c")
    frame = ToolCallProgressFrame(
        tool_call_id="c",
        kind="chunk",
        body=PartialResultPayload(delta="y\n" * 8192, total_bytes=16384),
    )
    delta = live.add(frame, 0)
    times = {}
    for mode in ("delta", "status"):
        messages = ProgressMessages(mode, 0.0)
        runs = 2_000 if args.quick else 20_000
        started = time.perf_counter()
        for _ in range(runs):
            messages.frame(delta, 1.0)
        times[mode] = (time.perf_counter() - started) / runs * 1e6
    print(
        f"MCP message of a 16 KiB frame of 2-byte lines: {times['delta']:.2f} us delta mode"
        f" (baseline), {times['status']:.2f} us status mode"
    )
    goals.record("status message per 16 KiB frame (us)", times["status"], 50.0, at_most=True)
    return goals.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
