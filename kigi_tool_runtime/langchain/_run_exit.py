"""Stopping a call when the sync LangGraph run it serves is left: a closed
``graph.stream`` generator, or an exception out of its consumer.

Invariants:

Rule 1. A sync run runs its tools in worker threads and, on leaving (its
        stream generator closed mid-run), waits for every one of them before
        ``close()`` returns; a thread cannot be cancelled. So each call of a
        sync run registers a stop on the run's loop: when the loop exits, a
        call still running is cancelled (its command's process group stopped)
        first, and the wait that follows is short. A call that has ended is
        left alone (the registration holds it weakly).
Rule 2. The loop's ``ExitStack`` (unwound on exit, after what is pushed last
        and before the executor it entered first) is found through LangGraph
        1.x internals, read only in ``_privates`` (Rule 2 there). When it is
        not found (an async run, whose ``aclose`` cancels its tasks itself;
        another release, said by one ``RuntimeWarning``), nothing is
        registered and the call runs as before, to its own deadline at most.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from ._privates import run_stack

__all__: tuple[str, ...] = ()


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def stop_when_run_exits(config: Any, call: Cancellable) -> bool:
    """Cancel ``call`` when the sync run of the task ``config`` exits, if it
    still runs then (Rule 1). False when the run's loop was not found."""
    stack = run_stack(config)
    if stack is None:
        return False
    ref = weakref.ref(call)

    def stop() -> None:
        running = ref()
        if running is not None:
            running.cancel()

    stack.callback(stop)
    return True
