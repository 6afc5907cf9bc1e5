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

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from _flood import flood_command
from _goals import Goals
from _timing import MB, Round, client_flood, flood_parser, flood_plan, median_line, median_rate
from mcp import Client as McpClient
from mcp import StdioServerParameters

from kigi_tool_runtime import Client
from kigi_tool_runtime.mcp import ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_STREAM

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]


@dataclass
class McpRound(Round):
    """One call's figures (:class:`Round`; a frame is one notification); for
    MCP also the notifications its result announced that never arrived and the
    frames the server dropped."""

    missing: int = 0
    dropped: int = 0


def _dropped(result: Any) -> int:
    meta = result.get("_meta") if isinstance(result, dict) else result.meta
    return int((meta or {}).get(META_STREAM, {}).get("frames_dropped", 0))


async def stdio_transport(client: Client, size: int) -> McpRound:
    elapsed, state = await client_flood(client, size)
    report = state.report()
    return McpRound(elapsed, state.text_bytes, report.frames, len(report.gaps))


async def mcp_official(client: McpClient, folder: ProgressFolder, size: int) -> McpRound:
    started = time.perf_counter()
    folded = await folder.call_tool(client, "bash", {"command": flood_command(size)})
    elapsed = time.perf_counter() - started
    assert not folded.result.is_error, folded.result.content
    (report,) = folded.reports()
    return McpRound(
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

    async def call(self, size: int) -> McpRound:
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
        return McpRound(
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


def _line(name: str, rounds: list[McpRound], size: int) -> str:
    return median_line(name, rounds, size, width=38, per="notifications")


async def main() -> int:
    args = flood_parser(__doc__, "two short rounds").parse_args()
    size, rounds = flood_plan(args, mb=100, rounds=4, quick_mb=20, quick_rounds=2)
    print(f"{size // MB} MB of text per round, {rounds} round(s), median rates")
    base: list[McpRound] = []
    official: list[McpRound] = []
    raw_rounds: list[McpRound] = []
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
        share = median_rate(rounds_of) / median_rate(base)
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
