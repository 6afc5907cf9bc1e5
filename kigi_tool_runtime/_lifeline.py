"""The lifeline: process groups that die with the process that started them,
however it dies (SIGKILL included).

Invariants:

Rule 1. A helper process (this file, run as a program) holds the read end of
        a pipe whose write end only its starter holds. The starter writes
        ``+PGID`` when it starts a process group and ``-PGID`` when it is done
        with it, one line each; the helper keeps the set.
Rule 2. End of input on that pipe means the starter is gone (the kernel closes
        a dead process's descriptors, whatever killed it; the starter never
        closes it while alive): the helper sends SIGKILL to every group it
        still holds, then exits. Nothing in the dying process has to run.
Rule 3. Only a group id above 1 that is not the helper's own is ever held, so
        no line can make it signal init, every process (-1), or itself; a line
        it cannot read is skipped.

:class:`HeldGroups` is the helper's logic without I/O; :func:`main` is the
helper (it imports only ``contextlib``, ``os``, ``signal`` and ``sys``: it starts in
milliseconds, with ``python -I -S``, without importing this package).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

__all__ = ()


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


def main(argv: list[str]) -> int:
    """The helper: read ``argv[1]`` (the pipe's descriptor) to its end, then
    SIGKILL every group still held (Rule 2)."""
    fd = int(argv[1])
    # Its starter's terminal cannot reach it (it leads a session of its own);
    # a stray SIGINT or SIGHUP must not end it before its work is done.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    held = HeldGroups(os.getpgrp())
    while data := os.read(fd, 4096):
        held.feed(data)
    for pgid in held.groups:
        # A group gone already (or never ours to signal) is skipped.
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
