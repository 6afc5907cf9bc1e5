"""Hooks: a ``HookFrame`` carries one ``HookEvent`` (tagged on ``type``, with the
PascalCase tags ``Cancel``, ``Pause``, ``Resume``, ``SessionEnded``, ``Custom``).

Cancellation travels as a ``hook`` whose event is ``Cancel``, with ``tool_id``
and ``call_id`` set; session-wide hooks omit both; request/response hooks set
``hook_id`` and are answered by a ``hook_reply`` notification
(:class:`HookReplyParams`).
"""

from __future__ import annotations

from typing import Any

from ._base import WireStruct
from ._identifiers import SessionId, ToolCallId, ToolId

__all__ = ()


class HookCancel(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="Cancel"):
    """Cancel the call named by the frame's ``call_id``."""


class HookPause(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="Pause"):
    """Pause the session's tools."""


class HookResume(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="Resume"):
    """Resume the session's tools."""


class HookSessionEnded(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="SessionEnded"):
    """The session is over."""


class HookCustom(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="Custom"):
    """A tool-defined event: ``kind`` names it, ``payload`` (required, may be null)
    carries it."""

    kind: str
    payload: Any


HookEvent = HookCancel | HookPause | HookResume | HookSessionEnded | HookCustom


class HookFrame(WireStruct, frozen=True, kw_only=True, omit_defaults=True):
    """The params of a ``hook`` message; optional fields are written only when set."""

    session_id: SessionId
    tool_id: ToolId | None = None
    call_id: ToolCallId | None = None
    hook_id: str | None = None
    event: HookEvent
    trace_context: str | None = None

    @classmethod
    def cancel(
        cls, session_id: str, tool_id: str, call_id: str, *, trace_context: str | None = None
    ) -> HookFrame:
        """The frame that cancels call ``call_id`` of tool ``tool_id``."""
        return cls(
            session_id=session_id,
            tool_id=tool_id,
            call_id=call_id,
            event=HookCancel(),
            trace_context=trace_context,
        )


class HookReplyParams(WireStruct, frozen=True, kw_only=True):
    """The params of a ``hook_reply`` notification: the answer to hook ``hook_id``."""

    session_id: SessionId
    hook_id: str
    result: Any
