"""Both MCP protocol eras, through the official Python client pinned to each,
over stdio and streamable HTTP: the 2025-11-25 handshake (``mode="legacy"``)
and the stateless 2026-07-28 revision (``mode="2026-07-28"``: no
``initialize``, the version and client capabilities in each request's
``_meta``, notifications on the request's own response stream)."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_http_server import mcp_http_server
from processes import until_group_gone
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.mcp import McpToolServer, ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_ERROR, META_STREAM

PY = sys.executable
SERVE = [PY, "-m", "kigi_tool_runtime", "serve"]
MODES = ["legacy", "2026-07-28"]
VERSION = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """A ``kigi-stream serve --mcp-http 127.0.0.1:0`` child and its endpoint."""
    with mcp_http_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest) -> Any:
    """What the client connects to: stdio parameters, or the HTTP endpoint."""
    if request.param == "stdio":
        return StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--mcp"])
    return request.getfixturevalue("http_url")


@pytest.fixture(params=["in-process", "http"])
def peer(request: pytest.FixtureRequest) -> Any:
    """What the client connects to where the transport is not what is tested
    (mapping errors, cancelling: the server object's logic): the server
    object in process, or the real HTTP endpoint. Over a real stdio child
    the era is proven by the tests that take :func:`server`, cancelling by
    test_mcp_stdio."""
    if request.param == "in-process":
        return McpToolServer([ShellTool()]).server
    return request.getfixturevalue("http_url")


async def _wait_pid(pidfile: Path, seconds: float = 10.0) -> int:
    async with asyncio.timeout(seconds):
        while not (pidfile.exists() and pidfile.read_text().strip()):
            await asyncio.sleep(0.02)
    return int(pidfile.read_text())


@pytest.mark.parametrize("mode", MODES)
def test_the_client_speaks_the_era_it_is_pinned_to(peer: Any, mode: str) -> None:
    """The pinned era is the one spoken (over a real stdio child too: see
    test_progress_is_live_and_folds_exactly)."""

    async def body() -> None:
        async with asyncio.timeout(30), Client(peer, mode=mode) as client:
            assert client.protocol_version == VERSION[mode]
            tools = (await client.list_tools()).tools
            assert [tool.name for tool in tools] == ["bash"]

    asyncio.run(body())


@pytest.mark.parametrize("mode", MODES)
def test_progress_is_live_and_folds_exactly(server: Any, mode: str, tmp_path: Path) -> None:
    """The client speaks the era it is pinned to; the first notification
    arrives while the command still runs (it waits for a file the test writes
    only then); split characters fold exactly."""
    gate = tmp_path / "gate"
    command = (
        f"printf 'first '; while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.02; done; "
        + shlex.join([PY, "-c", SPLIT])
    )

    async def body() -> None:
        folder = ProgressFolder()
        async with (
            asyncio.timeout(30),
            Client(server, mode=mode, message_handler=folder.message_handler) as client,
        ):
            assert client.protocol_version == VERSION[mode]
            assert [tool.name for tool in (await client.list_tools()).tools] == ["bash"]
            call = asyncio.create_task(folder.call_tool(client, "bash", {"command": command}))
            while not any(state.text for state in folder.reassembler.streams.values()):
                assert not call.done(), "the call ended before any progress arrived"
                await asyncio.sleep(0.02)
            gate.touch()
            folded = await call
        assert folded.text == "first " + SPLIT_TEXT
        assert folded.complete
        assert folded.result.structured_content is not None
        assert folded.result.structured_content["exit_code"] == 0
        assert folded.result.meta is not None
        assert folded.result.meta[META_STREAM]["frames_sent"] >= 2

    asyncio.run(body())


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_a_call_stops_its_process_group(peer: Any, mode: str, tmp_path: Path) -> None:
    """The caller cancels mid-call (a legacy client sends notifications/cancelled;
    a 2026-07-28 client over HTTP closes the response stream): the command's
    process group is gone and the connection still serves."""
    pidfile = tmp_path / "pid"

    async def body() -> None:
        async with asyncio.timeout(30), Client(peer, mode=mode) as client:
            call = asyncio.create_task(
                client.call_tool("bash", {"command": f"echo $$ > {pidfile}; sleep 60"})
            )
            pid = await _wait_pid(pidfile)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await until_group_gone(pid)
            result = await client.call_tool("bash", {"command": "echo still"})
            assert result.structured_content is not None
            assert result.structured_content["output"] == "still\n"

    asyncio.run(body())


@pytest.mark.parametrize("mode", MODES)
def test_errors_map_the_same_in_both_eras(peer: Any, mode: str) -> None:
    """Bad arguments and a deadline are isError results with the kigi error;
    an unknown tool is a -32602 protocol error."""

    async def body() -> None:
        async with asyncio.timeout(30), Client(peer, mode=mode) as client:
            bad = await client.call_tool("bash", {"command": 3})
            assert bad.is_error
            assert bad.meta is not None
            assert bad.meta[META_ERROR]["kind"] == "invalid_params"
            late = await client.call_tool(
                "bash", {"command": "sleep 30"}, meta={"dev.kigi/deadline_ms": 200}
            )
            assert late.is_error
            assert late.meta is not None
            assert late.meta[META_ERROR]["kind"] == "timeout"
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nope", {})
            assert unknown.value.error.code == -32602

    asyncio.run(body())
