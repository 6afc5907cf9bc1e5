"""``ToolProgress``: what a tool yields while it runs, tagged on ``kind``."""

from __future__ import annotations

from typing import Any

from ._base import WireStruct
from ._content import ContentBlock

__all__ = ("CustomProgress", "TextProgress", "ToolProgress")


class TextProgress(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="text"):
    """A line of human-readable progress."""

    text: str


class ContentProgress(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="content"):
    """Rich progress: a list of content blocks (always written, even when empty)."""

    blocks: list[ContentBlock]


class CustomProgress(WireStruct, frozen=True, kw_only=True, tag_field="kind", tag="custom"):
    """Tool-defined progress. A streaming tool's deltas are ``custom`` frames whose
    ``subkind`` is its ``StreamingSpec.subkind`` and whose ``payload`` is a
    ``PartialResultPayload``. ``payload`` is required; ``null`` is a value."""

    subkind: str
    payload: Any


ToolProgress = TextProgress | ContentProgress | CustomProgress
