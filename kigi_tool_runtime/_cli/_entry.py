"""The ``kigi-stream`` command's entry point, run before anything else is imported.

Importing ``kigi_tool_runtime`` takes about a tenth of a second, before any of
its handlers for the stop signals is in place. A Ctrl-C (SIGINT) then would
print a ``KeyboardInterrupt`` traceback and end the process by the signal;
here it ends the command as its own handlers do once in place: no traceback,
exit status 130 (128 + SIGINT). Nothing has started yet that would need
stopping. (SIGTERM and SIGHUP that early end the process by their default
action, as they would any program not yet running.)

Importing this module runs the ``__init__`` of ``kigi_tool_runtime`` and of
``kigi_tool_runtime._cli`` first; both import nothing (the package's names are
loaded on first use), so this handler is in place before the slow part starts.
A test (``tests/test_entry.py``) keeps it so.
"""

from __future__ import annotations

import signal

__all__ = ()

_EXIT_INTERRUPTED = 128 + signal.SIGINT


def main() -> int:
    """Run ``kigi-stream`` with this process's arguments; return its exit status."""
    try:
        from ._main import main as kigi_stream

        return kigi_stream()
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED
