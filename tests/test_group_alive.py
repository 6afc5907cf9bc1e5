"""``group_alive``: a group whose members are all zombies (exited, waiting for
a reaper) runs nothing, so it is not alive, and stopping it does not wait out
its grace for init to reap them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

from bounded import run_within

from kigi_tool_runtime._lifeline import group_runs
from kigi_tool_runtime._process import group_alive, spawn_in_group, stop_group

DEADLINE_S = 20.0


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def test_a_group_of_one_zombie_is_not_alive() -> None:
    """The kernel still signals a zombie's group (``killpg(pgid, 0)``
    succeeds), yet nothing of it runs: ``group_alive`` says so."""
    proc = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while _state(proc.pid) != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        os.killpg(proc.pid, 0)  # raises if the kernel no longer counts it
        assert not group_runs(proc.pid)
        assert not group_alive(proc.pid)
    finally:
        proc.wait()


def test_a_running_group_is_alive() -> None:
    """This process's own group runs."""
    assert group_runs(os.getpgrp())
    assert group_alive(os.getpgrp())


def test_stopping_a_group_whose_orphan_waits_for_init_leaves_nothing_running() -> None:
    """A command and its background child, both stopped by SIGTERM: the child,
    an orphan, is a zombie until init reaps it. The stop ends once nothing
    runs (no wait for init: the first test proves the zombie is not counted),
    inside a deadline shorter than the 30 s grace it was given."""

    async def main() -> int:
        proc = await spawn_in_group(
            "sh", "-c", "(sleep 60) & echo started; sleep 60", stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        await stop_group(proc, grace=30.0)
        return proc.pid

    pgid = run_within(main(), DEADLINE_S)
    assert not group_alive(pgid)
