"""A stdio server whose tool ignores its cancellation: the call is answered, the
process exits without waiting for the tool, and says so. Real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from processes import until_group_gone

from kigi_tool_runtime._cli._exits import UsageError
from kigi_tool_runtime._cli._parser import build_parser
from kigi_tool_runtime._cli._serve import stop_wait_of
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime._tools._runner import STOP_WAIT_S

#: Seconds the server may take to exit after end of input: its stop wait (0.5 s
#: here) and final flush, with room for a loaded machine.
EXIT_S = 60.0

STUBBORN = """
import asyncio, sys
import msgspec
from kigi_tool_runtime import Tool, ToolContext, ToolResult
from kigi_tool_runtime._cli._serve import serve_tools
from kigi_tool_runtime._process import hold, spawn_in_group


class Args(msgspec.Struct):
    pass


class Stubborn(Tool[Args]):
    id = "stubborn"
    description = "starts a sleep in a group of its own and ignores its cancellation"
    args_type = Args

    async def run(self, ctx: ToolContext, args: Args) -> ToolResult:
        proc = await spawn_in_group("sleep", "300")
        hold(proc.pid)  # as the shell tool holds its command's group
        print(proc.pid, file=sys.stderr, flush=True)
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # swallowed: the tool never stops


sys.exit(serve_tools([Stubborn()], max_frame_bytes=1 << 20, stop_wait=0.5))
"""


def test_a_tool_that_swallows_its_cancellation_does_not_keep_serve_alive() -> None:
    """End of input cancels the call; the tool swallows it forever. The call is
    answered with an error saying the tool was left running, stderr names the
    call, the process exits (status 0) without waiting for the tool, and the
    process group the tool held is gone with it."""
    _check_stubborn_server([sys.executable, "-c", STUBBORN], "0.5")


def test_kigi_stream_serve_tools_gives_up_on_a_stubborn_tool(tmp_path: Path) -> None:
    """The same through ``kigi-stream serve --tools`` itself, its stop wait
    set by ``--stop-wait`` (the default, 10 s, is checked in process below)."""
    module = tmp_path / "stubborn.py"
    module.write_text(STUBBORN.split("\nsys.exit(")[0] + "\nTOOL = Stubborn()\n")
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", f"{module}:TOOL"]
    _check_stubborn_server([*argv, "--stop-wait", "0.5"], "0.5")


def test_serve_stop_wait_is_ten_seconds_unless_given() -> None:
    """In process: without ``--stop-wait`` serve gives a cancelled tool the
    runner's STOP_WAIT_S, 10 s as documented; with it, what it says."""
    assert STOP_WAIT_S == 10.0
    assert stop_wait_of(build_parser().parse_args(["serve"])) == STOP_WAIT_S
    assert stop_wait_of(build_parser().parse_args(["serve", "--stop-wait", "2.5"])) == 2.5


@pytest.mark.parametrize(
    ("way", "says"),
    [
        (["--nats", "nats://127.0.0.1:4222"], "--nats has --stop-bound"),
        (["--mcp"], "not to --mcp"),
        (["--mcp-http", "8000"], "not to --mcp"),
    ],
)
def test_serve_stop_wait_is_refused_where_it_does_not_apply(way: list[str], says: str) -> None:
    """``--stop-wait`` with --nats or --mcp is a usage error saying why, not a
    setting silently ignored."""
    args = build_parser().parse_args(["serve", "--stop-wait", "1", *way])
    with pytest.raises(UsageError, match=says):
        stop_wait_of(args)


def _check_stubborn_server(argv: list[str], stop_wait: str) -> None:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tool.call",
        "params": {"tool_call_id": "c1", "tool_id": "stubborn", "arguments": {}},
    }
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as server:
        assert server.stdin is not None
        assert server.stderr is not None
        pgid = 0
        try:
            server.stdin.write(json.dumps(request).encode() + b"\n")
            server.stdin.flush()
            pgid = int(server.stderr.readline())  # the tool is running
            # communicate closes stdin: end of input, the call is cancelled.
            out, err = server.communicate(timeout=EXIT_S)
        finally:
            if server.poll() is None:
                server.kill()
        assert server.returncode == 0, err
        [reply] = [json.loads(line) for line in out.splitlines()]
        assert reply["id"] == 1
        assert reply["error"]["data"]["code"] == "cancelled"
        message = reply["error"]["message"]
        assert f"did not stop within {stop_wait} s and was left running" in message
        notice = f"the tool of call 'c1' did not stop within {stop_wait} s of its cancellation"
        assert notice.encode() in err

        async def gone() -> None:
            async with asyncio.timeout(EXIT_S):
                await until_group_gone(pgid)

        try:
            asyncio.run(gone())
        finally:
            if pgid and group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
