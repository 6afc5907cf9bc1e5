"""Containment: every process a command started, through ``timeout``,
``setsid``, ``set -m`` and ``nohup ... &``, is gone once its call ends by
cancellation, deadline, end of input or the server's death; a command is held
before it can run; a dead lifeline helper is replaced. Real ``kigi-stream
serve`` processes; each command's processes are found by a variable in their
environment."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from processes import kill_marked, marked, until_gone

from kigi_tool_runtime._process import lifeline_pid, release, spawn_in_group, stop_group

CLI = [sys.executable, "-m", "kigi_tool_runtime"]

#: Seconds a test waits for what it expects to see (a command's processes all
#: started, a helper replaced): far above what it takes.
SEEN_S = 30.0

#: A command whose processes leave its process group every way models write:
#: ``timeout`` (a group of its own), ``setsid`` (a session of its own), a
#: ``set -m`` subshell's job (a group of its own, its parent gone), ``nohup``
#: in the background. Six processes with the bash that runs it.
ESCAPES = (
    "timeout 30 sleep 300 & "
    "setsid sleep 300 & "
    "(set -m; sleep 300 &); "
    "nohup sleep 300 >/dev/null 2>&1 & "
    "wait"
)
ESCAPES_PROCESSES = 6


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _call(call_id: str, command: str | list[str], mark: str, **extra: Any) -> bytes:
    arguments = {"command": command, "env": {"KIGI_TEST_MARK": mark}, **extra}
    params = {"tool_id": "bash", "tool_call_id": call_id, "arguments": arguments}
    return _line({"jsonrpc": "2.0", "id": 1, "method": "tool.call", "params": params})


async def _until_marked(mark: str, count: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SEEN_S
    while len(marked(mark)) < count:
        assert loop.time() < deadline, f"{len(marked(mark))} of {count} processes started"
        await asyncio.sleep(0.02)


def _serve(*options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "serve", *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _send(server: subprocess.Popen[bytes], data: bytes) -> None:
    assert server.stdin is not None
    server.stdin.write(data)
    server.stdin.flush()


@pytest.mark.parametrize("ending", ["cancel", "deadline", "end_of_input", "sigkill"])
def test_nothing_a_command_started_outlives_its_call(ending: str) -> None:
    """``timeout``, ``setsid``, ``set -m`` and ``nohup`` children are gone after
    ``tool.cancel``, the command's deadline, the host closing input, and a
    SIGKILL of ``serve`` (which can stop nothing itself)."""
    mark = uuid.uuid4().hex
    extra = {"timeout_ms": 3000} if ending == "deadline" else {}
    server = _serve()
    try:
        _send(server, _call("c1", ESCAPES, mark, **extra))

        async def main() -> None:
            await _until_marked(mark, ESCAPES_PROCESSES)
            if ending == "cancel":
                cancel = {"tool_call_id": "c1"}
                _send(
                    server,
                    _line({"jsonrpc": "2.0", "id": 2, "method": "tool.cancel", "params": cancel}),
                )
            elif ending == "end_of_input":
                assert server.stdin is not None
                server.stdin.close()
            elif ending == "sigkill":
                server.kill()
            await until_gone(
                f"processes of the call still run: {marked(mark)}", lambda: bool(marked(mark))
            )

        asyncio.run(asyncio.wait_for(main(), SEEN_S * 2))
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=SEEN_S)
        if server.stdin is not None and not server.stdin.closed:
            server.stdin.close()
        kill_marked(mark)


def test_a_command_is_held_before_it_can_run(tmp_path: Path) -> None:
    """SIGKILL of ``serve`` the moment its command starts (the command's first
    act wakes the test) leaves nothing of it running, try after try."""
    for attempt in range(5):
        mark = uuid.uuid4().hex
        started = tmp_path / f"started-{attempt}"
        os.mkfifo(started)
        command = ["sh", "-c", 'echo > "$1"; setsid sleep 300 & exec sleep 300', "sh", str(started)]
        server = _serve()
        try:
            _send(server, _call("c1", command, mark))
            with open(started, "rb") as fifo:  # opens as soon as the command does
                server.kill()
                fifo.read()
            server.wait(timeout=SEEN_S)

            async def gone(mark: str = mark, attempt: int = attempt) -> None:
                await until_gone(
                    f"try {attempt}: the command runs on: {marked(mark)}",
                    lambda: bool(marked(mark)),
                )

            asyncio.run(gone())
        finally:
            if server.poll() is None:
                server.kill()
            server.wait(timeout=SEEN_S)
            assert server.stdin is not None
            server.stdin.close()
            kill_marked(mark)


def _helper_of(server: int) -> int | None:
    """The pid of ``server``'s lifeline helper, if one runs."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                argv = cmdline.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == server and b"_lifeline.py" in argv:
            return int(name)
    return None


def test_a_dead_helper_is_replaced_and_holds_every_live_command() -> None:
    """The lifeline's helper is SIGKILLed while a command runs: ``serve``
    starts another, and its own SIGKILL later still ends the command."""
    mark = uuid.uuid4().hex
    server = _serve()
    try:
        _send(server, _call("c1", ESCAPES, mark))

        async def main() -> None:
            await _until_marked(mark, ESCAPES_PROCESSES)
            first = _helper_of(server.pid)
            assert first is not None
            os.kill(first, signal.SIGKILL)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SEEN_S
            while _helper_of(server.pid) in (None, first):
                assert loop.time() < deadline, "the helper was not replaced"
                await asyncio.sleep(0.02)
            assert len(marked(mark)) == ESCAPES_PROCESSES
            server.kill()
            await until_gone(
                f"processes of the call still run: {marked(mark)}", lambda: bool(marked(mark))
            )

        asyncio.run(asyncio.wait_for(main(), SEEN_S * 3))
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=SEEN_S)
        assert server.stdin is not None
        server.stdin.close()
        kill_marked(mark)


def test_holding_commands_starts_no_process_per_call() -> None:
    """One helper holds every command, call after call: it is started once
    and kept, not started and stopped with each command."""

    async def main() -> set[int | None]:
        helpers = set()
        for _ in range(3):
            proc = await spawn_in_group("true")
            helpers.add(lifeline_pid())
            await proc.wait()
            release(proc.pid)
            helpers.add(lifeline_pid())
        return helpers

    helpers = asyncio.run(main())
    assert len(helpers) == 1
    assert None not in helpers


def test_stop_group_ends_what_left_the_group_and_release_leaves_a_normal_exit_alone() -> None:
    """In process: ``stop_group`` ends a command's ``timeout``, ``setsid``,
    ``set -m`` and ``nohup`` children; after a command that exited normally,
    :func:`release` leaves its background process running (it outlives the
    call, as before)."""
    stopped, left = uuid.uuid4().hex, uuid.uuid4().hex

    async def main() -> None:
        env = {**os.environ, "KIGI_TEST_MARK": stopped}
        proc = await spawn_in_group("bash", "-c", ESCAPES, env=env)
        try:
            await _until_marked(stopped, ESCAPES_PROCESSES)
            await stop_group(proc, 5.0)
        finally:
            release(proc.pid)
        await until_gone(f"still running: {marked(stopped)}", lambda: bool(marked(stopped)))
        env = {**os.environ, "KIGI_TEST_MARK": left}
        proc = await spawn_in_group("bash", "-c", "setsid sleep 300 >/dev/null 2>&1 &", env=env)
        await proc.wait()
        await _until_marked(left, 1)
        release(proc.pid)
        time.sleep(0.2)  # a kill would take effect meanwhile
        assert len(marked(left)) == 1

    try:
        asyncio.run(asyncio.wait_for(main(), SEEN_S * 2))
    finally:
        kill_marked(stopped)
        kill_marked(left)
