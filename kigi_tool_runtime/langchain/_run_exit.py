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
Rule 2. The loop is found through LangGraph 1.x internals (the task config's
        ``__pregel_call``, whose ``schedule_task`` is a method of the run's
        ``SyncPregelLoop``, whose ``stack`` is the ``ExitStack`` it unwinds on
        exit, after what is pushed last and before the executor it entered
        first). When it is not found (another release, an async run, whose
        ``aclose`` cancels its tasks itself), nothing is registered and the
        call runs as before. The public hook this would need: a callback of
        the run's end, or a cancellation signal for sync tasks.
"""

from __future__ import annotations

import weakref
from contextlib import ExitStack
from typing import Any, Final, Protocol

__all__: tuple[str, ...] = ()

#: The task config key LangGraph 1.x keeps its call hook under (Rule 2).
_CONFIG_KEY_CALL: Final = "__pregel_call"


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def _run_stack(config: Any) -> ExitStack | None:
    """The ``ExitStack`` of the sync loop running the task ``config`` belongs
    to, or ``None`` (Rule 2)."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    call = configurable.get(_CONFIG_KEY_CALL) if isinstance(configurable, dict) else None
    keywords = getattr(call, "keywords", None)
    schedule = keywords.get("schedule_task") if isinstance(keywords, dict) else None
    loop = getattr(schedule, "__self__", None)
    stack = getattr(loop, "stack", None)
    return stack if isinstance(stack, ExitStack) else None


def stop_when_run_exits(config: Any, call: Cancellable) -> bool:
    """Cancel ``call`` when the sync run of the task ``config`` exits, if it
    still runs then (Rule 1). False when the run's loop was not found."""
    stack = _run_stack(config)
    if stack is None:
        return False
    ref = weakref.ref(call)

    def stop() -> None:
        running = ref()
        if running is not None:
            running.cancel()

    stack.callback(stop)
    return True
