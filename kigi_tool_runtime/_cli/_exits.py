"""How kigi-stream's commands end: the exit statuses they share, the usage
error (status 2), and stdout closed under a command (status 141)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Final

__all__ = ()

#: Exit status for bad usage (argparse's own convention).
EXIT_USAGE: Final = 2
#: Exit status when ``--timeout`` stopped the command (``timeout(1)``'s convention).
EXIT_TIMEOUT: Final = 124
#: Exit status when the command could not be started (the shell's convention).
EXIT_CANNOT_START: Final = 127
#: Exit status on Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
#: Exit status when our stdout was closed under us (128 + SIGPIPE).
EXIT_PIPE_CLOSED: Final = 128 + signal.SIGPIPE
#: Exit status for any other failed call.
EXIT_FAILED: Final = 1


class UsageError(Exception):
    """Raised for bad usage the parser cannot see (exit status 2)."""


def stdout_closed() -> int:
    """Point stdout at /dev/null, so the flush at exit cannot fail again (nor
    print a traceback), and return the closed-pipe exit status."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return EXIT_PIPE_CLOSED
