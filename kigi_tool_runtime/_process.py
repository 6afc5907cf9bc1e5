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

Rule 4. A group given to :func:`hold` dies with this process, however this
        process dies (SIGKILL included), until it is given to :func:`release`:
        a helper process holds a pipe whose write end only this process holds,
        and SIGKILLs every group it holds once that pipe ends (``_lifeline.py``).
        The helper runs, and the pipe is open, only while a group is held.
        The shell tool holds each command's group while it runs the command.

Not Linux's ``PR_SET_PDEATHSIG``: that needs code run in the child between
fork and exec, which Python offers only through ``preexec_fn``, unsafe in a
process with threads (the event loop's default executor and child watcher use
them); it fires when the *thread* that forked exits, not the process; and it
reaches the child alone, not the group it leads. The starter also stops a group
itself whenever it can (the shell tool on timeout and cancellation, the client
when it closes); a kigi server whose client died without closing sees end of
input and stops by itself. A process that forks without exec (``os.fork``,
multiprocessing's ``fork``) passes the lifeline's write end on: its groups then
die when the last of the two is gone.

POSIX only: process groups and ``killpg``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
import warnings
from typing import Any, Final

from . import _lifeline

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


class _Lifeline:
    """This process's end of the lifeline (Rule 4): the helper started on first
    use, the pipe's write end, and the groups held (kept here too, so a helper
    that died is replaced and told them all)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd = -1
        self._helper: subprocess.Popen[bytes] | None = None
        self._retired: list[subprocess.Popen[bytes]] = []  # ended, maybe not reaped
        self._groups: set[int] = set()
        self._warned = False
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """In a child forked without exec: none of the groups is its own, and
        the write end it inherited stays its parent's (Rule 4)."""
        self._lock = threading.Lock()
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._helper = None
        self._retired = []
        self._groups = set()

    def _start(self) -> bool:
        """Start the helper (the lock is held). False, with a warning once, when
        it cannot be started: the groups then die with this process only when
        it stops them itself."""
        read_fd, write_fd = os.pipe()  # neither end is inherited by default
        try:
            self._helper = subprocess.Popen(
                [sys.executable, "-I", "-S", _lifeline.__file__, str(read_fd)],
                # No stream of this process is held open by it.
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                pass_fds=(read_fd,),
                # Out of this process's group and session: what stops them
                # (a terminal's Ctrl-C, a kill of the group) leaves it to act.
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            os.close(read_fd)
            os.close(write_fd)
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"cannot start the process-group lifeline ({exc}): commands started"
                    " here will outlive this process if it is killed",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return False
        os.close(read_fd)
        self._fd = write_fd
        return True

    def _send(self, line: bytes) -> None:
        """Write ``line`` to the helper (the lock is held), starting or
        replacing it as needed; a replacement is told every held group."""
        for _ in range(2):
            if self._fd < 0:
                self._retire()
                if not self._start():
                    return
                line = b"".join(b"+%d\n" % pgid for pgid in self._groups) + line
            try:
                view = memoryview(line)
                while view:  # a replacement's list may pass the pipe's atomic size
                    view = view[os.write(self._fd, view) :]
                return
            except OSError:  # the helper died: replace it
                os.close(self._fd)
                self._fd = -1

    def _retire(self) -> None:
        """Let the helper go (the lock is held; its pipe is closed already, so
        it ends), and reap the helpers that have ended."""
        if self._helper is not None:
            self._retired.append(self._helper)
            self._helper = None
        self._retired = [helper for helper in self._retired if helper.poll() is None]

    def hold(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)
            self._send(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        with self._lock:
            if pgid in self._groups:
                self._groups.discard(pgid)
                self._send(b"-%d\n" % pgid)
                if not self._groups and self._fd >= 0:
                    # Nothing held: no helper, no descriptor (it reads the end
                    # of its pipe with nothing to stop, and exits).
                    os.close(self._fd)
                    self._fd = -1
                    self._retire()

    def helper_pid(self) -> int | None:
        """The helper's pid while one runs (for tests)."""
        helper = self._helper
        return None if helper is None or helper.poll() is not None else helper.pid


_LIFELINE: Final = _Lifeline()


def hold(pgid: int) -> None:
    """Make process group ``pgid`` die with this process until :func:`release`
    (Rule 4). Best effort: when the helper cannot start, a ``RuntimeWarning``
    says so once."""
    _LIFELINE.hold(pgid)


def release(pgid: int) -> None:
    """Stop holding ``pgid`` (its members, if any, may outlive this process)."""
    _LIFELINE.release(pgid)


def lifeline_pid() -> int | None:
    """The pid of the lifeline's helper while one runs."""
    return _LIFELINE.helper_pid()
