"""A frame log as ``follow`` and ``check`` read it: a file, or a pipe to read
once, blank lines (counted, no record), an unterminated last line, and an
anomaly in words."""

from __future__ import annotations

import os
import stat
import sys
from typing import IO, Final

from .._consumer._loss import Anomaly
from .._text import plural
from .._wire._split import OversizedLine
from ._exits import UsageError

__all__ = ()

_SPACES: Final = (b" ", b"\t", b"\r")


def describe(anomaly: Anomaly) -> str:
    """``kind [CALL/SUBKIND]: detail``, as ``follow`` and ``check`` print an anomaly."""
    where = f" [{anomaly.key.tool_call_id}/{anomaly.key.subkind}]" if anomaly.key else ""
    return f"{anomaly.kind}{where}: {anomaly.detail}"


def log_source(name: str, command: str) -> str | None:
    """The path to read ``name`` from as a file, or ``None`` for a pipe
    (``-``, a FIFO, a terminal: no offsets) read once to its end.

    Raises:
        UsageError: ``name`` is a directory, or nothing exists at it.
    """
    if name == "-":
        return None
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise UsageError(f"no such file: {name!r}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {name!r}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(
            f"{name!r} is a directory; {command} reads a frame log file (- for standard input)"
        )
    return name if stat.S_ISREG(info.st_mode) else None


def open_log(name: str) -> IO[bytes]:
    """``name`` (``-``: a duplicate of stdin) opened for unbuffered reading.

    Raises:
        UsageError: it cannot be opened.
    """
    if name == "-":
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    try:
        return open(name, "rb", buffering=0)
    except OSError as exc:
        raise UsageError(f"cannot read {name!r}: {exc.strerror}") from None


def unterminated(rest: bytes | OversizedLine) -> str:
    """What is said of a last line without a newline (``rest``)."""
    size = rest.size if isinstance(rest, OversizedLine) else len(rest)
    return (
        f"unterminated: the last line ({plural(size, 'byte', 'bytes')}) has no newline,"
        " so it was not read as a record (a frame log ends every record with one)"
    )


def blank(line: bytes | OversizedLine) -> bool:
    """An empty line, or one of only JSON whitespace: no record (it holds no
    value), but it counts in the line numbers."""
    return not isinstance(line, OversizedLine) and (
        not line or (line[:1] in _SPACES and not line.strip(b" \t\r"))
    )
