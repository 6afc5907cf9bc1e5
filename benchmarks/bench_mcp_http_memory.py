"""``serve --mcp-http`` memory under hosts that stop reading or open sessions
without end: the server's RSS (``VmRSS`` of its process) when idle, with
``--calls`` flooding calls whose streams are never read (after ``--wait``
seconds), once for a text flood (``yes``) and once for a binary one (``cat
/dev/urandom``, whose text holds characters of 4 bytes in memory), each in a
server of its own; and after ``--sessions`` initialize requests (how many were
admitted). Each per-call figure is printed beside the bound docs/hosts/mcp.md
states (:data:`DOCUMENTED_MIB`). Goals: the documented bound plus 1.5 MiB of
allocator slack per unread call (the shell tool's 1 MiB tail in 2 MiB of
storage, the 1 MiB of text between the tool and the call's queue, the call's
1 MiB outbox, the 8 messages on their way), at most 64 sessions admitted, and
at most 16 MiB added by the initialize flood. ``--quick``: 8 calls, 3 s, 200
initialize requests, twice the slack (the idle server's own growth weighs
more over 8 calls). Needs Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from _goals import Goals, add_check_flag

#: The floods, by name: the command each unread call runs.
FLOODS = {
    "text": "exec yes 'a line of output that goes on and on'",
    "binary": "exec cat /dev/urandom",
}

#: MiB per unread call docs/hosts/mcp.md states, by flood.
DOCUMENTED_MIB = {"text": 4.5, "binary": 7.0}

#: MiB per call the goals allow above the documented figure (allocator slack).
SLACK_MIB = 1.5

VERSION = "2025-11-25"
HELLO = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
}


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _start() -> tuple[subprocess.Popen[bytes], str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp-http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
    assert match, line
    # The SDK warns once per refused session: keep the pipe drained.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, match.group(), int(match.group(1))


def _post(url: str, message: Any, session: str | None = None) -> tuple[int, str | None]:
    headers = dict(HEADERS, **({"Mcp-Session-Id": session} if session else {}))
    request = urllib.request.Request(
        url, data=json.dumps(message).encode(), method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status, response.headers.get("mcp-session-id")
    except urllib.error.HTTPError as error:
        error.read()
        return error.code, None


def _unread_call(port: int, session: str, request_id: int, command: str) -> socket.socket:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "bash",
                "arguments": {"command": command},
                "_meta": {"progressToken": f"t{request_id}"},
            },
        }
    ).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    sock.sendall(
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}Mcp-Session-Id: {session}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--wait", type=float, default=10.0)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="8 calls, 3 s, 200 sessions")
    add_check_flag(parser)
    parser.add_argument(
        "--own-sessions", action="store_true", help="each call in a session of its own"
    )
    args = parser.parse_args()
    if args.quick:
        args.calls, args.wait, args.sessions = 8, 3.0, 200
    goals = Goals()

    for flood, command in FLOODS.items():
        proc, url, port = _start()
        try:
            status, session = _post(url, HELLO)
            assert status == 200
            assert session is not None
            _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            time.sleep(1.0)
            idle = _rss_mib(proc.pid)
            socks = []
            for n in range(args.calls):
                if args.own_sessions:
                    _, session = _post(url, HELLO)
                    assert session is not None
                socks.append(_unread_call(port, session, n + 1, command))
            time.sleep(args.wait)
            flooded = _rss_mib(proc.pid)
            print(f"{flood} flood, idle server:     {idle:7.1f} MiB")
            print(f"{args.calls} unread {flood} calls:   {flooded:7.1f} MiB after {args.wait:g} s")
            if args.calls:
                per_call = (flooded - idle) / args.calls
                documented = DOCUMENTED_MIB[flood]
                print(
                    f"  {per_call:.2f} MiB per unread call; docs/hosts/mcp.md: {documented:g} MiB"
                )
                goals.record(
                    f"MiB per unread call ({flood} flood)",
                    per_call,
                    documented + (2 * SLACK_MIB if args.quick else SLACK_MIB),
                    at_most=True,
                )
            for sock in socks:
                sock.close()
        finally:
            _stop(proc)

    proc, url, port = _start()
    try:
        time.sleep(1.0)
        idle = _rss_mib(proc.pid)
        admitted = sum(_post(url, HELLO)[0] == 200 for _ in range(args.sessions))
        opened = _rss_mib(proc.pid)
        print(f"idle server:                {idle:7.1f} MiB")
        print(
            f"{args.sessions} initialize requests:  {opened:7.1f} MiB, {admitted} sessions admitted"
        )
    finally:
        _stop(proc)
    goals.record("sessions admitted", admitted, 64, at_most=True)
    goals.record("MiB added by the initialize flood", opened - idle, 16, at_most=True)
    sys.exit(goals.finish(args.check))


if __name__ == "__main__":
    main()
