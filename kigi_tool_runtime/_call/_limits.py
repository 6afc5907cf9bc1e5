"""The bounds a call's caller side keeps, one figure each for every host
(sans-IO: numbers only, so the sans-IO folds read them as the drivers do).

The stdio client holds :data:`CALL_BUFFER_FRAMES` frames a consumer has not
taken and keeps at most :data:`MAX_CALL_TEXT_BYTES` of a stream's text; the
LangGraph and pydantic-ai hosts let as many events wait for their consumer
(their ``MAX_PENDING_EVENTS``) and look again every :data:`PENDING_POLL_S`
while a call waits past it; their folds keep as much text.
"""

from __future__ import annotations

from typing import Final

# Plumbing: each host exports its own public name for the figure it uses.
__all__: tuple[str, ...] = ()

#: Frames one call may hold that its consumer has not taken yet. 1024 full
#: 16 KiB deltas are 16 MiB: a consumer busy elsewhere for a while loses
#: nothing, one that never comes back costs a bounded amount.
CALL_BUFFER_FRAMES: Final = 1024

#: The most text a call asked to keep its text keeps per stream: a tool's
#: whole output up to its usual limits, while a flood cannot take the
#: caller's memory with it. Past it the stream stops keeping text (reading it
#: says so); its figures and the items' deltas go on.
MAX_CALL_TEXT_BYTES: Final = 64 * 1024 * 1024

#: How often a framework host's call, paused while too many events wait for
#: the consumer, looks again: short next to a frame's tick (100 ms), long
#: enough not to spin while the consumer is slow.
PENDING_POLL_S: Final = 0.002
