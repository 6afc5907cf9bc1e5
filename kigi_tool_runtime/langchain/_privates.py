"""Every read of a LangGraph internal the LangChain host makes, fenced
(``kigi_tool_runtime/_upstream.py``); docs/upstream.md says what each is for
and the public hook that would replace it.

Invariants:

Rule 1. The run's stream queue is reached through the context variable
        ``langgraph.pregel._tools._tool_call_writer`` (the writer LangGraph
        sets for a tool call), the writer's closure (its ``self``, the stream
        handler, whose ``stream`` puts into the queue) and the queue's own
        fields (``_queue``: the items waiting; ``_getters`` of an
        ``asyncio.Queue``, ``_count._cond._waiters`` of a ``SyncQueue``: a
        consumer waiting). :func:`stream_queue` gives a :class:`StreamQueue`,
        or :data:`UNSEEN` where a writer is set but its queue cannot be read
        (LangGraph outside the pinned range, or any of these gone or of
        another shape): the pacer then bounds the call blind
        (``_call/_held.py`` ``BlindCap``) and one ``RuntimeWarning`` says so.
Rule 2. The sync run's ``ExitStack`` is reached through the task config's
        ``__pregel_call`` (a ``functools.partial`` whose ``schedule_task`` is a
        method of the run's ``SyncPregelLoop``, whose ``stack`` it unwinds on
        exit). :func:`run_stack` gives it, or ``None``: an async run (whose
        stack is an ``AsyncExitStack``: its ``aclose`` cancels its tasks
        itself), a call outside a graph or wrapped by a retry policy (no
        partial), or, with one ``RuntimeWarning``, LangGraph outside the range
        or the chain of another shape; leaving such a run mid-call then waits
        for the call's own deadline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sized
from contextlib import AsyncExitStack, ExitStack
from typing import Any, Final

from .._upstream import Upstream

__all__: tuple[str, ...] = ()

#: The dependency whose internals this module reads.
LANGGRAPH: Final = Upstream("langgraph", "langchain")

#: What degrades when the stream queue cannot be read (Rule 1).
PACING_DEGRADES: Final = (
    "kigi calls cannot see the run's stream queue, so none is paced: each call"
    " puts at most 256 frames into it and holds the rest back, said by one"
    " marker line"
)
#: What degrades when the sync run's loop cannot be found (Rule 2).
RUN_EXIT_DEGRADES: Final = (
    "leaving a sync graph.stream mid-call no longer stops the call first:"
    " close() waits for the call's own deadline"
)

#: The task config key LangGraph 1.x keeps its call hook under (Rule 2).
CONFIG_KEY_CALL: Final = "__pregel_call"


def _load_writer_var() -> Any:
    try:
        from langgraph.pregel import _tools as langgraph_tools

        return langgraph_tools._tool_call_writer
    except (ImportError, AttributeError):
        return None


_tool_call_writer: Any = _load_writer_var()


class StreamQueue:
    """A run's stream queue as read through LangGraph's internals (Rule 1):
    ``key`` the queue (held weakly by the pacer), ``pending`` its items."""

    __slots__ = ("key", "pending")

    def __init__(self, key: Any, pending: Sized) -> None:
        self.key = key
        self.pending = pending

    def consumer_waits(self) -> bool:
        """Whether the run's consumer waits on the queue right now."""
        getters = getattr(self.key, "_getters", None)  # asyncio.Queue (AsyncQueue)
        if getters is not None:
            return any(not getter.done() for getter in getters)
        cond = getattr(getattr(self.key, "_count", None), "_cond", None)  # SyncQueue
        return bool(getattr(cond, "_waiters", None))


#: A writer is set, but its queue cannot be read (Rule 1).
UNSEEN: Final = StreamQueue(None, ())


def stream_queue() -> StreamQueue | None:
    """The stream queue of the tool call running in this context (Rule 1):
    ``None`` when LangGraph set no writer (nothing is streamed), :data:`UNSEEN`
    when it did but the queue cannot be read."""
    if not LANGGRAPH.usable(PACING_DEGRADES):
        return UNSEEN
    var = _tool_call_writer
    get = getattr(var, "get", None)
    if get is None:
        LANGGRAPH.degrade(PACING_DEGRADES, "has no langgraph.pregel._tools._tool_call_writer")
        return UNSEEN
    writer = get()
    if writer is None:
        return None
    queue = _queue_of(writer)
    items = getattr(queue, "_queue", None)
    if queue is None or not isinstance(items, Sized):
        LANGGRAPH.degrade(PACING_DEGRADES, "has a tool-call writer of another shape")
        return UNSEEN
    return StreamQueue(queue, items)


def _queue_of(writer: Callable[[Any], None]) -> Any:
    """The stream queue ``writer`` (a LangGraph tool-call writer) puts into."""
    names = getattr(getattr(writer, "__code__", None), "co_freevars", ())
    cells = getattr(writer, "__closure__", None) or ()
    handler = dict(zip(names, (cell.cell_contents for cell in cells), strict=False)).get("self")
    put = getattr(handler, "stream", None)
    if isinstance(put, functools.partial) and put.args:
        put = put.args[0]  # async: partial(loop.call_soon_threadsafe, queue.put_nowait)
    return getattr(put, "__self__", None)


def run_stack(config: Any) -> ExitStack | None:
    """The ``ExitStack`` of the sync loop running the task ``config`` belongs
    to, or ``None`` (Rule 2)."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    call = configurable.get(CONFIG_KEY_CALL) if isinstance(configurable, dict) else None
    if not isinstance(call, functools.partial):
        return None
    if not LANGGRAPH.usable(RUN_EXIT_DEGRADES):
        return None
    keywords = call.keywords
    schedule = keywords.get("schedule_task") if isinstance(keywords, dict) else None
    stack = getattr(getattr(schedule, "__self__", None), "stack", None)
    if isinstance(stack, ExitStack):
        return stack
    if not isinstance(stack, AsyncExitStack):
        LANGGRAPH.degrade(RUN_EXIT_DEGRADES, "has a task call hook of another shape")
    return None
