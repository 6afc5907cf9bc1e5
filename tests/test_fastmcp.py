"""Kigi tools added to a user's FastMCP app (``kigi_tool_runtime.fastmcp``),
driven by FastMCP's own client and by the official MCP client: split
characters at caps 0-4, a flood with its loss marked, a cancel that leaves no
process group, a tool error, and the app's own tool beside them.

Each scenario runs with both clients connected to the app in process (the
SDKs' in-memory transports), and once with the app a real process: each
client over each transport (stdio, streamable HTTP) is one scenario's real
run."""

from __future__ import annotations

import asyncio
import shlex
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import fastmcp
import fastmcp_app
import mcp_types as types
import msgspec
import pytest
from fastmcp.client.transports import StdioTransport
from mcp import Client, StdioServerParameters
from processes import stop, until_group_gone
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_runtime import ShellTool
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime.fastmcp import add_kigi_tools
from kigi_tool_runtime.fastmcp._tools import KigiFastMCPTool
from kigi_tool_runtime.mcp import McpToolServer, ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_ERROR, META_FRAME, META_STREAM
from kigi_tool_runtime.testing import check_stream

PY = sys.executable
APP = str(Path(__file__).with_name("fastmcp_app.py"))
SMALL_TAIL = 4096
DEADLINE_S = 90

# A flood of multi-byte text, written fast: through a 4 KiB tail most of it is lost.
UNIT = "ab é € 😀 xyz\n"
BLOCK = (UNIT * 4096).encode()
FLOOD_BLOCKS = 64
FLOOD = (
    "import sys\n"
    f"block = ({UNIT!r} * 4096).encode()\n"
    f"for _ in range({FLOOD_BLOCKS}):\n"
    "    sys.stdout.buffer.write(block)\n"
)
SLOW_FLOOD = (
    "import sys, time\n"
    "while True:\n"
    "    sys.stdout.write('tick ' * 100 + '\\n'); sys.stdout.flush(); time.sleep(0.01)\n"
)

#: Call a tool with a progress token; the result and the call's kigi call id.
Call = Callable[[str, dict[str, Any], str], Awaitable[tuple[types.CallToolResult, str]]]


class _Recorder:
    """A message handler that keeps each call's kigi frames, ``message`` texts
    and ``progress`` values, and folds them with a :class:`ProgressFolder`."""

    def __init__(self) -> None:
        self.folder = ProgressFolder()
        self.frames: dict[str, list[ToolCallProgressFrame[PartialResultPayload]]] = {}
        self.messages: dict[str, list[str | None]] = {}
        self.progress: dict[str, list[float]] = {}
        self.tokens: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ProgressNotification):
            params = message.params
            token = str(params.progress_token)
            if token not in self.progress:
                self.tokens.append(token)
            meta = params.meta or {}
            if META_FRAME in meta:
                raw = msgspec.json.encode(meta[META_FRAME])
                frame = json_codec.decode(raw, ToolCallProgressFrame[PartialResultPayload])
                self.frames.setdefault(token, []).append(frame)
            self.messages.setdefault(token, []).append(params.message)
            self.progress.setdefault(token, []).append(params.progress)
        await self.folder.message_handler(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def _http_app() -> AsyncIterator[str]:
    """The app over streamable HTTP on a free loopback port; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen([PY, APP, "http", str(port)], stderr=subprocess.DEVNULL)
    try:
        while True:
            assert proc.poll() is None, "the app exited"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc, grace=15)


@asynccontextmanager
async def _connected(client: str, transport: str, recorder: _Recorder) -> AsyncIterator[Call]:
    """A call function over ``client`` (``fastmcp`` or ``mcp``) and ``transport``
    (``stdio`` or ``http``: the app a real process; ``memory``: the app in
    this process) to the app; each call carries a progress token."""
    async with _target(transport) as target:
        if client == "fastmcp":
            fm_target: Any = (
                StdioTransport(command=PY, args=[APP, "stdio"]) if target is None else target
            )
            async with fastmcp.Client(fm_target, message_handler=recorder) as fm:

                async def fm_call(name: str, args: dict[str, Any], token: str) -> Any:
                    # FastMCP's client always sends a progress token of its own
                    # (the request id), which becomes the kigi call id: learn it
                    # from the call's first notification.
                    known = len(recorder.tokens)
                    result = await fm.call_tool_mcp(name, args)
                    meta = result.meta or {}
                    if not meta.get(META_STREAM, {}).get("frames_sent"):
                        return result, token
                    while len(recorder.tokens) == known:
                        await asyncio.sleep(0.01)
                    return result, recorder.tokens[known]

                yield fm_call
        else:
            official: Any = (
                StdioServerParameters(command=PY, args=[APP, "stdio"]) if target is None else target
            )
            if isinstance(official, fastmcp.FastMCP):
                official = official._mcp_server
            async with Client(official, message_handler=recorder) as sdk:

                async def sdk_call(name: str, args: dict[str, Any], token: str) -> Any:
                    result = await sdk.call_tool(name, args, meta={"progressToken": token})
                    return result, token

                yield sdk_call


@asynccontextmanager
async def _target(transport: str) -> AsyncIterator[str | fastmcp.FastMCP[Any] | None]:
    """What a client connects to: ``None`` (it starts the app over stdio), the
    URL of the app's process over HTTP, or the app object itself."""
    if transport == "stdio":
        yield None
    elif transport == "memory":
        yield fastmcp_app.app()
    else:
        async with _http_app() as url:
            yield url


def _pairs(real: tuple[str, str]) -> list[tuple[str, str]]:
    """Both clients in process, and ``real``: the app a real process."""
    return [("fastmcp", "memory"), ("mcp", "memory"), real]


async def _split_at_cap(call: Call, recorder: _Recorder, cap: int) -> None:
    """One call of the split writer through ``bash_cap{cap}``, checked."""
    command = {"command": [PY, "-c", SPLIT]}
    result, token = await call(f"bash_cap{cap}", command, f"split-{cap}")
    folded = await recorder.folder.settle(token, result)
    assert folded.text == SPLIT_TEXT, cap
    assert folded.complete
    frames = recorder.frames[token]
    assert len(frames) > 1
    for frame in frames:
        delta = frame.body.delta
        assert len(delta.encode()) <= cap or len(delta) == 1, (cap, delta)
    messages = recorder.messages[token]
    assert all("\ufffd" not in (m or "") for m in messages)
    progress = recorder.progress[token]
    assert progress == [float(i) for i in range(1, len(progress) + 1)]
    assert not result.is_error
    assert result.content[0].text.startswith(SPLIT_TEXT)  # type: ignore[union-attr]
    assert result.structured_content is not None
    assert result.structured_content["output"] == SPLIT_TEXT
    assert result.meta is not None
    assert result.meta[META_STREAM]["frames_sent"] == len(frames)


async def _add(call: Call) -> None:
    added, _ = await call("add", {"a": 2, "b": 3}, "add")
    assert not added.is_error
    assert added.structured_content == {"result": 5}


@pytest.mark.parametrize(("client", "transport"), _pairs(("mcp", "stdio")))
async def test_split_characters_stream_whole_at_caps_0_to_4(client: str, transport: str) -> None:
    """2-, 3- and 4-byte characters cut across writes stream whole at caps 0
    to 4: each frame within its cap (or one character), no U+FFFD in any
    ``message``, the frames fold to the output exactly, ``progress`` is 1, 2,
    3, ..., and the result has the model text and the stream summary; the
    app's own tool answers beside them. The five caps' calls run at once:
    with the official client on one connection (each its own progress
    token); with FastMCP's, whose token is the request id it learns from the
    call's first notification, each on a connection of its own."""
    async with asyncio.timeout(DEADLINE_S):
        if client == "mcp":
            recorder = _Recorder()
            async with _connected(client, transport, recorder) as call:
                await _add(call)
                await asyncio.gather(*(_split_at_cap(call, recorder, cap) for cap in range(5)))
            return

        async def one(cap: int) -> None:
            recorder = _Recorder()
            async with _connected(client, transport, recorder) as call:
                if cap == 0:
                    await _add(call)
                await _split_at_cap(call, recorder, cap)

        await asyncio.gather(*(one(cap) for cap in range(5)))


@pytest.mark.parametrize(("client", "transport"), _pairs(("fastmcp", "http")))
async def test_a_flood_through_a_small_tail_has_every_loss_marked(
    client: str, transport: str
) -> None:
    """A fast flood through a 4 KiB tail: every delta is the source's bytes at
    its place and every skipped byte is in a gap frame (``check_stream``);
    each gap frame's ``message`` carries the loss marker; the fold and the
    result say the call is not complete."""
    recorder = _Recorder()
    async with asyncio.timeout(DEADLINE_S), _connected(client, transport, recorder) as call:
        command = {"command": [PY, "-c", FLOOD]}
        result, token = await call("bash_small_tail", command, "flood")
        folded = await recorder.folder.settle(token, result)
    frames = recorder.frames[token]
    checked = check_stream(
        frames, BLOCK * FLOOD_BLOCKS, tail_capacity=SMALL_TAIL, cap=1024, complete=True
    )
    assert checked.lost, "a 4 KiB tail lost nothing of a fast flood"
    messages = recorder.messages[token]
    for frame, message in zip(frames, messages, strict=False):
        if frame.body.gap:
            assert message is not None
            assert "bytes lost" in message, message
    (report,) = folded.reports()
    assert not report.complete
    assert report.total_bytes == len(BLOCK) * FLOOD_BLOCKS
    assert len(report.gaps) == len(checked.lost)
    assert folded.text == checked.text
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["total_bytes"] == len(BLOCK) * FLOOD_BLOCKS
    assert result.meta is not None
    assert result.meta[META_STREAM]["frames_sent"] == len(messages)


@pytest.mark.parametrize(("client", "transport"), _pairs(("fastmcp", "stdio")))
async def test_cancelling_a_call_stops_its_process_group(
    client: str, transport: str, tmp_path: Path
) -> None:
    """Cancelling the client's call mid-output stops the command's whole
    process group, and the app goes on serving."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; exec {PY} -c {shlex.quote(SLOW_FLOOD)}"
    recorder = _Recorder()
    async with asyncio.timeout(DEADLINE_S), _connected(client, transport, recorder) as call:
        task = asyncio.create_task(call("bash", {"command": command}, "cancel"))
        while sum(len(frames) for frames in recorder.frames.values()) < 3:
            await asyncio.sleep(0.02)
        pid = int(pidfile.read_text())
        assert group_alive(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_group_gone(pid)
        again, _ = await call("add", {"a": 1, "b": 1}, "after")
        assert again.structured_content == {"result": 2}


@pytest.mark.parametrize(("client", "transport"), _pairs(("mcp", "http")))
async def test_a_tool_error_is_an_error_result_with_the_kigi_error(
    client: str, transport: str, tmp_path: Path
) -> None:
    """A command that cannot start and arguments the tool refuses are
    ``isError`` results carrying the kigi error, as ``serve --mcp`` gives."""
    recorder = _Recorder()
    missing = tmp_path / "missing"
    async with asyncio.timeout(DEADLINE_S), _connected(client, transport, recorder) as call:
        failed, _ = await call("bash", {"command": "true", "cwd": str(missing)}, "failed")
        refused, _ = await call("bash", {"command": "true", "timeout_ms": "soon"}, "refused")
    assert failed.is_error
    assert failed.meta is not None
    assert failed.meta[META_ERROR]["kind"] == "execution"
    assert str(missing) in failed.content[0].text  # type: ignore[union-attr]
    assert refused.is_error
    assert refused.meta is not None
    assert refused.meta[META_ERROR]["kind"] == "invalid_params"
    assert refused.meta[META_ERROR]["data"]["details"]["path"] == "$.timeout_ms"


async def test_tools_are_listed_as_serve_mcp_lists_them() -> None:
    """``add_kigi_tools`` lists each tool with the definition ``serve --mcp``
    gives it (name, description, schemas, annotations, kigi ``_meta``), and
    the app keeps its own tools."""
    app = fastmcp.FastMCP("app")

    @app.tool
    def own() -> str:
        return "mine"

    server = McpToolServer([ShellTool()])
    added = add_kigi_tools(app, server)
    assert [tool.name for tool in added] == ["bash"]
    assert isinstance(added[0], KigiFastMCPTool)
    async with fastmcp.Client(app) as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
    assert set(listed) == {"own", "bash"}
    (expected,) = (await server._list_tools(None, None)).tools  # type: ignore[arg-type]
    bash = listed["bash"]
    assert bash.description == expected.description
    assert bash.input_schema == expected.input_schema
    assert bash.output_schema == expected.output_schema
    assert bash.annotations == expected.annotations
    assert bash.meta is not None
    assert expected.meta is not None
    assert bash.meta["dev.kigi/capabilities"] == expected.meta["dev.kigi/capabilities"]


async def test_a_call_outside_a_session_has_the_same_result() -> None:
    """``FastMCP.call_tool`` in-process (no MCP request) runs the tool without
    live output and gives the same result, ``progress_requested`` false."""
    app = fastmcp.FastMCP("app")
    add_kigi_tools(app, [ShellTool()])
    result = await app.call_tool("bash", {"command": "printf 'grüße'"})
    assert result.structured_content is not None
    assert result.structured_content["output"] == "grüße"
    assert result.meta is not None
    assert result.meta[META_STREAM]["progress_requested"] is False


def test_two_tools_with_one_name_are_refused() -> None:
    """Two kigi tools with one MCP name are refused before anything is added."""
    app = fastmcp.FastMCP("app")
    with pytest.raises(ValueError, match="MCP name"):
        add_kigi_tools(app, [ShellTool(), ShellTool()])


def test_readme_fastmcp_section_runs() -> None:
    """The README's FastMCP example runs as written: the live message, then
    the model's text."""
    from test_readme import _EXPECTED_OUTPUT, _block_with, _run_block

    marker = "add_kigi_tools(mcp, [ShellTool()])"
    out = _run_block(_block_with(marker))
    for part in _EXPECTED_OUTPUT[marker]:
        assert part in out, out


async def test_a_refused_call_is_an_error_result(tmp_path: Path) -> None:
    """A call over the server's ``max_calls`` is refused as ``serve --mcp``
    refuses it, and FastMCP hands the refusal to the host as an ``isError``
    result; the running call is unharmed."""
    app = fastmcp.FastMCP("app")
    add_kigi_tools(app, McpToolServer([ShellTool()], max_calls=1))
    started = tmp_path / "started"
    gate = tmp_path / "gate"
    # The first call runs until the refusal has come back: then the gate opens.
    command = f"touch {started}; while [ ! -e {gate} ]; do sleep 0.02; done; echo one"
    async with asyncio.timeout(DEADLINE_S), fastmcp.Client(app) as client:
        first = asyncio.create_task(client.call_tool_mcp("bash", {"command": command}))
        while not started.exists():
            await asyncio.sleep(0.02)
        refused = await client.call_tool_mcp("bash", {"command": "echo two"})
        gate.touch()
        done = await first
    assert refused.is_error
    assert "already running" in refused.content[0].text  # type: ignore[union-attr]
    assert not done.is_error
    assert done.structured_content is not None
    assert done.structured_content["output"] == "one\n"
