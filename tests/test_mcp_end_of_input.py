"""Requests still in flight when a stdio host closes the server's input are
answered before ``kigi-stream serve --mcp`` exits (``_lines`` Rule 3,
``_inflight``); calls are cancelled, their tools stopped. Requests alone
sent just before the end are served in process, in test_mcp_lines.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp_raw import INITIALIZE, INITIALIZED, bash_call
from processes import pid_alive, reap

from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime.mcp._inflight import InFlight

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"]


def _end_while_running(
    proc: subprocess.Popen[bytes], call: dict[str, Any], pidfile: Path
) -> tuple[bytes, float, int]:
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        for message in (INITIALIZE, INITIALIZED, call):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        give_up = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < give_up, "the command never started"
            time.sleep(0.02)
        pid = int(pidfile.read_text())
        started = time.monotonic()
        for message in (
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 9, "method": "ping"},
        ):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.close()
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
        elapsed = time.monotonic() - started
    finally:
        reap(proc)
    return out, elapsed, pid


def test_a_running_call_is_cancelled_while_the_requests_behind_it_are_answered(
    tmp_path: Path,
) -> None:
    """A call still running at the end is cancelled (the SDK answers it with
    a "Connection closed" error) and its command's process group is gone; the
    tools/list and ping sent after it get their results; the server exits well
    before the final flush's bound."""
    pidfile = tmp_path / "pid"
    call = bash_call(7, f"echo $$ > {pidfile}; sleep 60")
    with subprocess.Popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        out, elapsed, pid = _end_while_running(proc, call, pidfile)
    answers = {m["id"]: m for m in map(json.loads, out.splitlines()) if "id" in m}
    assert sorted(answers) == [0, 7, 8, 9]
    assert answers[7]["error"]["code"] == -32000  # the SDK's "Connection closed"
    assert "result" in answers[8]
    assert answers[9]["result"] == {}
    assert not group_alive(pid)
    assert not pid_alive(pid)
    assert elapsed < 10  # the final flush's bound: nothing waited for the call


def test_in_flight_counts_requests_until_answered_but_never_waits_for_calls() -> None:
    """``_inflight`` Rules 1-3: a reused open id is refused (1 and "1" are one,
    as the SDK correlates them), calls and cancelled requests are not awaited."""
    inflight = InFlight()
    assert inflight.forwarded(1, "ping")
    assert not inflight.forwarded(1, "tools/list")
    assert not inflight.forwarded("1", "ping")
    assert inflight.forwarded("a", "ping")
    assert inflight.forwarded(2, "tools/call")
    assert inflight.forwarded(3, "resources/read")
    assert inflight.awaited == 3
    inflight.answered(2)
    inflight.answered(1)
    assert inflight.awaited == 2
    inflight.answered("a")
    assert inflight.awaited == 1
    inflight.cancelled(3)
    assert inflight.awaited == 0
    inflight.answered(99)  # an unknown id changes nothing
    inflight.cancelled(99)
    assert inflight.awaited == 0
    assert inflight.open == 0
