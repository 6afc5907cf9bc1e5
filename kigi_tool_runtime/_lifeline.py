"""The lifeline: every process a command started dies with the process that
started it, however that process dies (SIGKILL included).

Invariants:

Rule 1. A helper process (this file, run as a program) holds the read end of
        a pipe whose write end only its starter holds. The starter writes
        ``+PGID`` when it starts a command (its process group id, the leader's
        pid) and ``-PGID`` when it is done with it, one line each; the helper
        keeps the set.
Rule 2. End of input on that pipe means the starter is gone (the kernel closes
        a dead process's descriptors, whatever killed it; the starter never
        closes it while alive): the helper SIGKILLs every command it still
        holds, then exits. Nothing in the dying process has to run.
Rule 3. Only a group id above 1 that is not the helper's own is ever held, so
        no line can make it signal init, every process (-1), or itself; a line
        it cannot read is skipped.
Rule 4. With a cgroup (``BASE`` given, Linux cgroup v2): a command held as
        PGID runs in ``BASE/g<PGID>`` with everything it starts, whatever
        session or group they move to; the starter itself runs in
        ``BASE/spawner``, so a command it forks is in a cgroup the helper
        kills from the fork on, before it can run anything. On end of input
        the helper kills ``g<PGID>`` of every held PGID and ``spawner``, then
        removes what it can of ``BASE``. The helper moves itself to ``HOME``
        (the starter's cgroup before it moved) first, out of what it kills.
Rule 5. Without a cgroup: each held group is killed, and so is every process
        whose session is a held PGID (``timeout``, ``set -m`` and ``nohup``
        children change group, not session; only ``setsid`` leaves it).

:class:`HeldGroups` is the helper's logic without I/O, :func:`parse_stat` and
:func:`descendants` the reading of ``/proc`` without I/O; :func:`main` is the
helper. It imports only ``contextlib``, ``os``, ``signal``, ``sys`` and
``time``: it starts in milliseconds, with ``python -I -S``, without importing
this package, whose process module imports the small I/O functions here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator, Mapping

__all__ = ()

#: The cgroup the starter runs in under ``BASE`` (Rule 4).
SPAWNER = "spawner"

#: Seconds the helper waits, after its kills, for the cgroups to empty before
#: it removes them (a killed process leaves its cgroup within milliseconds).
EMPTY_WAIT_S = 5.0


class HeldGroups:
    """The helper's set of process groups, fed the pipe's bytes as they come
    (lines may arrive split across reads). ``own`` is the helper's own group."""

    def __init__(self, own: int) -> None:
        self._own = own
        self._pending = b""
        self.groups: set[int] = set()

    def feed(self, data: bytes) -> None:
        """Apply every whole line in ``data`` (with what an earlier read left)."""
        *lines, self._pending = (self._pending + data).split(b"\n")
        if len(self._pending) > 32:
            self._pending = b""  # no id is this long: a stray line, skipped
        for line in lines:
            sign, digits = line[:1], line[1:]
            if sign not in (b"+", b"-") or not digits.isdigit() or len(digits) > 18:
                continue  # Rule 3: unreadable
            pgid = int(digits)
            if pgid <= 1 or pgid == self._own:
                continue  # Rule 3: never init, everything, or itself
            if sign == b"+":
                self.groups.add(pgid)
            else:
                self.groups.discard(pgid)


def group_dir(base: str, pgid: int) -> str:
    """The cgroup of the command held as ``pgid`` (Rule 4)."""
    return f"{base}/g{pgid}"


def parse_stat(text: str) -> tuple[int, int, int] | None:
    """``(ppid, pgrp, session)`` from a ``/proc/PID/stat`` line; ``None`` for a
    zombie (dead, only waiting to be reaped) or a line it cannot read. The
    command name may hold spaces and parentheses: the fields follow its last
    ``)``."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 4 or fields[0] == "Z":
        return None
    try:
        return int(fields[1]), int(fields[2]), int(fields[3])
    except ValueError:
        return None


def descendants(parents: Mapping[int, int], root: int) -> set[int]:
    """Every pid whose chain of parents in ``parents`` (pid to ppid) reaches
    ``root``, ``root`` excluded."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != root:
                found.add(child)
                todo.append(child)
    return found


def read_stat(pid: int) -> tuple[int, int, int] | None:
    """Process ``pid``'s ``(ppid, pgrp, session)``; ``None`` when it is gone or
    a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return parse_stat(stat.read().decode("utf-8", "replace"))
    except OSError:
        return None


def _live_stats(names: Iterable[str]) -> Iterator[tuple[int, tuple[int, int, int]]]:
    """Each live process among the ``/proc`` entries ``names``, with its
    ``(ppid, pgrp, session)``."""
    for name in names:
        fields = read_stat(int(name)) if name.isdigit() else None
        if fields is not None:
            yield int(name), fields


def scan_proc() -> dict[int, tuple[int, int, int]]:
    """Every live process's ``(ppid, pgrp, session)`` (empty without ``/proc``)."""
    try:
        return dict(_live_stats(os.listdir("/proc")))
    except OSError:
        return {}


def group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs: a zombie (dead, only waiting
    for its reaper, which for an orphan is init, that may take seconds) does
    not. Without ``/proc``, ``True``: there is nothing to tell them apart by."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    return any(fields[1] == pgid for _, fields in _live_stats(names))


def cgroup_pids(path: str) -> list[int]:
    """The processes in cgroup ``path`` and the cgroups below it."""
    pids: list[int] = []
    for where, _, _ in os.walk(path):
        with contextlib.suppress(OSError, ValueError), open(f"{where}/cgroup.procs") as procs:
            pids.extend(int(line) for line in procs.read().split())
    return pids


def cgroup_populated(path: str) -> bool:
    """Whether a process runs in cgroup ``path`` or below it (a cgroup that is
    gone or cannot be read holds none)."""
    try:
        with open(f"{path}/cgroup.events") as events:
            return "populated 1" in events.read()
    except OSError:
        return False


def kill_cgroup(path: str) -> None:
    """SIGKILL everything in cgroup ``path`` and below it: ``cgroup.kill`` (Linux
    5.14), which no fork escapes; on an older kernel, each process listed, a
    few rounds over (a fork between the listing and the kill is caught by the
    next round)."""
    try:
        with open(f"{path}/cgroup.kill", "w") as kill:
            kill.write("1")
        return
    except FileNotFoundError:
        if not os.path.isdir(path):
            return  # no such cgroup
    except OSError:
        pass
    for _ in range(8):
        pids = cgroup_pids(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def move_to_cgroup(path: str, pid: int) -> None:
    """Move process ``pid`` (0: the caller) into cgroup ``path``.

    Raises:
        OSError: the cgroup is gone, or refuses the process.
    """
    fd = os.open(f"{path}/cgroup.procs", os.O_WRONLY)
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def remove_cgroups(path: str) -> bool:
    """Remove cgroup ``path`` and the cgroups below it, deepest first; a
    populated one is left (with those above it). Whether ``path`` is gone."""
    for where, _, _ in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(where)
    return not os.path.isdir(path)


def kill_sessions(sessions: Iterable[int]) -> None:
    """SIGKILL every process whose session is one of ``sessions`` (Rule 5)."""
    wanted = set(sessions)
    if not wanted:
        return
    for pid, (_, _, session) in scan_proc().items():
        if session in wanted:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def kill_held(groups: Iterable[int], base: str) -> None:
    """SIGKILL every held command: its group, its cgroup (Rule 4) or, without
    one, its session (Rule 5); and with a cgroup, the starter's too."""
    groups = sorted(groups)
    for pgid in groups:
        with contextlib.suppress(OSError):  # gone already, or never ours
            os.killpg(pgid, signal.SIGKILL)
    if base:
        for pgid in groups:
            kill_cgroup(group_dir(base, pgid))
        kill_cgroup(f"{base}/{SPAWNER}")
    else:
        kill_sessions(groups)


def main(argv: list[str]) -> int:
    """The helper: ``argv[1]`` is the pipe's descriptor, ``argv[2]`` the
    starter's cgroup ``BASE`` and ``argv[3]`` its ``HOME`` (both empty without
    a cgroup). Read the pipe to its end, then kill every command still held
    (Rules 2, 4 and 5)."""
    fd, base, home = int(argv[1]), argv[2], argv[3]
    os.chdir("/")
    # Its starter's terminal cannot reach it (it leads a session of its own);
    # a stray SIGINT or SIGHUP must not end it before its work is done.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    if home:
        with contextlib.suppress(OSError):  # Rule 4: out of what it kills
            move_to_cgroup(home, 0)
    held = HeldGroups(os.getpgrp())
    while data := os.read(fd, 4096):
        held.feed(data)
    kill_held(held.groups, base)
    if base:
        give_up = time.monotonic() + EMPTY_WAIT_S
        while not remove_cgroups(base) and time.monotonic() < give_up:
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
