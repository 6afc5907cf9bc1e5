"""The protocol package's exceptions.

Every failure to read bytes off the wire surfaces as :class:`DecodeError` (or a
subclass), never as a msgspec exception: callers catch one type and get the
JSON path of the offending value and a sentence saying what was wrong.
"""

from __future__ import annotations

__all__ = ("DecodeError", "IdentifierError", "WireError")


class WireError(ValueError):
    """Raised when a value cannot be put on, or taken off, the wire."""


class DecodeError(WireError):
    """Raised when bytes are not a valid encoding of the requested wire type.

    ``path`` is the JSON path of the offending value (``"$"`` for the whole
    document, ``"$.params.tool_call_id"`` for a nested field); ``reason`` is what
    was wrong with it.
    """

    def __init__(self, reason: str, path: str = "$") -> None:
        self.reason = reason
        self.path = path
        where = "" if path == "$" else f" at `{path}`"
        super().__init__(f"{reason}{where}")


class FrameTooLargeError(DecodeError):
    """Raised when a frame is larger than the frame limit; it is not parsed at all."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"frame of {size} bytes exceeds the frame limit of {limit} bytes; "
            "it was rejected before parsing"
        )


class IdentifierError(WireError):
    """Raised when a string is not a valid identifier (an empty call id, a bad tool id)."""
