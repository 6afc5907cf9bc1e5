"""The ``mcp`` extra stays optional, ``kigi-stream serve --mcp-http`` reads
its address, and ``serve --mcp`` stopped while unread says so once."""

from __future__ import annotations

import fcntl
import json
import signal
import socket
import struct
import subprocess
import sys
import termios
import time

import pytest
from cli_in_process import kigi_in_process
from processes import reap

from kigi_tool_runtime._call._serving import WRITER_STALL_S
from kigi_tool_runtime._cli._mcp import parse_http_address

# Runs Python with the MCP SDK made unimportable, as without the extra.
WITHOUT_MCP = "import sys; sys.modules['mcp'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_core_never_imports_the_sdk() -> None:
    """Importing the runtime and its CLI loads no part of the MCP SDK."""
    done = _python(
        "import sys, kigi_tool_runtime, kigi_tool_runtime._cli._main\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_error_names_it() -> None:
    """Without the SDK, importing kigi_tool_runtime.mcp raises an ImportError
    that says which extra to install, and the core still imports."""
    done = _python(
        WITHOUT_MCP + "import kigi_tool_runtime\n"
        "try:\n    import kigi_tool_runtime.mcp\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'kigi-tool-runtime[mcp]'" in done.stdout


def test_serve_mcp_without_the_extra_is_a_usage_error() -> None:
    """``kigi-stream serve --mcp`` without the SDK exits 2 naming the extra."""
    done = _python(
        WITHOUT_MCP + "from kigi_tool_runtime._cli._main import main\n"
        "sys.exit(main(['serve', '--mcp']))\n"
    )
    assert done.returncode == 2
    assert "kigi-tool-runtime[mcp]" in done.stderr


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("8000", ("127.0.0.1", 8000)),
        ("0", ("127.0.0.1", 0)),
        ("localhost:9", ("localhost", 9)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("[::1]:7", ("::1", 7)),
    ],
)
def test_http_addresses(text: str, address: tuple[str, int]) -> None:
    """A bare port listens on loopback; a host may be named, IPv6 in brackets."""
    assert parse_http_address(text) == address


@pytest.mark.parametrize("text", ["", "http", ":80", "host:", "host:99999", "host:-1"])
def test_bad_http_addresses(text: str) -> None:
    """No port, an empty host or a port out of range is refused."""
    with pytest.raises(ValueError, match=r"PORT|port"):
        parse_http_address(text)


def test_serve_with_a_bad_address_is_a_usage_error() -> None:
    """``--mcp-http`` with a bad address exits 2 before serving (the CLI's own
    check: run in this process)."""
    done = kigi_in_process("serve", "--mcp-http", "nowhere:port")
    assert done.returncode == 2
    assert "--mcp-http" in done.stderr.decode()


def test_serve_on_a_busy_port_says_so() -> None:
    """``--mcp-http`` on a port already taken exits 1 with one line naming it
    (the CLI's own message: run in this process)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = kigi_in_process("serve", "--mcp-http", f"127.0.0.1:{port}")
    err = done.stderr.decode()
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


#: Generous bound on waiting for the unread stdout to stall: never a timing assertion.
STALL_WAIT_S = 60.0


def _wait_until_stalled(fd: int) -> None:
    """Wait until the pipe read by ``fd`` holds at least half its size and has
    not changed for one and a half times :data:`WRITER_STALL_S` (the writer
    is blocked past the stall bound: nobody reads it)."""
    size = fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))
    deadline = time.monotonic() + STALL_WAIT_S
    held, since = -1, time.monotonic()
    while True:
        now_held = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        now = time.monotonic()
        if now_held != held:
            held, since = now_held, now
        elif held >= size // 2 and now - since > 1.5 * WRITER_STALL_S:
            return
        assert now < deadline, f"stdout did not stall within {STALL_WAIT_S} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_serve_mcp_stopped_while_its_stdout_is_unread_says_so_once() -> None:
    """``serve --mcp`` with 64 flooding calls (the most it runs) and a host that never reads
    stdout: SIGTERM stops it (143), and stderr says once how many answers
    were never written, not a warning of the SDK's per call."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:

        def send(message: dict[str, object]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()

        send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert b'"id":0' in proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        calls = 64
        for n in range(1, calls + 1):
            send(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {
                        "name": "bash",
                        "arguments": {"command": "yes"},
                        "_meta": {"progressToken": f"t{n}"},
                    },
                }
            )
        # The floods fill stdout, which is never read: wait until they have
        # stalled it (nothing more leaves) for longer than the stall bound.
        _wait_until_stalled(proc.stdout.fileno())
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)  # its stdout still unread
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        reap(proc, close_pipes=True)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-3000:]
    lines = err.decode().splitlines()
    assert "gave up: transport write blocked" not in err.decode(), lines
    assert len(lines) <= 1, lines
