"""The schemas hosts state for a tool: an object at the root."""

from __future__ import annotations

import msgspec
import pytest

from kigi_tool_runtime import ShellArgs
from kigi_tool_runtime._call._schema import root_object_schema


class _Node(msgspec.Struct):
    name: str
    children: list[_Node] = []


def test_a_struct_schema_is_inlined_at_the_root() -> None:
    """msgspec's root $ref is inlined: an object with the Struct's properties
    and no $defs left when nothing else refers to them."""
    schema = root_object_schema(msgspec.json.schema(ShellArgs))
    assert schema["type"] == "object"
    assert "$ref" not in schema
    assert "$defs" not in schema
    assert schema["required"] == ["command"]
    assert set(schema["properties"]) == set(ShellArgs.__struct_fields__)


def test_a_recursive_struct_keeps_the_definition_it_refers_to() -> None:
    """A Struct that refers to itself keeps its definition, so the nested
    reference still resolves."""
    schema = root_object_schema(msgspec.json.schema(_Node))
    assert schema["type"] == "object"
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/_Node"}
    assert "_Node" in schema["$defs"]


def test_a_dangling_reference_or_a_non_object_root_is_refused() -> None:
    """A reference that does not resolve, and a root that is not an object,
    are refused with the reason."""
    with pytest.raises(ValueError, match="does not resolve"):
        root_object_schema({"$ref": "#/$defs/Missing", "$defs": {}})
    with pytest.raises(ValueError, match="must be an object at the root, got 'array'"):
        root_object_schema({"type": "array"})
