"""Waiting on real processes in tests: whether one still runs, waiting, to a
deadline, for a process or a process group to be gone, and the cleanup that
leaves no child of a test behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kigi_tool_runtime._process import group_alive

#: Seconds a process or group may take to go after what should end it: far
#: above what it takes, far below a test's own bound. Never a timing assertion.
GONE_S = 20.0


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (dead, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return True


async def until_gone(what: str, alive: Callable[[], bool], seconds: float = GONE_S) -> None:
    """Wait until ``alive()`` is false; fail with ``what`` after ``seconds``
    (a killed process stays a zombie until its parent, or init, reaps it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while alive():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def until_group_gone(pgid: int, seconds: float = GONE_S) -> None:
    """Wait until process group ``pgid`` has no member left."""
    await until_gone(f"process group {pgid} still running", lambda: group_alive(pgid), seconds)


async def cancel_once_started(task: asyncio.Future[Any], pid_file: Path) -> None:
    """Wait (the task still running) until the tool of ``task`` has written
    its process group's id to ``pid_file``, cancel the task, see it end
    cancelled, and wait until that group has no member left."""
    while not (pid_file.exists() and pid_file.read_text()):
        assert not task.done()
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    await until_group_gone(pid)


def reap(proc: subprocess.Popen[bytes], *, drain: bool = False, close_pipes: bool = False) -> None:
    """Kill ``proc`` if it still runs, and wait for it: a test's ``finally``,
    which must not leave its child behind when an assertion failed. ``drain``
    reads the pipes nobody else reads to their end (``communicate``) instead;
    without it, what the child wrote stays there for the test to read.
    ``close_pipes`` then closes the pipes to and from it."""
    if proc.poll() is None:
        proc.kill()
        if drain:
            proc.communicate()
        else:
            proc.wait()
    if close_pipes:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def stop(proc: subprocess.Popen[bytes], *, grace: float) -> None:
    """Stop ``proc`` as a user would: SIGTERM, then SIGKILL if it has not
    exited within ``grace`` seconds; then close its stderr pipe, if it has one."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def marked(mark: str) -> list[int]:
    """The live processes whose environment holds ``KIGI_TEST_MARK=mark`` (each
    process a command starts inherits it, whatever group or session it moves
    to)."""
    wanted = f"KIGI_TEST_MARK={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if wanted in variables and pid_alive(int(name)):
            found.append(int(name))
    return found


def kill_marked(mark: str) -> None:
    """SIGKILL every live process marked ``mark`` (a test's cleanup)."""
    for pid in marked(mark):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def group_running(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie. A
    killed orphan stays in its group as a zombie until init reaps it, which
    some inits do only every few seconds; it runs nothing."""
    pids = [name for name in os.listdir("/proc") if name.isdigit()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone between the listing and the read
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
