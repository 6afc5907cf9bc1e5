"""A progress frame in an MCP call's queue (``_call/_queue``): the queue's
budget, what a frame counts against it, and the frame as it is sent (sans-IO).

Invariants:

Rule 1. A delta frame counts its delta's UTF-8 bytes or the bytes its text
        takes in memory, whichever is more; any other frame its encoded body
        (:func:`frame_size`). A text holding one character past U+FFFF stores
        every character in 4 bytes: the ASCII and replacement characters of
        a binary flood would otherwise fill a budget counted in UTF-8 bytes
        with up to 4 times its size. A frame JSON cannot carry (its kind,
        or a non-delta body) is never queued: its call ends with the
        ``internal_error`` every server gives (``_call/_frame_check`` Rule 1).
Rule 3. A frame whose counted bytes pass ``MAX_FRAME_BYTES_CEILING`` (the
        line limit of every kigi peer) is never queued either: its call ends
        with ``frame_too_large``, saying both sizes, as on the stdio wire.
Rule 2. A frame taken with drops before it carries them (:func:`sent_frame`):
        the queue's ``dropped_count`` is added to any the frame already had, so
        no loss is said twice or lost.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING

from .._call._frame_check import encoded_body, unsendable
from .._call._queue import Taken
from .._text import text_bytes
from .._tools._errors import ToolError

# OUTBOX_BYTES is the package's; frame_size and sent_frame are the server's plumbing.
__all__: tuple[str, ...] = ()

#: Progress bytes one call may have queued for a host that reads slowly: 64
#: full 16 KiB deltas, like the stdio server's per-call budget. A host that
#: pauses for a moment loses nothing; one that stopped costs at most this.
OUTBOX_BYTES: Final = 1024 * 1024


def frame_size(frame: ToolCallProgressFrame[Any]) -> int:
    """The bytes ``frame`` counts against its call's budget (Rule 1).

    Raises:
        ToolError: ``internal_error``, the frame cannot be sent as JSON;
            ``frame_too_large``, it passes the ceiling (Rule 3).
    """
    body = frame.body
    if isinstance(body, PartialResultPayload):
        try:
            frame.kind.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise unsendable(frame, exc) from None
        delta = body.delta
        size = len(delta.encode("utf-8", "surrogatepass"))
        if size > MAX_FRAME_BYTES_CEILING:
            raise ToolError.frame_too_large(size, MAX_FRAME_BYTES_CEILING)  # Rule 3
        return max(size, text_bytes(delta))  # Rule 1
    size = len(encoded_body(frame))
    if size > MAX_FRAME_BYTES_CEILING:
        raise ToolError.frame_too_large(size, MAX_FRAME_BYTES_CEILING)  # Rule 3
    return size


def sent_frame(taken: Taken[ToolCallProgressFrame[Any]]) -> ToolCallProgressFrame[Any]:
    """The frame ``taken`` carries, with the drops before it said (Rule 2)."""
    frame = taken.item
    if taken.dropped_count:
        previous = frame.dropped_count or 0
        frame = msgspec.structs.replace(frame, dropped_count=previous + taken.dropped_count)
    return frame
