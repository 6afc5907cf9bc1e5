"""The stdio wire fenced from user code (``_transport/_fence``): a user's
tools that print, at import, from a thread they start and during a call, served
by ``kigi-stream serve --tools`` and ``--mcp``, still answer every call, and
what they printed is on stderr."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kigi_tool_runtime import Client

#: A user's tools module that writes to stdout every way it can: at import,
#: from a thread started at import (all the time), and during a call, by
#: ``print``, ``sys.stdout.write`` without a newline, ``os.write(1, ...)``
#: and a child process's stdout.
NOISY_TOOLS = """
import os, subprocess, sys, threading, time

import msgspec

from kigi_tool_runtime import Tool

print("printed at import")
sys.stdout.write("working... 50%")


def chatter():
    while True:
        sys.stdout.write("thread chatter ")
        time.sleep(0.001)


threading.Thread(target=chatter, daemon=True).start()


class Args(msgspec.Struct):
    n: int


class Noisy(Tool[Args]):
    id = "noisy"
    args_type = Args

    async def run(self, ctx, args):
        print("printed during the call")
        sys.stdout.write("no newline")
        os.write(1, b"os.write to fd 1")
        subprocess.run(["echo", "a child's stdout"], check=True)
        return {"twice": 2 * args.n}


TOOLS = [Noisy()]
"""


@pytest.fixture
def noisy(tmp_path: Path) -> Path:
    path = tmp_path / "noisy.py"
    path.write_text(NOISY_TOOLS, encoding="utf-8")
    return path


def test_serve_tools_that_print_still_answer_and_print_to_stderr(
    noisy: Path, tmp_path: Path
) -> None:
    """``serve --tools`` of a module that prints at import, from a thread and
    during each call: the ``Client`` gets every answer, and the printed text is
    on the server's stderr."""
    stderr_path = tmp_path / "stderr"

    async def main() -> None:
        with stderr_path.open("wb") as stderr:
            async with asyncio.timeout(60):
                client = await Client.spawn(
                    [
                        sys.executable,
                        "-m",
                        "kigi_tool_runtime",
                        "serve",
                        "--tools",
                        f"{noisy}:TOOLS",
                    ],
                    stderr=stderr,
                )
                async with client:
                    for n in range(20):
                        result = await client.call("noisy", {"n": n}).result()
                        assert result.output.value == {"twice": 2 * n}
                    assert client.statistics().lines_unused == 0

    asyncio.run(main())
    printed = stderr_path.read_text(encoding="utf-8")
    for text in (
        "printed at import",
        "working... 50%",
        "thread chatter",
        "printed during the call",
        "no newline",
        "os.write to fd 1",
        "a child's stdout",
    ):
        assert text in printed


def test_serve_mcp_tools_that_print_still_answer(noisy: Path, tmp_path: Path) -> None:
    """``serve --mcp --tools`` of the same module: the official MCP client lists
    the tool and gets every call's result, and the printed text is on stderr."""
    mcp = pytest.importorskip("mcp")
    from mcp.client.stdio import stdio_client

    stderr_path = tmp_path / "stderr"

    async def main() -> None:
        server = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "kigi_tool_runtime", "serve", "--mcp", "--tools", f"{noisy}:TOOLS"],
        )
        with stderr_path.open("w") as stderr:
            async with (
                asyncio.timeout(60),
                mcp.Client(stdio_client(server, errlog=stderr)) as client,
            ):
                names = [tool.name for tool in (await client.list_tools()).tools]
                assert names == ["noisy"]
                for n in range(10):
                    result = await client.call_tool("noisy", {"n": n})
                    assert not result.is_error
                    assert [block.text for block in result.content] == [f'{{"twice":{2 * n}}}']

    asyncio.run(main())
    printed = stderr_path.read_text(encoding="utf-8")
    assert "printed at import" in printed
    assert "printed during the call" in printed


def test_serve_stdio_fences_what_a_call_prints(noisy: Path) -> None:
    """The Python entry point ``serve_stdio`` fences the process too: a call
    that prints still gets its one response line on stdout."""
    program = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(noisy.parent)!r})\n"
        "from kigi_tool_runtime import serve_stdio\n"
        "from kigi_tool_runtime._transport._fence import fence_stdio\n"
        "fence_stdio()\n"
        "from noisy import TOOLS\n"
        "asyncio.run(serve_stdio(TOOLS))\n"
    )
    request = (
        b'{"jsonrpc":"2.0","id":1,"method":"tool.call","params":'
        b'{"tool_call_id":"c1","tool_id":"noisy","arguments":{"n":4}}}\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", program], input=request, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines(keepends=True)
    response = json.loads(line)
    assert response["id"] == 1
    assert response["result"]["output"]["value"] == {"twice": 8}
    assert b"printed during the call" in done.stderr
    assert b"printed at import" in done.stderr


_CALL = (
    b'{"jsonrpc":"2.0","id":1,"method":"tool.call","params":'
    b'{"tool_call_id":"c1","tool_id":"bash","arguments":{"command":"echo hi"}}}\n'
)


@pytest.mark.parametrize("mcp", [False, True], ids=["jsonrpc", "mcp"])
def test_serve_with_dev_null_as_input_ends_at_once(mcp: bool) -> None:
    """``serve < /dev/null`` (and ``--mcp``) reads end of input and exits 0,
    with nothing on stderr: no traceback, no hang."""
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve", *(["--mcp"] if mcp else [])]
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


@pytest.mark.parametrize("mcp", [False, True], ids=["jsonrpc", "mcp"])
def test_serve_with_dev_null_as_output_serves(mcp: bool, tmp_path: Path) -> None:
    """``serve > /dev/null``: the requests of a file are served (the answers
    thrown away), and it exits 0 with nothing on stderr."""
    requests = tmp_path / "requests"
    requests.write_bytes(_CALL)
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve", *(["--mcp"] if mcp else [])]
    with requests.open("rb") as stdin:
        done = subprocess.run(
            argv,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (0, b"")


def test_serve_reads_requests_from_a_file(tmp_path: Path) -> None:
    """``serve < requests`` (a regular file) answers the call in it (cancelled
    by the end of input, as from a pipe), then exits 0."""
    requests = tmp_path / "requests"
    requests.write_bytes(_CALL)
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
    with requests.open("rb") as stdin:
        done = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["id"] == 1


def test_serve_with_stdin_closed_says_so_in_one_line() -> None:
    """``serve <&-``: a one-line error and status 1."""
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
    done = subprocess.run(
        ["bash", "-c", 'exec "$@" <&-', "serve", *argv],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == b"kigi-stream serve: standard input is closed\n"


def test_serve_on_a_terminal_serves() -> None:
    """``serve`` with a terminal as its input prints its hint on stderr and
    answers a call typed at the terminal; Ctrl-D (end of input) ends it."""
    import pty

    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kigi_tool_runtime", "serve"],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            os.write(controller, _CALL.replace(b"\n", b"\r"))
            assert proc.stdout is not None
            line = proc.stdout.readline()
            while b'"id":1' not in line:
                line = proc.stdout.readline()
            assert json.loads(line)["result"]["output"]["value"]["exit_code"] == 0
            os.write(controller, b"\x04")
            assert proc.wait(timeout=60) == 0
            assert proc.stderr is not None
            assert b"reading JSON-RPC 2.0 requests on stdin" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    finally:
        os.close(controller)
        os.close(terminal)
