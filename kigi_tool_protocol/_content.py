"""Content blocks: the runtime's ``ContentBlock`` (in ``content`` progress) and
the protocol's ``McpBlock`` (in ``mcp`` tool output). Both are tagged on ``type``.

``ContentBlock`` accepts the MCP spelling ``mimeType`` on decode and always writes
``mime_type``; a block carrying both spellings is rejected. msgspec has no decode
aliases, so the alias is a hidden trailing field that ``__post_init__`` folds
into ``mime_type`` and clears (a cleared field is never written). One corner
is looser than serde: ``{"mime_type": null, "mimeType": "x"}`` on a resource
block reads as ``"x"``, because an explicit ``null`` and a missing key are the
same ``None`` by the time the check runs. ``McpBlock`` has no alias at all.
"""

from __future__ import annotations

from typing import cast

import msgspec
from msgspec import UNSET, UnsetType

from ._base import WireStruct

__all__ = ()

_MIME_ALIAS = "mimeType"
#: ``ImageBlock.mime_type``'s default: "not given yet", resolved in ``__post_init__``.
_PENDING = cast(str, UNSET)


def _resolve_mime_alias(block: ImageBlock | ResourceBlock, *, required: bool) -> None:
    alias = block._mime_type_alias
    given: object = block.mime_type  # UNSET until resolved here
    if alias is not UNSET:
        if given is not UNSET and given is not None:
            raise ValueError(
                "both `mime_type` and its alias `mimeType` are present; send only `mime_type`"
            )
        msgspec.structs.force_setattr(block, "mime_type", alias)
        msgspec.structs.force_setattr(block, "_mime_type_alias", UNSET)
    elif required and given is UNSET:
        raise ValueError("Object missing required field `mime_type`")


class TextBlock(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    """A block of text."""

    text: str


class ImageBlock(
    WireStruct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    repr_omit_defaults=True,
    tag_field="type",
    tag="image",
):
    """An image: base64 ``data`` of type ``mime_type`` (``mimeType`` accepted on decode).

    ``metadata`` is written only when non-empty; the optional strings only when set.

    Raises:
        ValueError: on construction, ``mime_type`` is missing.
    """

    mime_type: str = _PENDING
    data: str
    media_id: str | None = None
    filename: str | None = None
    path: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    _mime_type_alias: str | UnsetType = msgspec.field(default=UNSET, name=_MIME_ALIAS)

    def __post_init__(self) -> None:
        _resolve_mime_alias(self, required=True)


class ResourceBlock(
    WireStruct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    repr_omit_defaults=True,
    tag_field="type",
    tag="resource",
):
    """A resource by ``uri``, with an optional ``mime_type`` (``mimeType`` accepted on
    decode) and optional inline ``text``."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    _mime_type_alias: str | UnsetType | None = msgspec.field(default=UNSET, name=_MIME_ALIAS)

    def __post_init__(self) -> None:
        _resolve_mime_alias(self, required=False)


ContentBlock = TextBlock | ImageBlock | ResourceBlock


class McpTextBlock(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    """An MCP text block."""

    text: str


class McpImageBlock(WireStruct, frozen=True, kw_only=True, tag_field="type", tag="image"):
    """An MCP image block: base64 ``data`` of type ``mime_type`` (no ``mimeType`` alias)."""

    mime_type: str
    data: str


class McpResourceBlock(
    WireStruct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="resource"
):
    """An MCP resource block; ``mime_type`` and ``text`` are written only when set."""

    uri: str
    mime_type: str | None = None
    text: str | None = None


McpBlock = McpTextBlock | McpImageBlock | McpResourceBlock


class McpContent(WireStruct, frozen=True, kw_only=True):
    """The value of an ``mcp`` tool output: its blocks (always written)."""

    blocks: list[McpBlock]
