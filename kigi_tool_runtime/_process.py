"""Child processes: spawn one in its own process group, widen a pipe, stop a group.

Invariants:

Rule 1. :func:`spawn_in_group` starts the child in a new session, so it leads
        its own process group (its pid is the group id) and a signal sent to
        the group reaches every process it started that did not leave it.
Rule 2. :func:`stop_group` always ends with the group signalled SIGKILL, even
        when its wait is cancelled: a group it was asked to stop never
        outlives the call. SIGTERM comes first (with SIGCONT, so a stopped
        member sees it), and SIGKILL after at most ``grace`` seconds. The child
        is then reaped by the call, or, when the call was cancelled, by the
        event loop's child watcher.
Rule 3. Signalling a group that is gone is not an error.

Used by the shell tool (each command it runs, stopped on timeout and
cancellation) and by ``Client.spawn`` (the server it starts, stopped by
``Client.aclose``; ``drained`` there is the task reading the server's replies).

A child is not made to die with the process that started it (Linux
``PR_SET_PDEATHSIG``): that needs code run in the child between fork and exec,
which Python offers only through ``preexec_fn``, unsafe in a process with
threads (the event loop's default executor and child watcher use them). Its
starter stops the group itself instead (the shell tool on timeout and
cancellation, the client when it closes); a kigi server whose client died
without closing sees end of input and stops by itself.

POSIX only: process groups and ``killpg``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from typing import Any, Final

__all__ = ()

#: The pipe size asked for on Linux (``F_SETPIPE_SZ``; the default is 64 KiB): a
#: wider pipe moves a flood in fewer wake-ups of either process. Best effort: the
#: system limit (``/proc/sys/fs/pipe-max-size``, 1 MiB by default) may refuse it.
PIPE_BYTES: Final = 1024 * 1024

#: How often a terminating group is checked for having gone: short next to any
#: grace period, long enough not to spin.
KILL_POLL_S: Final = 0.02


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> None:
    """Ask for a pipe buffer of ``size`` bytes on ``fd`` (Linux only; elsewhere,
    or past the system's ``pipe-max-size``, the pipe is left as it is)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if set_size is not None:
        with contextlib.suppress(OSError):  # past the system's pipe-max-size
            fcntl.fcntl(fd, set_size, size)


def signal_name(number: int) -> str:
    """``"SIGKILL"`` for 9; ``"signal 77"`` for a number with no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is gone is skipped."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (one this process may
    not signal counts as alive)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def spawn_in_group(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``argv`` as the leader of a new process group (Rule 1); ``kwargs``
    go to :func:`asyncio.create_subprocess_exec`.

    Raises:
        OSError: the program could not be started.
        ValueError: an argument or variable holds a NUL byte, or a variable
            name an ``=``.
    """
    return await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)


async def stop_group(
    proc: asyncio.subprocess.Process,
    grace: float,
    poll: float = KILL_POLL_S,
    *,
    drained: asyncio.Future[Any] | None = None,
) -> None:
    """SIGTERM (and SIGCONT) the group ``proc`` leads, wait up to ``grace``
    seconds for ``proc`` to exit and the group to empty, then SIGKILL whatever
    is left and reap ``proc`` (Rule 2; cancelled, it still sends the SIGKILL
    and leaves the reaping to the event loop's child watcher).

    ``drained``, when given, is waited for too within the same ``grace`` (say
    the task reading what the group writes while it stops, so that output is
    read before the caller gives up on it); it is never cancelled here.
    """
    loop = asyncio.get_running_loop()
    pgid = proc.pid  # Rule 1: the child leads its own group
    signal_group(pgid, signal.SIGTERM)
    # A stopped process would keep SIGTERM pending until continued.
    signal_group(pgid, signal.SIGCONT)
    give_up = loop.time() + grace
    try:
        while loop.time() < give_up:
            if (
                proc.returncode is not None
                and not group_alive(pgid)
                and (drained is None or drained.done())
            ):
                break
            await asyncio.sleep(poll)
    finally:
        # Sent even if this wait is cancelled: the group must not outlive the call.
        signal_group(pgid, signal.SIGKILL)
    await proc.wait()
