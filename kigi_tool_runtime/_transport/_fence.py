"""The stdio wire's own descriptors, out of user code's reach.

A server on stdin and stdout shares its process with the tools it serves, and
a tool's ``print`` (or ``sys.stdout.write``, ``os.write(1, ...)``, a thread
started when its module was imported, a child process it starts) writes to
descriptor 1: glued to a response line, it corrupts the wire, and the peer
never gets its answer. :func:`fence_stdio` moves the wire off descriptors 0 and
1 before anyone else can write there.

Rule 1. Once fenced, the wire is written to a private duplicate of descriptor
        1 and read from a private duplicate of descriptor 0, both
        non-inheritable (no child process gets them). Descriptor 1 then writes
        to stderr and ``sys.stdout`` is ``sys.stderr``: whatever user code
        prints, by any route, lands on stderr, never on the wire.
Rule 2. Descriptor 0 then reads ``/dev/null`` (``sys.stdin`` with it): user code
        that reads stdin (``input()``) gets end of input instead of taking the
        peer's requests.
Rule 3. Fencing is for the life of the process and happens once: a second call
        answers the same wire. It must come before user code is imported for
        an import's ``print`` (or a thread it starts) to be fenced too;
        ``kigi-stream serve`` fences before it imports ``--tools``.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

__all__ = ()


class StdioWire(NamedTuple):
    """The descriptors the stdio wire is read from (``input_fd``) and written to
    (``output_fd``), private to the server once :func:`fence_stdio` made them."""

    input_fd: int
    output_fd: int


_fenced: StdioWire | None = None


def fence_stdio() -> StdioWire:
    """Give the stdio wire descriptors of its own and point descriptor 1 at
    stderr and descriptor 0 at ``/dev/null`` (Rules 1-3); answer the wire.

    Raises:
        OSError: stdin or stdout is closed (nothing to serve on).
    """
    global _fenced
    if _fenced is not None:
        return _fenced
    if sys.stdout is not None:
        sys.stdout.flush()  # what was printed before the fence goes where it was meant to
    input_fd = os.dup(0)
    try:
        output_fd = os.dup(1)
    except OSError:
        os.close(input_fd)
        raise
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr either: what user code prints is thrown away
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    if sys.stderr is not None:
        sys.stdout = sys.stderr
    _fenced = StdioWire(input_fd, output_fd)
    return _fenced


def stdio_wire() -> StdioWire:
    """The wire: the fenced descriptors once :func:`fence_stdio` ran, else
    descriptors 0 and 1 themselves."""
    return StdioWire(0, 1) if _fenced is None else _fenced
