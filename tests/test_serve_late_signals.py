"""Stop signals that come after the first, while ``serve`` is already on its
way out (its handlers gone, the interpreter shutting down): the exit status is
still the first's, 128 + N, never the later signal's default action (another
status, or a ``KeyboardInterrupt``) (``_cli/_signals.py``, ``StopSignals``'s
``ends_process``), over JSON-RPC, MCP and NATS."""

from __future__ import annotations

import asyncio
import atexit
import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from mcp_raw import INITIALIZE, INITIALIZED
from nats_server import NatsServer
from processes import reap

from kigi_tool_runtime._cli._signals import STOP_SIGNALS, StopSignals, _ignore_stop_signals

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "kigi_tool_runtime"]

#: Bound on each process's stop (generous: a loaded machine is slow).
DEADLINE_S = 60.0


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _call(mcp: bool) -> bytes:
    if mcp:
        return (
            _line(INITIALIZE)
            + _line(INITIALIZED)
            + _line(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "bash",
                        "arguments": {"command": "echo ready; sleep 60"},
                        "_meta": {"progressToken": "t1"},
                    },
                }
            )
        )
    return _line(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tool.call",
            "params": {
                "tool_call_id": "c1",
                "tool_id": "bash",
                "arguments": {"command": "echo ready; sleep 60"},
            },
        }
    )


def _answers_call_1(line: bytes) -> bool:
    if not line:
        raise AssertionError("the output ended before the call was answered")
    message = json.loads(line)
    return message.get("id") == 1 and "method" not in message


@pytest.mark.parametrize("mcp", [False, True], ids=["json-rpc", "mcp"])
@pytest.mark.parametrize(
    ("first", "later"), [(signal.SIGTERM, signal.SIGINT), (signal.SIGHUP, signal.SIGTERM)]
)
def test_later_stop_signals_keep_the_first_ones_status(
    mcp: bool, first: signal.Signals, later: signal.Signals
) -> None:
    """A call runs; ``first`` comes and the call is answered (cancelled), then
    ``later`` comes again and again until the process has exited: it exits
    128 + ``first``, no traceback on stderr."""
    args = [*CLI, "serve", *(["--mcp"] if mcp else [])]
    proc = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(_call(mcp))
        proc.stdin.flush()
        while b"ready" not in proc.stdout.readline():  # the call is running
            pass
        proc.send_signal(first)
        while not _answers_call_1(proc.stdout.readline()):  # stopped: the call answered
            pass
        ends = time.monotonic() + DEADLINE_S
        while proc.poll() is None and time.monotonic() < ends:
            proc.send_signal(later)
            time.sleep(0.002)
        _, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 128 + first, err
        assert b"Traceback" not in err
    finally:
        reap(proc)


def test_after_a_stop_the_handlers_from_before_stay_off() -> None:
    """With ``ends_process`` (a command whose stop ends the process), a stop
    signal received leaves a handler of ``StopSignals`` in place on exit, not
    the handlers from before, and one that ignores them at exit; without a
    stop they are back."""
    saved = {number: signal.getsignal(number) for number in STOP_SIGNALS}

    async def main(stop: bool) -> None:
        arrived = asyncio.Event()
        with StopSignals(lambda number: arrived.set(), ends_process=True):
            if stop:
                signal.raise_signal(signal.SIGHUP)
                await asyncio.wait_for(arrived.wait(), 10)

    try:
        asyncio.run(main(stop=False))
        assert {number: signal.getsignal(number) for number in STOP_SIGNALS} == saved
        asyncio.run(main(stop=True))
        for number in STOP_SIGNALS:
            handler = signal.getsignal(number)
            assert handler is not saved[number]
            assert getattr(handler, "__self__", None).__class__ is StopSignals
        _ignore_stop_signals()
        assert {signal.getsignal(number) for number in STOP_SIGNALS} == {signal.SIG_IGN}
    finally:
        atexit.unregister(_ignore_stop_signals)
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_a_nats_worker_keeps_the_first_signals_status(nats_server: NatsServer) -> None:
    """``serve --nats``: SIGTERM stops the worker; a SIGINT soon after its
    summary, while it is exiting, still leaves the status 143."""
    for delay in (0.0, 0.005, 0.01, 0.02, 0.05):
        proc = subprocess.Popen(
            [*CLI, "serve", "--nats", nats_server.url],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            while b"takes calls" not in _stderr_line(proc):
                pass
            proc.send_signal(signal.SIGTERM)
            while b"stopped by SIGTERM" not in _stderr_line(proc):
                pass
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=DEADLINE_S)
            assert proc.returncode == 128 + signal.SIGTERM, (delay, err)
            assert b"Traceback" not in err
        finally:
            reap(proc)


def _stderr_line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if not line:
        raise AssertionError("the worker's stderr ended early")
    return line
