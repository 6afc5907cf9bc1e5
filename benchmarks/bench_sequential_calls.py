"""Sequential short calls a second through ``kigi-stream serve`` and the
``Client``, beside a naive MCP tool over stdio, in the same run.

    python benchmarks/bench_sequential_calls.py [--quick] [--calls N] [--check]

Each round makes ``N`` (200) sequential ``echo x`` calls, one after another,
each to its result. Ours: the shell tool through ``kigi-stream serve``, called
by ``Client.spawn``. The naive peer: a tool of the official MCP SDK's
``MCPServer`` (FastMCP in mcp 1) that starts the command with the shell the
shell tool uses (``bash -c``: ``/bin/sh`` is dash on Debian, 2 ms a call
cheaper here, which would time the shell, not the call path), reads its lines
and returns them, called by the official MCP client over stdio. Rounds alternate
the two so load drifts alike; the figure is the best round's calls a second.

Goal: at least as many calls a second as the naive peer (a command's
containment, its lifeline hold, costs no process start per call and never
blocks the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from _goals import Goals, add_check_flag
from mcp import Client as McpClient
from mcp import StdioServerParameters

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import Client

COMMAND = "echo x"
NAIVE = """
import asyncio
from mcp.server.mcpserver import MCPServer

server = MCPServer("naive")


@server.tool()
async def bash(command: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    lines = [line async for line in proc.stdout]
    await proc.wait()
    return b"".join(lines).decode()


server.run()
"""


async def ours(calls: int) -> float:
    """Calls a second through ``serve`` and the ``Client``."""
    async with await Client.spawn([sys.executable, "-m", "kigi_tool_runtime", "serve"]) as client:
        await _ours_call(client)  # warm: the lifeline starts on the first
        started = time.perf_counter()
        for _ in range(calls):
            await _ours_call(client)
        return calls / (time.perf_counter() - started)


async def _ours_call(client: Client) -> None:
    async for item in client.call("bash", {"command": COMMAND}):
        if isinstance(item, ToolCallResult):
            return
    raise AssertionError("no result")


async def naive(calls: int) -> float:
    """Calls a second through the naive MCP tool and the official client."""
    params = StdioServerParameters(command=sys.executable, args=["-c", NAIVE])
    async with McpClient(params) as client:
        await client.call_tool("bash", {"command": COMMAND})
        started = time.perf_counter()
        for _ in range(calls):
            result = await client.call_tool("bash", {"command": COMMAND})
            assert not result.is_error, result
        return calls / (time.perf_counter() - started)


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--calls", type=int, default=None, help="calls per round")
    add_check_flag(parser)
    args = parser.parse_args()
    calls = args.calls or (50 if args.quick else 200)
    rounds = 2 if args.quick else 3
    kigi: list[float] = []
    peer: list[float] = []
    for _ in range(rounds):
        kigi.append(await ours(calls))
        peer.append(await naive(calls))
    best_kigi, best_peer = max(kigi), max(peer)
    print(f"{calls} sequential `{COMMAND}` calls, best of {rounds} rounds:")
    print(f"  kigi-stream serve -> Client      {best_kigi:7.1f} calls/s")
    print(f"  naive MCPServer tool, MCP client {best_peer:7.1f} calls/s")
    goals = Goals()
    goals.record("calls/s against the naive MCP tool", best_kigi / best_peer, 1.0)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
