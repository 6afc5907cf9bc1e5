"""Every read of a Google ADK internal the ADK host makes, fenced
(``kigi_tool_runtime/_upstream.py``); docs/upstream.md says what each is for
and the public hook that would replace it.

Invariants:

Rule 1. The events waiting for the run's consumer are the invocation's
        ``_event_queue`` (a pydantic private attribute of ADK 2.x's
        ``InvocationContext``, an ``asyncio.Queue``; the invocation is the
        public ``ToolContext.get_invocation_context()``).
        :func:`pending_events` gives its size, or :data:`UNSEEN` where it
        cannot be read (google-adk outside the pinned range, the attribute
        gone or of another shape): the tool then bounds each call blind
        (``_call/_held.py`` ``BlindCap``) and one ``RuntimeWarning`` says so.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Literal

from .._upstream import UNSEEN, Unseen, Upstream

__all__: tuple[str, ...] = ()

#: The dependency whose internals this module reads.
GOOGLE_ADK: Final = Upstream("google-adk", "google-adk")

#: What degrades when the event queue cannot be read (Rule 1).
PACING_DEGRADES: Final = (
    "kigi calls cannot see the run's event queue, so none is paced: each call"
    " yields at most 256 partial events and holds the rest back, said by one"
    " marker line"
)


def pending_events(tool_context: Any) -> int | Literal[Unseen.UNSEEN]:
    """How many events wait for the run's consumer (Rule 1)."""
    if not GOOGLE_ADK.usable(PACING_DEGRADES):
        return UNSEEN
    get = getattr(tool_context, "get_invocation_context", None)
    invocation = get() if callable(get) else None
    queue = getattr(invocation, "_event_queue", None)
    if not isinstance(queue, asyncio.Queue):
        GOOGLE_ADK.degrade(
            PACING_DEGRADES, "has no asyncio.Queue at InvocationContext._event_queue"
        )
        return UNSEEN
    return queue.qsize()
