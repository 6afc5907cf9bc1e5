"""``ProgressOutbox``: one MCP call's bounded queue of progress frames waiting
to be sent, with the stdio server's drop policy.

Invariants:

Rule 1. At most ``budget`` bytes of queued frames (a delta frame counts its
        delta's UTF-8 bytes, any other frame its encoded body) wait, plus the
        newest frame: :meth:`push` drops the *oldest* queued frames while the
        newcomer would pass the budget, and always keeps the newcomer, so the
        last frame of a stream (a truncation notice, the final delta) is never
        dropped and every drop is reported by a later frame.
Rule 2. Drops are counted twice: in total (:attr:`dropped`, for the result) and
        since the last frame taken; :meth:`take` hands that second count over
        as the frame's ``dropped_count`` and resets it.
Rule 3. Whether to wait for room or to drop is the driver's call: it waits while
        the host is still taking notifications and pushes (dropping) only once
        the host has stalled (see the driver's ``STALL_S``).

Sans-IO: no clock, no event loop.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

import msgspec

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec

__all__ = ()

#: Progress bytes one call may have queued for a host that reads slowly: 64
#: full 16 KiB deltas, like the stdio server's per-call budget. A host that
#: pauses for a moment loses nothing; one that stopped costs at most this.
OUTBOX_BYTES: Final = 1024 * 1024


def frame_size(frame: ToolCallProgressFrame[Any]) -> int:
    """The bytes ``frame`` counts against a budget (Rule 1).

    Raises:
        WireError: a non-delta body holds a value JSON cannot carry.
    """
    body = frame.body
    if isinstance(body, PartialResultPayload):
        return len(body.delta.encode("utf-8", "surrogatepass"))
    return len(json_codec.encode(body))


class ProgressOutbox:
    """The frames of one call waiting to be sent (see the module rules).

    Raises:
        ValueError: ``budget`` is below 1.
    """

    __slots__ = ("_frames", "budget", "dropped", "dropped_since", "queued_bytes")

    def __init__(self, budget: int = OUTBOX_BYTES) -> None:
        if budget < 1:
            raise ValueError(f"budget must be at least 1 byte, got {budget}")
        self.budget = budget
        self._frames: deque[tuple[ToolCallProgressFrame[Any], int]] = deque()
        self.queued_bytes = 0
        self.dropped = 0
        self.dropped_since = 0

    def __len__(self) -> int:
        return len(self._frames)

    def has_room(self, size: int) -> bool:
        """True when a frame of ``size`` bytes fits without dropping (an empty
        outbox always has room)."""
        return not self._frames or self.queued_bytes + size <= self.budget

    def push(self, frame: ToolCallProgressFrame[Any], size: int) -> int:
        """Queue ``frame`` (``size`` bytes), dropping the oldest frames while it
        would pass the budget. Returns how many were dropped."""
        dropped = 0
        frames = self._frames
        while frames and self.queued_bytes + size > self.budget:
            _, old = frames.popleft()
            self.queued_bytes -= old
            dropped += 1
        frames.append((frame, size))
        self.queued_bytes += size
        self.dropped += dropped
        self.dropped_since += dropped
        return dropped

    def take(self) -> ToolCallProgressFrame[Any] | None:
        """The oldest queued frame, carrying ``dropped_count`` when frames were
        dropped since the last one taken; ``None`` when empty."""
        if not self._frames:
            return None
        frame, size = self._frames.popleft()
        self.queued_bytes -= size
        if self.dropped_since:
            previous = frame.dropped_count or 0
            frame = msgspec.structs.replace(frame, dropped_count=previous + self.dropped_since)
            self.dropped_since = 0
        return frame
