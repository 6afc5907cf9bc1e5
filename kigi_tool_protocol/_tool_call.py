"""Tool call payloads: ``ToolCallParams`` (what ``tool.call`` carries),
``ToolCallResult`` and its ``ToolOutputWire``, and ``ToolCallProgressFrame``
(what ``tool_call_progress`` carries), with the two progress mappings.

``ToolOutputWire`` is adjacently tagged, ``{"kind": K, "value": V}``: each kind
is a struct tagged on ``kind`` whose one field is ``value``, which writes the
tag then the content and decodes in any key order.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from ._base import U32, U64, WireStruct, check_u64
from ._content import McpContent
from ._identifiers import ToolCallId, ToolId
from ._progress import ContentProgress, CustomProgress, TextProgress, ToolProgress

__all__ = ("ToolCallParams", "ToolCallProgressFrame", "ToolCallResult", "progress_to_frame")

A = TypeVar("A")
B = TypeVar("B")


class ToolCallParams(WireStruct, Generic[A], frozen=True, kw_only=True, omit_defaults=True):
    """The params of ``tool.call`` and ``tool_call_request``.

    ``arguments`` is required (``null`` is a value); parametrise the class with a
    tool's input type (``ToolCallParams[ShellArgs]``) to decode them typed.
    ``deadline_ms`` (u64), ``behavior_version``, ``cwd`` and ``trace_context`` (a
    W3C traceparent) are written only when set.

    Raises:
        ValueError: on construction, ``deadline_ms`` is outside the u64 range.
    """

    tool_call_id: ToolCallId
    tool_id: ToolId
    arguments: A
    deadline_ms: U64 | None = None
    behavior_version: str | None = None
    cwd: str | None = None
    trace_context: str | None = None

    def __post_init__(self) -> None:
        check_u64("deadline_ms", self.deadline_ms)


class ToolOutputText(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="text"):
    """A tool's output as text."""

    value: str


class ToolOutputJson(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="json"):
    """A tool's output as any JSON value (the kind upstream servers always use)."""

    value: Any


class ToolOutputMcp(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="mcp"):
    """A tool's output as MCP content blocks."""

    value: McpContent


ToolOutputWire = ToolOutputText | ToolOutputJson | ToolOutputMcp


class ToolCallResult(WireStruct, frozen=True, kw_only=True, omit_defaults=True):
    """The ``result`` of a successful ``tool.call``.

    ``follow_ups`` and ``reminders`` (opaque values) are written only when
    non-empty; ``chat_completion_output`` only when set (``null`` reads as ``None``).
    """

    tool_call_id: ToolCallId
    output: ToolOutputWire
    follow_ups: list[Any] = msgspec.field(default_factory=list)
    reminders: list[Any] = msgspec.field(default_factory=list)
    chat_completion_output: Any = None


class ToolCallProgressFrame(WireStruct, Generic[B], frozen=True, kw_only=True, omit_defaults=True):
    """The params of a ``tool_call_progress`` notification.

    ``kind`` is an unvalidated string (a streaming tool's subkind, ``text`` or
    ``content``); ``body`` is required and may be ``null``. Parametrise with the
    body type to decode it typed in one pass, e.g.
    ``ToolCallProgressFrame[PartialResultPayload]``. ``dropped_count`` (u32) is
    written whenever set, including ``0``.
    """

    tool_call_id: ToolCallId
    kind: str
    body: B
    dropped_count: U32 | None = None


def progress_to_frame(
    tool_call_id: str, progress: ToolProgress, *, dropped_count: int | None = None
) -> ToolCallProgressFrame[Any]:
    """The frame a tool server sends for one progress item.

    ``text`` becomes kind ``text`` with body ``{"text": ...}``; ``content`` becomes
    kind ``content`` with the bare block list as body; ``custom`` becomes kind
    ``subkind`` with the payload as body.

    Raises:
        TypeError: ``progress`` is not a ``ToolProgress``.
    """
    if isinstance(progress, CustomProgress):
        return ToolCallProgressFrame(
            tool_call_id=tool_call_id,
            kind=progress.subkind,
            body=progress.payload,
            dropped_count=dropped_count,
        )
    if isinstance(progress, TextProgress):
        body: Any = {"text": progress.text}
        return ToolCallProgressFrame(
            tool_call_id=tool_call_id, kind="text", body=body, dropped_count=dropped_count
        )
    if not isinstance(progress, ContentProgress):
        raise TypeError(
            "progress must be a TextProgress, ContentProgress or CustomProgress, "
            f"not {type(progress).__name__}"
        )
    return ToolCallProgressFrame(
        tool_call_id=tool_call_id, kind="content", body=progress.blocks, dropped_count=dropped_count
    )


def frame_to_progress(frame: ToolCallProgressFrame[Any]) -> CustomProgress:
    """The progress a harness reads from a frame: always ``custom``, with the frame's
    kind as subkind and its body as payload (a remote ``text`` comes back as a
    ``custom`` of subkind ``text``)."""
    return CustomProgress(subkind=frame.kind, payload=frame.body)
