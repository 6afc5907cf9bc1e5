"""Content blocks: the ``mimeType`` alias of ``ContentBlock``, and ``McpBlock`` without it."""

from __future__ import annotations

from typing import Any

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._content import (
    ContentBlock,
    ImageBlock,
    McpBlock,
    McpResourceBlock,
    ResourceBlock,
)

BLOCKS: Any = list[ContentBlock]
MCP_BLOCKS: Any = list[McpBlock]


@pytest.mark.parametrize("key", ["mime_type", "mimeType"])
def test_image_accepts_either_spelling_and_writes_mime_type(key: str) -> None:
    """An image block reads mime_type or mimeType, and always writes mime_type."""
    (block,) = kp.json_codec.decode(f'[{{"type":"image","{key}":"image/png","data":"x"}}]', BLOCKS)
    assert block == ImageBlock(mime_type="image/png", data="x")
    assert kp.json_codec.encode(block) == b'{"type":"image","mime_type":"image/png","data":"x"}'


@pytest.mark.parametrize("key", ["mime_type", "mimeType"])
def test_resource_accepts_either_spelling(key: str) -> None:
    """A resource block's optional media type decodes from either spelling."""
    (block,) = kp.json_codec.decode(f'[{{"type":"resource","uri":"u","{key}":"t"}}]', BLOCKS)
    assert block == ResourceBlock(uri="u", mime_type="t")


@pytest.mark.parametrize(
    "frame",
    [
        '[{"type":"image","mime_type":"a","mimeType":"a","data":"x"}]',
        '[{"type":"image","mimeType":"a","mime_type":"b","data":"x"}]',
        '[{"type":"resource","uri":"u","mime_type":"a","mimeType":"a"}]',
    ],
    ids=["image-same", "image-different", "resource"],
)
def test_both_spellings_are_rejected(frame: str) -> None:
    """A block carrying mime_type and mimeType together is a DecodeError at the block."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, BLOCKS)
    assert info.value.reason == (
        "both `mime_type` and its alias `mimeType` are present; send only `mime_type`"
    )
    assert info.value.path == "$[0]"


def test_image_needs_a_media_type() -> None:
    """An image block without either spelling is missing mime_type; null is not a value."""
    with pytest.raises(kp.DecodeError, match="missing required field `mime_type`") as info:
        kp.json_codec.decode('[{"type":"image","data":"x"}]', BLOCKS)
    assert info.value.path == "$[0]"
    with pytest.raises(kp.DecodeError, match="Expected `str`, got `null`"):
        kp.json_codec.decode('[{"type":"image","mimeType":null,"data":"x"}]', BLOCKS)
    with pytest.raises(ValueError, match="missing required field `mime_type`"):
        ImageBlock(data="x")


def test_image_optionals_and_empty_metadata_are_omitted() -> None:
    """Unset optional strings and an empty metadata map are not written; a filled map is."""
    bare = ImageBlock(mime_type="m", data="d", metadata={})
    assert kp.json_codec.encode(bare) == b'{"type":"image","mime_type":"m","data":"d"}'
    full = ImageBlock(mime_type="m", data="d", path="/p", metadata={"k": "v"})
    assert kp.json_codec.encode(full) == (
        b'{"type":"image","mime_type":"m","data":"d","path":"/p","metadata":{"k":"v"}}'
    )


def test_alias_is_invisible_after_decoding() -> None:
    """The alias leaves no trace: repr, equality and re-encoding see only mime_type."""
    (block,) = kp.json_codec.decode('[{"type":"image","mimeType":"m","data":"d"}]', BLOCKS)
    assert "mimeType" not in repr(block)
    assert "_mime_type_alias" not in repr(block)
    assert block == ImageBlock(mime_type="m", data="d")


def test_mcp_blocks_have_no_alias() -> None:
    """McpImageBlock requires mime_type and does not read mimeType."""
    with pytest.raises(kp.DecodeError, match="missing required field `mime_type`"):
        kp.json_codec.decode('[{"type":"image","mimeType":"m","data":"d"}]', MCP_BLOCKS)
    (resource,) = kp.json_codec.decode('[{"type":"resource","uri":"u","mimeType":"m"}]', MCP_BLOCKS)
    assert resource == McpResourceBlock(uri="u")


def test_unknown_block_type_is_rejected() -> None:
    """Block types are a closed set: text, image, resource."""
    with pytest.raises(kp.DecodeError, match="Invalid value 'video'") as info:
        kp.json_codec.decode('[{"type":"video","uri":"u"}]', BLOCKS)
    assert info.value.path == "$[0].type"
