"""The event loop watch of ``kigi-stream serve`` (``_cli/_loop_watch``) and the
stop signals that work while a tool blocks the loop (``_cli/_signals``): the
sans-IO watch over any schedule, and a real ``serve --tools`` whose tool calls
``time.sleep`` in an ``async def``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from hypothesis import given
from hypothesis import strategies as st
from processes import reap

from kigi_tool_runtime._cli._loop_watch import BlockWatch

BLOCKING_TOOLS = """
import os
import time

import msgspec

from kigi_tool_runtime import Tool


class Args(msgspec.Struct):
    seconds: float
    release: str = ""


class Blocker(Tool[Args]):
    id = "blocker"
    args_type = Args

    async def run(self, ctx, args):
        # Blocks the event loop: for `seconds`, or until the file `release`
        # names exists.
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            if args.release and os.path.exists(args.release):
                break
            time.sleep(0.01)
        return {"released": bool(args.release) and os.path.exists(args.release)}


TOOLS = [Blocker()]
"""


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=40))
def test_the_watch_says_each_block_once_and_then_its_end(steps: list[tuple[bool, float]]) -> None:
    """Over any schedule of ticks and checks, the watch says a block only after
    ``blocked_s`` without a tick, says it once, says its end once the loop
    ticks again (with the length measured from tick to tick), and alternates."""
    watch = BlockWatch(blocked_s=1.0)
    now = last = 0.0
    said: list[str] = []
    for ticks, advance in steps:
        now += advance
        if ticks:
            last = now
        line = watch.check(now, last, "task 'tool t call c'")
        if line is None:
            continue
        kind = "end" if "was blocked" in line else "block"
        if kind == "block":
            assert now - last >= 1.0
        assert "task 'tool t call c'" in line
        assert not said or said[-1] != kind
        said.append(kind)
    assert said[:1] in ([], ["block"])


def _serve(tools: Path, stderr: int | IO[bytes] = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", f"{tools}:TOOLS"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def _call(seconds: float, release: str = "") -> bytes:
    arguments = {"seconds": seconds, "release": release}
    params = {"tool_call_id": "c1", "tool_id": "blocker", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tool.call", "params": params}).encode()


def _read_until(stream: IO[bytes], text: bytes) -> bytes:
    """Lines of ``stream`` up to the first holding ``text`` (the test's
    timeout bounds the wait)."""
    seen = b""
    while text not in seen:
        line = stream.readline()
        assert line, f"{text!r} never came; got {seen!r}"
        seen += line
    return seen


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "blocking.py"
    path.write_text(BLOCKING_TOOLS, encoding="utf-8")
    return path


#: The stop signals sent, first and second: the same one twice (either), and
#: two different ones.
SIGNAL_PAIRS = [
    (signal.SIGTERM, signal.SIGTERM),
    (signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM, signal.SIGINT),
]


def _second_signal_stops(
    proc: subprocess.Popen[bytes], first: signal.Signals, second: signal.Signals
) -> None:
    """Once ``proc`` says its loop is blocked by the call: ``first``, then
    ``second`` until it exits 128 + N of one of them, saying why."""
    assert proc.stderr is not None
    said = _read_until(proc.stderr, b"the event loop has been blocked")
    assert b"by task 'tool blocker call c1'" in said
    proc.send_signal(first)
    # A signal sent while the same one is still pending is merged into it
    # (Unix signals are not queued): the second is sent again until one
    # arrives on its own. Two that arrive together are handled in
    # signal-number order.
    for _ in range(600):
        proc.send_signal(second)
        try:
            status = proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            continue
    assert status in (128 + first, 128 + second), (first, second)
    rest = proc.stderr.read()
    assert b"a second stop signal while the event loop is blocked" in rest


def test_a_second_signal_stops_serve_while_a_tool_blocks_the_loop(tools: Path) -> None:
    """A tool that sleeps 10 minutes in an ``async def``: stderr names its task
    as blocking the loop, and a second stop signal ends ``serve`` at once with
    128 + N of the first, saying why; for each pair of signals (SIGTERM twice,
    SIGINT twice, SIGTERM then SIGINT), one server each, all at once."""
    procs = [_serve(tools) for _ in SIGNAL_PAIRS]
    try:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(_call(600) + b"\n")
            proc.stdin.flush()
        for proc, (first, second) in zip(procs, SIGNAL_PAIRS, strict=True):
            _second_signal_stops(proc, first, second)
    finally:
        for proc in procs:
            reap(proc, close_pipes=True)


def test_a_block_that_ends_is_said_with_its_length_and_the_call_answers(
    tools: Path, tmp_path: Path
) -> None:
    """A tool that blocks the loop until the test, having read that the loop is
    blocked, lets it go: its call still answers, and stderr says the loop was
    blocked, by its task, and for how long."""
    release = tmp_path / "release"
    proc = _serve(tools)
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        proc.stdin.write(_call(600, str(release)) + b"\n")
        proc.stdin.flush()
        said = _read_until(proc.stderr, b"the event loop has been blocked")
        assert b"by task 'tool blocker call c1'" in said
        release.touch()
        (line,) = proc.stdout.readline().splitlines()
        assert json.loads(line)["result"]["output"]["value"] == {"released": True}
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        said += proc.stderr.read()
    finally:
        reap(proc, close_pipes=True)
    assert b"the event loop was blocked for" in said
    assert b"by task 'tool blocker call c1'" in said
