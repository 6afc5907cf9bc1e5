"""Every read of a pydantic-ai internal the pydantic-ai host makes, fenced
(``kigi_tool_runtime/_upstream.py``); docs/upstream.md says what each is for
and the public hook that would replace it.

Invariants:

Rule 1. The run's event buffer is ``RunContext._event_stream_buffer`` (a
        dataclass field of pydantic-ai 2.x; a list whose ``waiters`` a stream
        merger registers on while it drains the buffer live).
        :func:`event_buffer` gives it when drained live, ``None`` when it is
        not (or there is none), and :data:`UNSEEN` where it cannot be read
        (pydantic-ai outside the pinned range, the field gone or of another
        shape): the toolset then bounds each call blind
        (``_call/_held.py`` ``BlindCap``) and one ``RuntimeWarning`` says so.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Final, Literal

from .._upstream import UNSEEN, Unseen, Upstream

__all__: tuple[str, ...] = ()

#: The dependency whose internals this module reads.
PYDANTIC_AI: Final = Upstream("pydantic-ai-slim", "pydantic-ai")

#: What degrades when the event buffer cannot be read (Rule 1).
PACING_DEGRADES: Final = (
    "kigi calls cannot see the run's event buffer, so none is paced: each call"
    " emits at most 256 frames and holds the rest back, said by one marker line"
)

_FIELD: Final = "_event_stream_buffer"


def event_buffer(ctx: Any) -> Sized | Literal[Unseen.UNSEEN] | None:
    """The run's event buffer when a stream merger drains it live (Rule 1)."""
    if not PYDANTIC_AI.usable(PACING_DEGRADES):
        return UNSEEN
    fields = getattr(type(ctx), "__dataclass_fields__", None)
    if not isinstance(fields, dict) or _FIELD not in fields:
        PYDANTIC_AI.degrade(PACING_DEGRADES, f"has no RunContext.{_FIELD}")
        return UNSEEN
    buffer = getattr(ctx, _FIELD, None)
    if buffer is None:
        return None
    if not isinstance(buffer, list):
        PYDANTIC_AI.degrade(PACING_DEGRADES, f"keeps RunContext.{_FIELD} in another shape")
        return UNSEEN
    return buffer if getattr(buffer, "waiters", None) else None
