"""What a tool declares about itself: ``ToolCapabilities`` and its closed enums."""

from __future__ import annotations

import enum

import msgspec

from ._base import U32, U64, WireStruct, always_false, check_u64
from ._limits import DEFAULT_TIMEOUT_MS, MAX_FRAME_BYTES_CEILING
from ._partial_result import StreamingSpec

__all__ = ("ToolCapabilities", "ToolScope")


class HookKind(enum.StrEnum):
    """A lifecycle hook a tool subscribes to. Closed and case-exact on the wire."""

    ON_SESSION_OPEN = "on_session_open"
    ON_SESSION_CLOSE = "on_session_close"
    ON_TOOL_CALL_START = "on_tool_call_start"
    ON_TOOL_CALL_RESULT = "on_tool_call_result"
    ON_CANCEL = "on_cancel"
    ON_NOTIFICATION = "on_notification"


class ToolScope(enum.StrEnum):
    """Whether a tool only reads or also writes. Closed and case-exact on the wire."""

    READ = "read"
    WRITE = "write"


class ToolCapabilities(WireStruct, frozen=True, kw_only=True, omit_defaults=True):
    """What a tool supports. Lenient: unknown fields are ignored and dropped.

    Written in declaration order; the two flags are always written, ``hooks`` only
    when non-empty, every other field only when set. ``{}`` decodes to the default,
    ``{"supports_cancel":false,"is_read_only":false}``. Absent optional fields read
    as ``None``; ``tool_scope`` ``None`` means read-only scope. ``behavior_version``
    is compared bytewise. See :func:`effective_max_frame_bytes` and
    :func:`effective_timeout_ms` for the limits a runtime applies.

    Raises:
        ValueError: on construction, ``timeout_ms`` is outside the u64 range.
    """

    streaming: StreamingSpec | None = None
    supports_cancel: bool = msgspec.field(default_factory=always_false)
    max_concurrency: U32 | None = None
    is_read_only: bool = msgspec.field(default_factory=always_false)
    hooks: list[HookKind] = msgspec.field(default_factory=list)
    behavior_version: str | None = None
    max_frame_bytes: U32 | None = None
    timeout_ms: U64 | None = None
    tool_scope: ToolScope | None = None

    def __post_init__(self) -> None:
        check_u64("timeout_ms", self.timeout_ms)


def effective_max_frame_bytes(caps: ToolCapabilities | None) -> int:
    """The frame limit a runtime enforces for a tool: its declared ``max_frame_bytes``
    clamped to :data:`MAX_FRAME_BYTES_CEILING`, or the ceiling when undeclared."""
    declared = None if caps is None else caps.max_frame_bytes
    if declared is None:
        return MAX_FRAME_BYTES_CEILING
    return min(declared, MAX_FRAME_BYTES_CEILING)


def effective_timeout_ms(caps: ToolCapabilities | None) -> int:
    """A tool call's deadline in milliseconds: the declared ``timeout_ms``, or
    :data:`DEFAULT_TIMEOUT_MS` when undeclared."""
    declared = None if caps is None else caps.timeout_ms
    return DEFAULT_TIMEOUT_MS if declared is None else declared
