"""``kigi-stream serve --mcp-http``'s lifecycle and limits, with a real server
process on a free port, real signals, and raw sockets a host leaves unread or
closes: stop signals stop the commands first and exit 128 + N, a host that
goes away stops its call, an unread stream stalls only its own call, ids are
checked, and calls and sessions are capped."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import termios
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from mcp_raw import INITIALIZE, INITIALIZED, bash_call, http_headers
from processes import until_group_gone

from kigi_tool_runtime._mcp_limits import HTTP_SESSION_IDLE_S, MAX_HTTP_SESSIONS
from kigi_tool_runtime.mcp._mapping import META_STREAM

PY = sys.executable
#: A command that writes without end, as fast as it is read.
YES = "exec yes 'a line of output that goes on and on'"

#: A server with small limits, started as a real process (the CLI's are
#: fixed): argv max_calls, max_sessions, session_idle_s and, optionally, stall_s.
SMALL_SERVER = """
import asyncio, sys
from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.mcp import McpToolServer, serve_http_mcp

def ready(url):
    print(url, file=sys.stderr, flush=True)

stall = {"stall_s": float(sys.argv[4])} if len(sys.argv) > 4 else {}
server = McpToolServer([ShellTool()], max_calls=int(sys.argv[1]), **stall)
asyncio.run(serve_http_mcp(server, on_ready=ready, max_sessions=int(sys.argv[2]),
                           session_idle_s=float(sys.argv[3])))
"""

#: The stall bound (``stall_s``) a test of a stalled host gives
#: :data:`SMALL_SERVER`, so the host's pause need not outlast the default second.
SHORT_STALL_S = 0.2


class Served(NamedTuple):
    proc: subprocess.Popen[bytes]
    url: str
    port: int


@contextlib.contextmanager
def served(argv: list[str] | None = None) -> Iterator[Served]:
    """A ``serve --mcp-http 127.0.0.1:0`` child (or ``argv``), its URL and port."""
    proc = subprocess.Popen(
        argv or [PY, "-m", "kigi_tool_runtime", "serve", "--mcp-http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
        assert match, line
        yield Served(proc, match.group(), int(match.group(1)))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[Served]:
    """One ``serve --mcp-http`` child for the tests whose calls run in
    sessions of their own and leave the server as they found it (their calls
    ended, their sockets closed); it is killed after the module."""
    with served() as server:
        yield server


def post(
    url: str, message: Any, session: str | None = None, method: str = "POST"
) -> tuple[int, dict[str, str], str]:
    """One POST (or ``method``) read whole: status, headers, body."""
    data = None if message is None else json.dumps(message).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=http_headers(session))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {}, error.read().decode()


def events(body: str) -> list[Any]:
    """The JSON messages of an SSE body (or the one JSON body)."""
    if body.lstrip().startswith("{"):
        return [json.loads(body)]
    return [
        json.loads(line[len("data: ") :])
        for line in body.splitlines()
        if line.startswith("data: ") and line.strip() != "data:"
    ]


def initialize(url: str) -> str:
    """A new session's id, initialized."""
    status, headers, body = post(url, INITIALIZE)
    assert status == 200, body
    session = headers["mcp-session-id"]
    post(url, INITIALIZED, session)
    return session


def unread_call(port: int, session: str, message: Any) -> socket.socket:
    """Send a POST on a socket of its own, with a small receive buffer, and
    leave it unread: a host that stopped reading."""
    body = json.dumps(message).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    head = "".join(
        f"{name}: {value}\r\n"
        for name, value in {
            "Host": f"127.0.0.1:{port}",
            **http_headers(session),
            "Content-Length": str(len(body)),
        }.items()
    )
    sock.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + body)
    return sock


def read_to_end(sock: socket.socket, request_id: Any, seconds: float = 30.0) -> list[Any]:
    """Read a raw SSE response (chunked) to its end, which follows the
    response for ``request_id``: every message on it, in order."""
    sock.settimeout(seconds)
    deadline = time.monotonic() + seconds
    data = bytearray()
    while True:
        assert time.monotonic() < deadline, "no response"
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the stream before the response"
        data += chunk
        # The response is the stream's last event; then the last chunk ends it.
        if data.endswith(b"\r\n0\r\n\r\n"):
            # Chunk-size lines stand between events (each event is one chunk),
            # and ``events`` reads only data lines. Parsed once, at the end:
            # parsing all of it on every read made a long stream quadratic.
            found = events(data.decode())
            assert any(m.get("id") == request_id and "method" not in m for m in found)
            return found


def unread_floods(
    server: Served, session: str, tmp_path: Path, count: int
) -> tuple[list[socket.socket], list[int]]:
    """Start ``count`` calls of :data:`YES` in ``session``, each on a socket
    left unread (:func:`unread_call`): their sockets and their commands' pids."""
    socks, pids = [], []
    for n in range(count):
        pidfile = tmp_path / f"pid{n}"
        message = bash_call(n + 1, f"echo $$ > {pidfile}; {YES}", f"t{n}")
        socks.append(unread_call(server.port, session, message))
        pids.append(wait_pid(pidfile))
    return socks, pids


def wait_pid(pidfile: Path, seconds: float = 20.0) -> int:
    deadline = time.monotonic() + seconds
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)
    return int(pidfile.read_text())


def wait_unread_output(sock: socket.socket, seconds: float = 30.0) -> None:
    """Wait until the server has sent output the host leaves unread on
    ``sock`` (the call's stream is flowing into a full buffer)."""
    deadline = time.monotonic() + seconds
    while not int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(4)), "little"):
        assert time.monotonic() < deadline, "no output arrived"
        time.sleep(0.02)


def groups_gone(*pids: int) -> None:
    async def wait() -> None:
        for pid in pids:
            await until_group_gone(pid)

    asyncio.run(wait())


def stderr_after_ready(proc: subprocess.Popen[bytes]) -> list[str]:
    assert proc.stderr is not None
    return proc.stderr.read().decode().splitlines()


@pytest.mark.parametrize(
    ("number", "status"),
    [(signal.SIGHUP, 129), (signal.SIGTERM, 143), (signal.SIGINT, 130)],
)
def test_a_stop_signal_stops_the_running_command_then_exits_128_plus_n(
    tmp_path: Path, number: int, status: int
) -> None:
    """SIGHUP, SIGTERM and Ctrl-C's SIGINT each stop the running command's
    process group and exit 128 + N, with no traceback and at most one line on
    stderr."""
    pidfile = tmp_path / "pid"
    with served() as server:
        session = initialize(server.url)
        sock = unread_call(
            server.port, session, bash_call(1, f"echo $$ > {pidfile}; exec sleep 99.5", "t")
        )
        pid = wait_pid(pidfile)
        server.proc.send_signal(number)
        assert server.proc.wait(timeout=60) == status
        groups_gone(pid)
        lines = stderr_after_ready(server.proc)
        sock.close()
    assert len(lines) <= 1, lines
    assert not any("Traceback" in line for line in lines), lines


def test_sigterm_stops_the_server_while_hosts_leave_streams_unread(tmp_path: Path) -> None:
    """Three flooding calls whose sockets are never read (their output
    waiting on them): SIGTERM still stops their commands and the server, in
    bounded time, exit 143."""
    with served() as server:
        session = initialize(server.url)
        socks, pids = unread_floods(server, session, tmp_path, 3)
        for sock in socks:  # every stream has output its host leaves unread
            wait_unread_output(sock)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 143
        groups_gone(*pids)
        lines = stderr_after_ready(server.proc)
        for sock in socks:
            sock.close()
    assert len(lines) <= 1, lines


@pytest.mark.parametrize("flooding", [False, True])
def test_a_host_that_closes_its_socket_without_delete_stops_its_call(
    shared: Served, tmp_path: Path, flooding: bool
) -> None:
    """A host whose call's socket closes (no DELETE, the session left open):
    the call is cancelled and its process group stopped, quiet or flooding,
    and the session goes on serving."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; " + (YES if flooding else "exec sleep 60")
    server = shared
    session = initialize(server.url)
    sock = unread_call(server.port, session, bash_call(1, command, "t"))
    pid = wait_pid(pidfile)
    if flooding:
        wait_unread_output(sock)
    sock.close()
    groups_gone(pid)
    status, _, body = post(server.url, bash_call(2, "echo still"), session)
    assert status == 200, body
    assert "still" in events(body)[-1]["result"]["structuredContent"]["output"]


def test_an_unread_stream_does_not_stall_the_other_calls_of_its_session(tmp_path: Path) -> None:
    """While one call's stream is unread (its command flooding), a call of the
    same session gets its result; the stalled call, read at last, has lost
    frames that it counts and says, and every notification it sent arrives,
    numbered 1, 2, 3, ..."""
    pidfile = tmp_path / "pid"
    flood = f"echo $$ > {pidfile}; head -c 30000000 /dev/zero | tr '\\0' x"
    with served([PY, "-c", SMALL_SERVER, "64", "8", "60", str(SHORT_STALL_S)]) as server:
        session = initialize(server.url)
        sock = unread_call(server.port, session, bash_call(1, flood, "flood"))
        wait_pid(pidfile)
        wait_unread_output(sock)
        time.sleep(3 * SHORT_STALL_S)  # the host stays away three stall bounds: stalled
        status, _, body = post(server.url, bash_call(2, "echo hi", "echo"), session)
        assert status == 200, body
        assert events(body)[-1]["result"]["structuredContent"]["output"] == "hi\n"
        messages = read_to_end(sock, 1)
        sock.close()
    *notes, result = messages
    assert [note["params"]["progress"] for note in notes] == [
        float(i) for i in range(1, len(notes) + 1)
    ]
    stream = result["result"]["_meta"][META_STREAM]
    assert stream["frames_sent"] == len(notes)
    assert stream["frames_dropped"] > 0
    said = sum(
        note["params"]["_meta"]["dev.kigi/frame"].get("dropped_count") or 0 for note in notes
    )
    assert said == stream["frames_dropped"]


def test_a_request_id_in_flight_is_refused_and_the_first_call_keeps_its_output(
    shared: Served, tmp_path: Path
) -> None:
    """A second request with the id of a call in flight in the same session
    (also as a string) is refused with -32600 before it reaches the session;
    the first call's output and result still arrive on its own stream."""
    pidfile = tmp_path / "pid"
    server = shared
    session = initialize(server.url)
    gate = tmp_path / "gate"
    first = bash_call(
        7,
        f"echo $$ > {pidfile}; while [ ! -e {gate} ]; do sleep 0.01; done; echo first",
        "first",
    )
    sock = unread_call(server.port, session, first)
    wait_pid(pidfile)
    for reused in (7, "7"):
        status, _, body = post(server.url, bash_call(reused, "echo second"), session)
        assert status == 400, body
        (error,) = events(body)
        assert error["error"]["code"] == -32600
        assert error["id"] == reused
    gate.touch()
    messages = read_to_end(sock, 7)
    sock.close()
    # Once the first call has ended, its id is free again.
    status, _, body = post(server.url, bash_call(7, "echo again"), session)
    assert status == 200, body
    assert messages[-1]["result"]["structuredContent"]["output"] == "first\n"


def test_a_call_with_a_null_id_is_answered_with_an_error_over_http(
    shared: Served, tmp_path: Path
) -> None:
    """``"id": null`` on a tools/call is refused with -32600 (not taken as a
    notification and dropped), and the command is never run."""
    pidfile = tmp_path / "pid"
    server = shared
    session = initialize(server.url)
    status, _, body = post(server.url, bash_call(None, f"echo $$ > {pidfile}"), session)
    assert status == 400, body
    (error,) = events(body)
    assert error["id"] is None
    assert error["error"]["code"] == -32600
    status, _, body = post(server.url, bash_call(1, "echo ok"), session)
    assert status == 200, body
    assert not pidfile.exists()


def test_calls_past_the_cap_are_refused_busy_until_one_ends(tmp_path: Path) -> None:
    """With ``max_calls=2``, a third call while two run (their streams unread)
    is refused with tool_busy (-32016); once a host leaves, a call runs again."""
    argv = [PY, "-c", SMALL_SERVER, "2", "8", "60"]
    with served(argv) as server:
        session = initialize(server.url)
        socks, pids = unread_floods(server, session, tmp_path, 2)
        status, _, body = post(server.url, bash_call(3, "echo third"), session)
        assert status == 200, body
        (error,) = events(body)
        assert error["error"]["code"] == -32016
        assert "2 calls" in error["error"]["message"]
        socks[0].close()
        groups_gone(pids[0])
        # The slot is free once the handler has wound down, just after the group.
        deadline = time.monotonic() + 20
        request_id = 4
        while True:
            status, _, body = post(server.url, bash_call(request_id, "echo fourth"), session)
            reply = events(body)[-1]
            if "result" in reply or time.monotonic() > deadline:
                break
            assert reply["error"]["code"] == -32016
            request_id += 1
            time.sleep(0.1)
        assert reply["result"]["structuredContent"]["output"] == "fourth\n"
        socks[1].close()
        groups_gone(pids[1])


def test_sessions_are_capped_and_an_idle_session_is_closed() -> None:
    """Past ``max_sessions`` a new session is refused (503) until one is
    deleted; a session with nothing in flight for ``session_idle_s`` is gone
    (404)."""
    argv = [PY, "-c", SMALL_SERVER, "4", "3", "1.5"]
    with served(argv) as server:
        sessions = [initialize(server.url) for _ in range(3)]
        status, _, body = post(server.url, INITIALIZE)
        assert status == 503, body
        status, _, _ = post(server.url, None, sessions[0], method="DELETE")
        assert status == 200
        sessions[0] = initialize(server.url)
        # Left idle, each session is closed once its idle bound has passed:
        # asked (a request is activity) only after that bound from its
        # initialize, then until it is gone, within a generous deadline.
        listing = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}
        time.sleep(1.5)
        deadline = time.monotonic() + 60
        for session in sessions:
            while True:
                status, _, body = post(server.url, listing, session)
                if status != 200 or time.monotonic() > deadline:
                    break
                time.sleep(1.6)  # the request was activity: a whole bound again
            assert status == 404, body


def test_the_cli_limits_are_the_documented_ones() -> None:
    """``serve --help`` and the README state the session cap, the idle timeout
    and the calls cap the HTTP server runs with."""
    shown = subprocess.run(
        [PY, "-m", "kigi_tool_runtime", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    from docs_pages import page

    readme = page("hosts/mcp.md")
    minutes = f"{HTTP_SESSION_IDLE_S / 60:g} minutes"
    for text in (" ".join(shown.split()), " ".join(readme.split())):
        assert f"{MAX_HTTP_SESSIONS} sessions" in text
        assert minutes in text
        assert "64 calls" in text
