"""What every server checks of a progress frame before it queues it, and the
errors a call ends with when one cannot be sent (sans-IO).

Rule 1. A frame whose body or kind JSON cannot carry (a lone surrogate, a value
        msgspec cannot encode) never reaches the wire: its call ends with an
        ``internal_error`` naming the kind (:func:`unsendable`), and the other
        calls go on.
Rule 2. A body is encoded once (:func:`encoded_body`): the exact bytes the wire
        carries, held as ``msgspec.Raw`` so no later step encodes it again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kigi_tool_protocol import ToolCallProgressFrame, WireError, json_codec

from .._tools._errors import ToolError

# Plumbing for the servers and callers, not exported.
__all__: tuple[str, ...] = ()


def unsendable(frame: ToolCallProgressFrame[Any], exc: Exception) -> ToolError:
    """The error a call ends with when ``frame`` cannot be sent as JSON (Rule 1)."""
    return ToolError(
        "internal_error",
        f"a progress frame of kind {frame.kind!r} cannot be sent as JSON: {exc}",
    )


def encoded_body(frame: ToolCallProgressFrame[Any]) -> msgspec.Raw:
    """``frame``'s body as the wire carries it (Rule 2), its kind checked too.

    Raises:
        ToolError: ``internal_error``, the frame cannot be sent (Rule 1).
    """
    try:
        encoded = json_codec.encode(frame.body)
        # The kind is encoded later, into a line or a batch shared with other
        # calls, where a failure would be everyone's: checked here instead.
        frame.kind.encode("utf-8")
    except (WireError, UnicodeEncodeError) as exc:
        raise unsendable(frame, exc) from None
    # msgspec's bytes keep the room their buffer grew to (36 KiB for a 24 KiB
    # body): an exact copy is what a queue's budget counts.
    return msgspec.Raw(memoryview(encoded).tobytes())
