"""The ``kigi-stream`` command's entry point, run before anything else is imported.

Importing ``kigi_tool_runtime`` takes about a tenth of a second, before any of
its handlers for the stop signals is in place. A Ctrl-C (SIGINT) then would
print a ``KeyboardInterrupt`` traceback and end the process by the signal;
here it ends the command as its own handlers do once in place: no traceback,
exit status 130 (128 + SIGINT). Nothing has started yet that would need
stopping. (SIGTERM and SIGHUP that early end the process by their default
action, as they would any program not yet running.)

A package of its own, outside ``kigi_tool_runtime``: importing anything inside
that package runs its ``__init__`` first, which is the slow part.
"""

from __future__ import annotations

import signal

__all__ = ("main",)

_EXIT_INTERRUPTED = 128 + signal.SIGINT


def main() -> int:
    """Run ``kigi-stream`` with this process's arguments; return its exit status."""
    try:
        from kigi_tool_runtime._cli._main import main as kigi_stream

        return kigi_stream()
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED
