"""How many bytes written to an output its reader has not read yet (the I/O
under ``_hold``).

Rule 1. A pipe reports the bytes it holds (``FIONREAD``, on either end); a Unix
        stream socket the bytes sent and not yet consumed by its peer
        (``SIOCOUTQ``, which for Unix sockets is released only when the peer
        has read them). Nothing else is asked: a file, a terminal or a TCP
        socket has no probe (``_hold`` Rule 3), and a probe that fails later
        answers ``None``, which ends a wait as if everything had been read.
Rule 2. The bytes a reader has not read are those the writer's own transport
        still buffers (:func:`buffered`) plus those the probe reports.
"""

from __future__ import annotations

import array
import fcntl
import os
import socket
import stat
import sys
import termios
from collections.abc import Callable
from typing import Any

__all__: tuple[str, ...] = ()

Probe = Callable[[], "int | None"]


def _ask(fd: int, request: int) -> int | None:
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, request, buf, True)
    except OSError:
        return None
    return buf[0]


def probe_for_fd(fd: int) -> Probe | None:
    """The unread-bytes probe of the output ``fd`` (Rule 1), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None  # the semantics above are Linux's
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        request = termios.FIONREAD
    elif stat.S_ISSOCK(mode):
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                family, kind = sock.family, sock.type
        except OSError:
            return None
        if family != socket.AF_UNIX or kind != socket.SOCK_STREAM:
            return None
        request = termios.TIOCOUTQ  # SIOCOUTQ
    else:
        return None
    if _ask(fd, request) is None:
        return None
    return lambda: _ask(fd, request)


def unread_probe(sink: Any) -> Probe | None:
    """The probe of a writer's output: the ``pipe`` an asyncio write transport
    writes to, when it has one (Rule 1)."""
    transport = getattr(sink, "transport", None)
    get_extra = getattr(transport, "get_extra_info", None)
    pipe = get_extra("pipe") if get_extra is not None else None
    fileno = getattr(pipe, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = fileno()
    except (OSError, ValueError):
        return None
    return probe_for_fd(fd) if isinstance(fd, int) else None


def buffered(sink: Any) -> int | None:
    """Bytes the writer's transport holds unwritten, when it can say."""
    size = getattr(getattr(sink, "transport", None), "get_write_buffer_size", None)
    return None if size is None else int(size())
