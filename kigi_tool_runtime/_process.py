"""Child processes: spawn one in its own process group, contain what it starts,
widen a pipe, stop it all.

Invariants:

Rule 1. :func:`spawn_in_group` starts the child in a new session, so it leads
        its own process group (its pid is the group id, the name every other
        function here takes). Held (the default), the child is contained:
        every process it starts, through any number of forks, ``timeout``,
        ``set -m``, ``setsid`` or ``nohup ... &``, is found and stopped with it
        (Rule 5).
Rule 2. :func:`stop_group` always ends with the contained processes SIGKILLed,
        even when its wait is cancelled: what it was asked to stop never
        outlives the call. SIGTERM comes first (with SIGCONT, so a stopped
        process sees it), and SIGKILL after at most ``grace`` seconds. The
        child is then reaped by the call, or, when the call was cancelled, by
        the event loop's child watcher. The wait ends as soon as nothing of it
        runs: a zombie left to init (which may reap orphans seconds later)
        runs nothing, so it does not hold the wait to its grace.
Rule 3. Signalling a group that is gone is not an error.
Rule 4. A held group dies with this process, however this process dies
        (SIGKILL included), until it is given to :func:`release`: a helper
        process (``_lifeline.py``) holds a pipe whose write end only this
        process holds, and kills every command still held once that pipe
        ends. The helper is started once, on the first spawn (off the event
        loop), and kept: a hold is a line written to its pipe, no process
        start. A helper that dies (killed, out of memory) is noticed by a
        thread waiting on it, replaced, and told every command still held.
        A helper that stops reading (its pipe full) is killed and replaced so.
Rule 5. Containment, Linux with a writable cgroup v2 (measured: as root, or
        in a delegated subtree): on the first spawn this process moves itself
        into ``kigi-PID-*/spawner`` below its own cgroup, so a child it forks
        starts in a cgroup the helper kills if this process dies, before the
        child runs anything; the spawn then moves the child into
        ``kigi-PID-*/gPGID``, which everything it starts inherits and cannot
        leave. Stopping signals every process in that cgroup and ends with
        ``cgroup.kill``. Without a writable cgroup (another user's cgroup, no
        cgroup v2): the group, every process of the child's session (only
        ``setsid`` leaves it) and, while their chain of parents holds, the
        child's descendants; the helper kills the group and the session, and a
        child the process dies within microseconds of spawning may run on.
        Elsewhere (macOS, no ``/proc``): the process group alone.
Rule 6. :func:`release` lets a held group go: what still runs of it (a
        background process that outlived a normal exit) is moved out of its
        cgroup to this process's first one, and outlives this process.

Used by the shell tool (each command it runs, held while it runs, stopped on
timeout and cancellation) and by ``Client.spawn`` (the server it starts, not
held, stopped by ``Client.aclose``; ``drained`` there is the task reading the
server's replies).

Not Linux's ``PR_SET_PDEATHSIG``: that needs code run in the child between
fork and exec, which Python offers only through ``preexec_fn``, unsafe in a
process with threads and slow (it forces a full ``fork``: 5 ms a spawn
measured, against 0.9 ms); it fires when the *thread* that forked exits; and
it reaches the child alone. Not ``PR_SET_CHILD_SUBREAPER``: orphans would
become this process's children, which the event loop's child watcher does not
reap, and they could not be told apart by command. The starter also stops a
group itself whenever it can (the shell tool on timeout and cancellation, the
client when it closes); a kigi server whose client died without closing sees
end of input and stops by itself.

POSIX only: process groups and ``killpg``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sys
import threading
import time
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

#: Rounds of moving what a child started before it left the spawner (each
#: round moves what the last one found; what those forked meanwhile is found by
#: the next). A shell's first few forks take fewer.
SWEEP_ROUNDS: Final = 4

#: Seconds between two attempts to start a helper the system refused (out of
#: processes or memory): often enough to be back soon, rare enough not to spin.
RESTART_WAIT_S: Final = 0.5


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


def _pg_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)  # a zombie member answers too
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _lifeline.group_runs(pgid)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member that runs (one this
    process may not signal counts; a zombie, exited and waiting for its
    reaper, does not: Rule 2), or, held here, any process it contains
    (Rule 5)."""
    return _pg_alive(pgid) or _LIFELINE.contains_any(pgid)


def _own_cgroup() -> str | None:
    """The directory of this process's cgroup v2, if one is mounted."""
    try:
        with open("/proc/self/cgroup") as lines:
            path = next((line[3:].strip() for line in lines if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as mounts:
            for mount in mounts:
                fields = mount.split()
                dash = fields.index("-")
                if fields[dash + 1] == "cgroup2" and path is not None:
                    root, point = fields[3], fields[4]
                    if path == root or path.startswith(root.rstrip("/") + "/"):
                        return point + "/" + path[len(root) :].strip("/")
    except (OSError, ValueError, IndexError):
        return None
    return None


def _make_cgroup() -> tuple[str, str]:
    """Rule 5: ``(BASE, HOME)`` with this process moved into ``BASE/spawner``;
    ``("", "")`` when no cgroup can be made (nothing is left behind)."""
    home = _own_cgroup()
    if home is None or not os.access(home, os.W_OK):
        return "", ""
    home = home.rstrip("/")
    base = f"{home}/kigi-{os.getpid()}-{os.urandom(3).hex()}"
    try:
        os.mkdir(base)
        os.mkdir(f"{base}/{_lifeline.SPAWNER}")
        _lifeline.move_to_cgroup(f"{base}/{_lifeline.SPAWNER}", os.getpid())
    except OSError:
        with contextlib.suppress(OSError):
            _lifeline.move_to_cgroup(home, os.getpid())
        _lifeline.remove_cgroups(base)
        return "", ""
    return base, home


class _Lifeline:
    """This process's end of the lifeline (Rule 4) and its containment (Rule
    5): the helper, the pipe's write end, the cgroup, and the groups held
    (kept here too, so a replaced helper is told them all)."""

    def __init__(self) -> None:
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()
        self._started = False
        self._base = ""
        self._home = ""
        self._fd = -1
        self._pid = 0
        self._groups: set[int] = set()
        self._warned = False
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """In a child forked without exec: none of the groups is its own, and
        neither is the helper or the write end it inherited (Rule 4)."""
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._pid = 0
        self._started = False
        self._base = self._home = ""
        self._groups = set()

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Make the cgroup and start the helper, once (blocking: run it off
        the event loop). Without a helper, a ``RuntimeWarning`` says so once."""
        with self._start_lock:
            if self._started:
                return
            self._base, self._home = _make_cgroup()
            started = self._spawn_helper()
            if started is None:
                self._warn("cannot start the process lifeline")
            else:
                self._adopt(*started)
            self._started = True
            threading.Thread(target=self._watch, name="kigi lifeline watch", daemon=True).start()

    def _warn(self, problem: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"{problem}: commands started here will outlive this process if it is killed",
                RuntimeWarning,
                stacklevel=4,
            )

    def _spawn_helper(self) -> tuple[int, int] | None:
        """A new helper's ``(pid, write end)``, or ``None`` when the system
        refused it. No Python code runs between its fork and exec."""
        read_fd, write_fd = os.pipe()  # neither end is inherited by default
        target = 3 if read_fd != 3 else 4  # a dup2 onto itself keeps close-on-exec
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", _lifeline.__file__, str(target), *self.roots()],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_fd, target),
                    # No stream of this process is held open by it.
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                # Out of this process's group and session: what stops them
                # (a terminal's Ctrl-C, a kill of the group) leaves it to act.
                setsid=True,
            )
        except (OSError, ValueError):
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        return pid, write_fd

    def _adopt(self, pid: int, fd: int) -> None:
        """Make a new helper the one written to, told every held group first."""
        with self._lock:
            told = b"".join(b"+%d\n" % pgid for pgid in sorted(self._groups))
            with contextlib.suppress(OSError):  # dead already: replaced again
                view = memoryview(told)
                while view:  # blocking: a fresh pipe, and never on the loop
                    view = view[os.write(fd, view) :]
            os.set_blocking(fd, False)
            self._pid, self._fd = pid, fd

    def _watch(self) -> None:
        """The thread that notices a helper's death and replaces it (Rule 4)."""
        while True:
            pid = self._pid
            if pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                with self._lock:
                    if self._pid != pid:
                        return  # forked: not this process's helper
                    os.close(self._fd)
                    self._fd, self._pid = -1, 0
            started = self._spawn_helper()
            if started is None:
                self._warn("cannot restart the process lifeline")
                time.sleep(RESTART_WAIT_S)
            else:
                self._adopt(*started)

    def _send(self, line: bytes) -> None:
        """Write ``line`` to the helper (the lock is held). Without one (it
        died and is being replaced), the replacement is told the set instead."""
        if self._fd < 0:
            return
        try:
            os.write(self._fd, line)  # one line: below PIPE_BUF, all or nothing
        except BlockingIOError:
            # 64 KiB unread: the helper is stopped. As good as dead: replaced.
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
        except OSError:
            pass  # it died: the watch thread replaces it

    def hold(self, pgid: int) -> None:
        if not self._started:
            self.start()
        with self._lock:
            if pgid in self._groups:
                return
            self._groups.add(pgid)
            self._send(b"+%d\n" % pgid)  # before it leaves the spawner (Rule 5)
            if self._base:
                where = _lifeline.group_dir(self._base, pgid)
                with contextlib.suppress(OSError):  # a stale one of the same id
                    os.mkdir(where)
                with contextlib.suppress(OSError):  # it exited already
                    _lifeline.move_to_cgroup(where, pgid)
                self._sweep(pgid)

    def _sweep(self, pgid: int) -> None:
        """Move what the child held as ``pgid`` started before it left the
        spawner (its session, its descendants) after it (the lock is held). A
        process it started that left its session and lost its parent in that
        first moment cannot be told apart: it stays in the spawner, killed
        with this process (Rule 5)."""
        spawner = f"{self._base}/{_lifeline.SPAWNER}"
        where = _lifeline.group_dir(self._base, pgid)
        own = os.getpid()
        for _ in range(SWEEP_ROUNDS):
            strays = [pid for pid in _lifeline.cgroup_pids(spawner) if pid != own]
            if not strays:
                return
            table = {}
            for pid in [*strays, *_lifeline.cgroup_pids(where)]:
                row = _lifeline.read_stat(pid)
                if row is not None:
                    table[pid] = row
            ours = _lifeline.descendants({pid: row[0] for pid, row in table.items()}, pgid)
            mine = [pid for pid in strays if pid in ours or table.get(pid, (0, 0, 0))[2] == pgid]
            if not mine:
                return
            for pid in mine:
                with contextlib.suppress(OSError):
                    _lifeline.move_to_cgroup(where, pid)

    def leave(self, pid: int) -> None:
        """A child not held: out of the spawner, so this process's death does
        not take it (Rule 5)."""
        if self._base:
            with contextlib.suppress(OSError):
                _lifeline.move_to_cgroup(self._home, pid)

    def release(self, pgid: int) -> None:
        with self._lock:
            if pgid not in self._groups:
                return
            self._groups.discard(pgid)
            self._send(b"-%d\n" % pgid)
            if self._base:
                where = _lifeline.group_dir(self._base, pgid)
                for _ in range(3):  # Rule 6; a fork meanwhile is moved next round
                    pids = _lifeline.cgroup_pids(where)
                    if not pids:
                        break
                    for pid in pids:
                        with contextlib.suppress(OSError):
                            _lifeline.move_to_cgroup(self._home, pid)
                _lifeline.remove_cgroups(where)

    def members(self, pgid: int, proc_pid: int) -> list[int] | None:
        """The processes held as ``pgid`` beyond its group (Rule 5), or ``None``
        when it is not held here."""
        if pgid not in self._groups:
            return None
        if self._base:
            with self._lock:
                self._sweep(pgid)
            return _lifeline.cgroup_pids(_lifeline.group_dir(self._base, pgid))
        table = _lifeline.scan_proc()
        found = {pid for pid, (_, pgrp, session) in table.items() if pgid in (pgrp, session)}
        found |= _lifeline.descendants({pid: row[0] for pid, row in table.items()}, proc_pid)
        return sorted(found)

    def contains_any(self, pgid: int) -> bool:
        """Whether a process held as ``pgid`` still runs, beyond its group."""
        if pgid not in self._groups:
            return False
        if self._base:
            return _lifeline.cgroup_populated(_lifeline.group_dir(self._base, pgid))
        return bool(self.members(pgid, pgid))

    def kill(self, pgid: int, proc_pid: int) -> None:
        """SIGKILL everything held as ``pgid`` (Rule 2)."""
        signal_group(pgid, signal.SIGKILL)
        if pgid in self._groups and self._base:
            with self._lock:
                self._sweep(pgid)
            _lifeline.kill_cgroup(_lifeline.group_dir(self._base, pgid))
            return
        for pid in self.members(pgid, proc_pid) or ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def signal(self, pgid: int, proc_pid: int, sig: int) -> None:
        """Send ``sig`` to the group and to everything held as ``pgid``."""
        signal_group(pgid, sig)
        for pid in self.members(pgid, proc_pid) or ():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def roots(self) -> tuple[str, str]:
        """The helper's ``BASE`` and ``HOME`` (both empty without a cgroup)."""
        return self._base, self._home

    def helper_pid(self) -> int | None:
        """The helper's pid while one runs (for tests)."""
        return self._pid or None

    def cgroup(self) -> str:
        """The cgroup ``BASE`` (empty without one; for tests and the README)."""
        return self._base


_LIFELINE: Final = _Lifeline()


async def spawn_in_group(
    *argv: str, held: bool = True, **kwargs: Any
) -> asyncio.subprocess.Process:
    """Start ``argv`` as the leader of a new process group (Rule 1); ``kwargs``
    go to :func:`asyncio.create_subprocess_exec`. ``held`` (the default), it
    is contained and held (Rules 4 and 5) from before it can run anything
    until :func:`release`; the first held spawn starts the lifeline, in a
    thread.

    Raises:
        OSError: the program could not be started.
        ValueError: an argument or variable holds a NUL byte, or a variable
            name an ``=``.
    """
    if held and not _LIFELINE.started:
        await asyncio.get_running_loop().run_in_executor(None, _LIFELINE.start)
    proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)
    if held:
        _LIFELINE.hold(proc.pid)
    else:
        _LIFELINE.leave(proc.pid)
    return proc


async def stop_group(
    proc: asyncio.subprocess.Process,
    grace: float,
    poll: float = KILL_POLL_S,
    *,
    drained: asyncio.Future[Any] | None = None,
) -> None:
    """SIGTERM (and SIGCONT) the group ``proc`` leads and everything it
    contains, wait up to ``grace`` seconds for ``proc`` to exit and all of it
    to end, then SIGKILL whatever is left and reap ``proc`` (Rule 2;
    cancelled, it still sends the SIGKILL and leaves the reaping to the event
    loop's child watcher).

    ``drained``, when given, is waited for too within the same ``grace`` (say
    the task reading what the group writes while it stops, so that output is
    read before the caller gives up on it); it is never cancelled here.
    """
    loop = asyncio.get_running_loop()
    pgid = proc.pid  # Rule 1: the child leads its own group
    _LIFELINE.signal(pgid, proc.pid, signal.SIGTERM)
    # A stopped process would keep SIGTERM pending until continued.
    _LIFELINE.signal(pgid, proc.pid, signal.SIGCONT)
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
        # Sent even if this wait is cancelled: nothing of it may outlive the call.
        _LIFELINE.kill(pgid, proc.pid)
    await proc.wait()


def hold(pgid: int) -> None:
    """Make process group ``pgid`` die with this process until :func:`release`
    (Rule 4); :func:`spawn_in_group` has done it already for a child it
    started held. Best effort: when the helper cannot start, a
    ``RuntimeWarning`` says so once."""
    _LIFELINE.hold(pgid)


def release(pgid: int) -> None:
    """Stop holding ``pgid``: what still runs of it may outlive this process
    (Rule 6)."""
    _LIFELINE.release(pgid)


def lifeline_pid() -> int | None:
    """The pid of the lifeline's helper while one runs."""
    return _LIFELINE.helper_pid()


def lifeline_cgroup() -> str:
    """The cgroup this process's commands are contained in (empty without
    one: Rule 5's fallback)."""
    return _LIFELINE.cgroup()
