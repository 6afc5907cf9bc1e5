"""The process module: real children in their own groups, stopped within deadlines."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from processes import pid_alive

from kigi_tool_runtime._process import (
    PIPE_BYTES,
    group_alive,
    signal_group,
    signal_name,
    spawn_in_group,
    stop_group,
    widen_pipe,
)

DEADLINE_S = 20.0

# A child that starts a grandchild in its group, prints the grandchild's pid,
# and then waits; with IGNORE set both ignore SIGTERM.
_FAMILY = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time\\n"
    "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "time.sleep(60)", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(60)
"""


async def _group_gone(pgid: int) -> bool:
    """Whether the group empties within 5 s (a killed member stays a zombie
    until its new parent reaps it)."""
    deadline = time.monotonic() + 5.0
    while group_alive(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return not group_alive(pgid)


async def _family(mode: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await spawn_in_group(
        sys.executable, "-c", _FAMILY, mode, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    grandchild = int(await proc.stdout.readline())
    return proc, grandchild


def test_signal_name_names_known_and_unknown_numbers() -> None:
    """A known number gets its name, any other number says so."""
    assert signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(15) == "SIGTERM"
    assert signal_name(250) == "signal 250"


def test_signal_group_of_a_gone_group_is_quiet_and_not_alive() -> None:
    """A group whose processes all exited is not alive, and signalling it is no error."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(timeout=DEADLINE_S)
    assert not group_alive(proc.pid)
    signal_group(proc.pid, signal.SIGTERM)


def test_spawn_in_group_makes_the_child_a_group_leader() -> None:
    """The spawned child leads its own group and session, apart from ours."""

    async def main() -> None:
        proc = await spawn_in_group(sys.executable, "-c", "import time; time.sleep(60)")
        try:
            assert os.getpgid(proc.pid) == proc.pid
            assert os.getsid(proc.pid) == proc.pid
            assert os.getpgid(proc.pid) != os.getpgid(0)
            assert group_alive(proc.pid)
        finally:
            await stop_group(proc, 1.0)
        assert proc.returncode == -signal.SIGTERM
        assert not group_alive(proc.pid)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_ends_a_polite_group_with_sigterm_before_the_grace() -> None:
    """A group that obeys SIGTERM is gone, grandchild too, long before the grace ends."""

    async def main() -> None:
        proc, grandchild = await _family("obey")
        started = time.monotonic()
        await stop_group(proc, 30.0)
        assert time.monotonic() - started < 10.0
        assert proc.returncode == -signal.SIGTERM
        assert await _group_gone(proc.pid)
        assert not pid_alive(grandchild)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_kills_a_group_that_ignores_sigterm_after_the_grace() -> None:
    """A group that ignores SIGTERM gets SIGKILL once the grace is over, grandchild too."""

    async def main() -> None:
        proc, grandchild = await _family("ignore")
        started = time.monotonic()
        await stop_group(proc, 0.3)
        assert time.monotonic() - started >= 0.3
        assert proc.returncode == -signal.SIGKILL
        assert await _group_gone(proc.pid)
        assert not pid_alive(grandchild)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_ends_a_stopped_process_with_sigterm() -> None:
    """A stopped (SIGSTOP) child is continued, so SIGTERM ends it, not SIGKILL."""

    async def main() -> None:
        proc = await spawn_in_group(sys.executable, "-c", "import time; time.sleep(60)")
        os.kill(proc.pid, signal.SIGSTOP)
        await stop_group(proc, 5.0)
        assert proc.returncode == -signal.SIGTERM

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_kills_the_group_when_its_wait_is_cancelled() -> None:
    """A cancelled stop still SIGKILLs the group: it never outlives the call."""

    async def main() -> None:
        proc, grandchild = await _family("ignore")
        stopping = asyncio.create_task(stop_group(proc, 30.0))
        await asyncio.sleep(0.2)
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert await asyncio.wait_for(proc.wait(), 5.0) == -signal.SIGKILL
        assert await _group_gone(proc.pid)
        assert not pid_alive(grandchild)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_waits_for_drained_beside_the_exit() -> None:
    """With ``drained``, the stop lasts until that future is done too (here set
    well after the group has gone), and leaves it uncancelled."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        proc = await spawn_in_group(sys.executable, "-c", "import time; time.sleep(60)")
        drained: asyncio.Future[None] = loop.create_future()
        loop.call_later(0.5, drained.set_result, None)
        await stop_group(proc, 30.0, drained=drained)
        assert drained.done()
        assert not drained.cancelled()
        assert proc.returncode == -signal.SIGTERM

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_stop_group_gives_up_on_drained_at_the_grace() -> None:
    """A ``drained`` future never done holds the stop no longer than the grace:
    the group is SIGKILLed and the call returns, the future untouched."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        proc, grandchild = await _family("ignore")
        drained: asyncio.Future[None] = loop.create_future()
        started = time.monotonic()
        await stop_group(proc, 0.3, drained=drained)
        assert time.monotonic() - started >= 0.3
        assert not drained.done()
        assert proc.returncode == -signal.SIGKILL
        assert await _group_gone(proc.pid)
        assert not pid_alive(grandchild)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux only")
def test_widen_pipe_sets_the_size_asked_for_when_allowed() -> None:
    """On Linux a pipe gets PIPE_BYTES (or stays as it was past pipe-max-size)."""
    import fcntl

    with open("/proc/sys/fs/pipe-max-size") as limit:
        allowed = int(limit.read())
    read_fd, write_fd = os.pipe()
    try:
        before = fcntl.fcntl(read_fd, fcntl.F_GETPIPE_SZ)
        widen_pipe(read_fd)
        size = fcntl.fcntl(read_fd, fcntl.F_GETPIPE_SZ)
        assert size == PIPE_BYTES if allowed >= PIPE_BYTES else size == before
        widen_pipe(read_fd, allowed * 2)  # refused: left as it was
        assert fcntl.fcntl(read_fd, fcntl.F_GETPIPE_SZ) == size
    finally:
        os.close(read_fd)
        os.close(write_fd)
