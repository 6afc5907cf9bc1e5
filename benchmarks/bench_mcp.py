"""Streamed text through MCP against the stdio transport, in the same run.

    python benchmarks/bench_mcp.py [--quick] [--mb N] [--check]

Baseline: the stdio transport (``kigi-stream serve``, its pipe, the ``Client``
and the call's ``Reassembler``). MCP: the same command through
``kigi-stream serve --mcp``, read two ways: by the official MCP client (its
``message_handler`` feeding a ``ProgressFolder``), and by a plain JSON-lines
reader that folds the same notifications (what the server can push when the
host is quick). Each child writes ``N`` MB of text as fast as it can; a
consumer slower than the child loses the middle (reported as gaps, not
hidden), so the figures are delivered text per second, progress
notifications per second, and the share of the bytes delivered. Rates swing
with the load on a shared machine: compare figures from the same run only.
It ends with which goals were met (every announced notification reached the
host; none was dropped for a host that keeps reading); ``--check`` exits 1 on
a miss.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from _flood import flood_command
from _goals import Goals, add_check_flag
from mcp import Client as McpClient
from mcp import StdioServerParameters

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import Client
from kigi_tool_runtime.mcp import META_STREAM, ProgressFolder

MB = 1_000_000

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]


class Round:
    """One call: seconds, delivered text bytes, notifications, gap frames; for
    MCP also the notifications its result announced that never arrived and the
    frames the server dropped."""

    def __init__(
        self,
        seconds: float,
        delivered: int,
        notes: int,
        gaps: int,
        missing: int = 0,
        dropped: int = 0,
    ) -> None:
        self.seconds, self.delivered, self.notes, self.gaps = seconds, delivered, notes, gaps
        self.missing, self.dropped = missing, dropped


def _dropped(result: Any) -> int:
    meta = result.get("_meta") if isinstance(result, dict) else result.meta
    return int((meta or {}).get(META_STREAM, {}).get("frames_dropped", 0))


async def stdio_transport(client: Client, size: int) -> Round:
    started = time.perf_counter()
    call = client.call("bash", {"command": flood_command(size)})
    async for item in call:
        if isinstance(item, ToolCallResult):
            break
    elapsed = time.perf_counter() - started
    state = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
    assert state is not None
    report = state.report()
    return Round(elapsed, state.text_bytes, report.frames, len(report.gaps))


async def mcp_official(client: McpClient, folder: ProgressFolder, size: int) -> Round:
    started = time.perf_counter()
    folded = await folder.call_tool(client, "bash", {"command": flood_command(size)})
    elapsed = time.perf_counter() - started
    assert not folded.result.is_error, folded.result.content
    (report,) = folded.reports()
    return Round(
        elapsed,
        report.text_bytes,
        report.frames,
        len(report.gaps),
        folded.missing,
        _dropped(folded.result),
    )


class RawMcp:
    """``kigi-stream serve --mcp`` read as plain JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 1

    @classmethod
    async def start(cls) -> RawMcp:
        proc = await asyncio.create_subprocess_exec(
            *SERVE, "--mcp", stdin=-1, stdout=-1, limit=1 << 26
        )
        raw = cls(proc)
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            }
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return raw

    async def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def call(self, size: int) -> Round:
        request_id = self.next_id
        self.next_id += 1
        folder = ProgressFolder()
        started = time.perf_counter()
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {
                    "name": "bash",
                    "arguments": {"command": flood_command(size)},
                    "_meta": {"progressToken": f"raw-{request_id}"},
                },
            }
        )
        assert self.proc.stdout is not None
        while True:
            message = json.loads(await self.proc.stdout.readline())
            if message.get("id") == request_id:
                break
            folder.absorb(message["params"])
        elapsed = time.perf_counter() - started
        (state,) = folder.reassembler.streams.values()
        report = state.report()
        announced = message["result"]["_meta"][META_STREAM]["frames_sent"]
        return Round(
            elapsed,
            report.text_bytes,
            report.frames,
            len(report.gaps),
            announced - report.frames,
            _dropped(message["result"]),
        )

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.wait()


def _line(name: str, rounds: list[Round], size: int) -> str:
    rates = [r.delivered / r.seconds / MB for r in rounds]
    notes = [r.notes / r.seconds for r in rounds]
    delivered = sum(r.delivered for r in rounds) / (size * len(rounds))
    gaps = sum(r.gaps for r in rounds)
    return (
        f"{name:38s} median {statistics.median(rates):7.1f} MB/s"
        f" {statistics.median(notes):7.0f} notifications/s"
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
    official: list[Round] = []
    raw_rounds: list[Round] = []
    folder = ProgressFolder()
    params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--mcp"])
    raw = await RawMcp.start()
    async with (
        await Client.spawn(SERVE) as client,
        McpClient(params, message_handler=folder.message_handler) as mcp_client,
    ):
        await client.list_tools()
        await mcp_client.list_tools()
        for _ in range(rounds):
            base.append(await stdio_transport(client, size))
            official.append(await mcp_official(mcp_client, folder, size))
            raw_rounds.append(await raw.call(size))
    await raw.close()
    print(_line("stdio transport (kigi Client)", base, size))
    print(_line("MCP stdio, official client", official, size))
    print(_line("MCP stdio, JSON-lines reader", raw_rounds, size))
    for name, rounds_of in (("official client", official), ("JSON-lines reader", raw_rounds)):
        share = statistics.median(r.delivered / r.seconds for r in rounds_of) / statistics.median(
            r.delivered / r.seconds for r in base
        )
        print(f"MCP ({name}) / stdio transport (median MB/s): {share:.0%}")
    goals = Goals()
    mcp_rounds = official + raw_rounds
    goals.record(
        "announced notifications that never reached the host",
        sum(r.missing for r in mcp_rounds),
        0,
        at_most=True,
    )
    goals.record(
        "frames dropped for a host that keeps reading",
        sum(r.dropped for r in mcp_rounds),
        0,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
