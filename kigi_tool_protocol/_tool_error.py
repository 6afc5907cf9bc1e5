"""``ToolErrorWire``: why a tool call failed, tagged on ``code``; and the JSON-RPC
error-code table.

A failed call's reply carries the ``ToolErrorWire`` as ``error.data``, the tool
error's detail as ``error.message`` and :func:`error_code_for` of it as
``error.code``. There is no catch-all variant: a ``code`` outside the fifteen
below is a decode error, even one that :data:`ERROR_CODES` lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ._base import U64, WireStruct, check_u64
from ._identifiers import RequestId, ToolId

__all__ = ("ToolErrorWire",)

#: The JSON-RPC error number for a code string the table does not know, and for
#: the tool errors that have no row of their own (cancelled, execution, custom).
FALLBACK_ERROR_CODE: Final = -32603

#: Every error-code string and its JSON-RPC number, in the Rust table's order. A
#: bijection: no two strings share a number.
ERROR_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "parse_error": -32700,
        "invalid_request": -32600,
        "method_not_found": -32601,
        "invalid_params": -32602,
        "internal_error": -32603,
        "unsupported_protocol_version": -32605,
        "timeout": -32001,
        "unauthorized": -32002,
        "forbidden": -32003,
        "connection_lost": -32004,
        "tool_server_gone": -32005,
        "session_not_found": -32006,
        "session_draining": -32008,
        "tool_not_found": -32011,
        "tool_already_registered": -32012,
        "tool_unavailable": -32013,
        "stale_generation": -32014,
        "duplicate_client_name": -32015,
        "tool_busy": -32016,
        "notification_schema_violation": -32017,
        "frame_too_large": -32018,
        "schema_unknown_kind": -32019,
        "behavior_version_unsupported": -32020,
        "server_id_in_use": -32021,
        "invalid_description": -32022,
        "render_limited": -32023,
        "terminal_error": -32024,
        "rate_limited": -32099,
    }
)


def error_code(name: str) -> int:
    """The JSON-RPC error number of an error-code string, or :data:`FALLBACK_ERROR_CODE`
    (-32603) for a string the table does not know."""
    return ERROR_CODES.get(name, FALLBACK_ERROR_CODE)


#: The tool errors with no row of their own in :data:`ERROR_CODES`, and the row
#: whose number their failed call replies with (every other tool error's wire
#: tag is its row).
_RIDES_ON: Final[Mapping[str, str]] = MappingProxyType(
    {
        "session_mismatch": "invalid_request",
        "cancelled": "internal_error",
        "execution": "internal_error",
        "custom": "internal_error",
    }
)


class _ToolErrorBase(WireStruct, frozen=True, kw_only=True, omit_defaults=True, tag_field="code"):
    @property
    def code(self) -> str:
        """The wire tag of this error (``"tool_not_found"``, ``"timeout"``, ...)."""
        tag = type(self).__struct_config__.tag
        assert isinstance(tag, str)
        return tag


class ToolNotFoundWire(_ToolErrorBase, frozen=True, kw_only=True, tag="tool_not_found"):
    """No tool with this id is registered."""

    tool_id: ToolId


class SessionMismatchWire(_ToolErrorBase, frozen=True, kw_only=True, tag="session_mismatch"):
    """The frame's session does not own the call."""


class ForbiddenWire(_ToolErrorBase, frozen=True, kw_only=True, tag="forbidden"):
    """The caller may not use the tool (Rust ``PermissionDenied``)."""

    reason: str


class ConnectionLostWire(_ToolErrorBase, frozen=True, kw_only=True, tag="connection_lost"):
    """The transport to the tool closed mid-call (Rust ``TransportClosed``)."""

    tool_id: ToolId


class TimeoutWire(_ToolErrorBase, frozen=True, kw_only=True, tag="timeout"):
    """The call ran past its deadline after ``elapsed_ms`` milliseconds.

    Raises:
        ValueError: on construction, ``elapsed_ms`` is outside the u64 range.
    """

    tool_id: ToolId
    elapsed_ms: U64

    def __post_init__(self) -> None:
        check_u64("elapsed_ms", self.elapsed_ms)


class CancelledWire(_ToolErrorBase, frozen=True, kw_only=True, tag="cancelled"):
    """The call was cancelled."""

    tool_id: ToolId


class InvalidParamsWire(_ToolErrorBase, frozen=True, kw_only=True, tag="invalid_params"):
    """The arguments did not fit the tool's input type (Rust ``InvalidArguments``)."""

    message: str
    details: Any = None


class ExecutionWire(_ToolErrorBase, frozen=True, kw_only=True, tag="execution"):
    """The tool ran and failed."""

    tool_id: ToolId
    message: str


class UnsupportedProtocolVersionWire(
    _ToolErrorBase, frozen=True, kw_only=True, tag="unsupported_protocol_version"
):
    """The peer speaks none of the ``supported`` protocol versions (always written)."""

    supported: list[str]


class FrameTooLargeWire(_ToolErrorBase, frozen=True, kw_only=True, tag="frame_too_large"):
    """A frame of ``bytes`` bytes exceeded the ``limit`` (Rust ``PayloadTooLarge``).

    Raises:
        ValueError: on construction, ``bytes`` or ``limit`` is outside the u64 range.
    """

    bytes: U64
    limit: U64

    def __post_init__(self) -> None:
        check_u64("bytes", self.bytes)
        check_u64("limit", self.limit)


class BehaviorVersionUnsupportedWire(
    _ToolErrorBase, frozen=True, kw_only=True, tag="behavior_version_unsupported"
):
    """The tool does not implement the ``requested`` behavior version."""

    tool_id: ToolId
    requested: str


class RenderLimitedWire(_ToolErrorBase, frozen=True, kw_only=True, tag="render_limited"):
    """A render tool hit its budget; ``card_id`` names the card when known."""

    tool_id: ToolId
    card_id: str | None = None
    reason: str


class TerminalErrorWire(_ToolErrorBase, frozen=True, kw_only=True, tag="terminal_error"):
    """A terminal (shell) tool failed for good."""

    tool_id: ToolId
    message: str


class InternalErrorWire(_ToolErrorBase, frozen=True, kw_only=True, tag="internal_error"):
    """The runtime itself failed (Rust ``Internal``); both fields are optional."""

    request_id: RequestId | None = None
    detail: str | None = None


class CustomErrorWire(_ToolErrorBase, frozen=True, kw_only=True, tag="custom"):
    """A tool-defined error: its own code is ``subcode`` (``code`` is the tag)."""

    subcode: str
    message: str
    details: Any = None


ToolErrorWire = (
    ToolNotFoundWire
    | SessionMismatchWire
    | ForbiddenWire
    | ConnectionLostWire
    | TimeoutWire
    | CancelledWire
    | InvalidParamsWire
    | ExecutionWire
    | UnsupportedProtocolVersionWire
    | FrameTooLargeWire
    | BehaviorVersionUnsupportedWire
    | RenderLimitedWire
    | TerminalErrorWire
    | InternalErrorWire
    | CustomErrorWire
)


def error_code_for(wire: ToolErrorWire) -> int:
    """The JSON-RPC ``error.code`` of a failed call whose ``error.data`` is ``wire``.

    The :data:`ERROR_CODES` row of its code for most errors; ``session_mismatch``
    rides on -32600 (``invalid_request``) and ``cancelled``, ``execution`` and
    ``custom`` on -32603 (``internal_error``).
    """
    code = wire.code
    return ERROR_CODES[_RIDES_ON.get(code, code)]
