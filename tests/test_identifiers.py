"""Identifier validation: non-empty opaque ids and the ToolId grammar."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._hooks import HookFrame, HookReplyParams
from kigi_tool_protocol._identifiers import (
    ToolId,
    validate_request_id,
    validate_session_id,
    validate_tool_call_id,
    validate_tool_id,
)

OPAQUE = [validate_tool_call_id, validate_session_id, validate_request_id]


@pytest.mark.parametrize("tool_id", ["read_file", "Kigi:read_file", "-_-", "0", "a:b", "A-1:_"])
def test_valid_tool_ids(tool_id: str) -> None:
    """SEG and SEG:SEG with ASCII letters, digits, '_' and '-' are valid tool ids."""
    assert validate_tool_id(tool_id) == tool_id
    assert kp.json_codec.decode(f'"{tool_id}"', ToolId) == tool_id


@pytest.mark.parametrize(
    "tool_id",
    ["a:b:c", ":a", "a:", ":", "a.b", "a b", "a\tb", "fooébar", "a/b", "a\n", "\u0661", "\uff41"],
)
def test_invalid_tool_ids(tool_id: str) -> None:
    """Extra or empty segments, and any other character (even a trailing newline), are invalid."""
    with pytest.raises(kp.IdentifierError, match="is invalid: expected SEG or SEG:SEG"):
        validate_tool_id(tool_id)
    with pytest.raises(kp.DecodeError, match="Expected `str` matching regex"):
        kp.json_codec.decode(kp.json_codec.encode(tool_id), ToolId)


def test_empty_tool_id_is_reported_as_empty() -> None:
    """An empty tool id gets its own message."""
    with pytest.raises(kp.IdentifierError, match="tool id must not be empty"):
        validate_tool_id("")


@pytest.mark.parametrize("validate", OPAQUE)
def test_opaque_ids_accept_any_non_empty_string(validate: Callable[[str], str]) -> None:
    """Call, session and request ids are any non-empty string."""
    for value in ("x", " ", "0195b1a2-7c3e-7def-8abc-0123456789ab", "é:/ \n"):
        assert validate(value) == value


@pytest.mark.parametrize("validate", OPAQUE)
def test_opaque_ids_reject_empty_and_non_str(validate: Callable[[Any], str]) -> None:
    """An empty id, or one that is not a str, raises IdentifierError."""
    with pytest.raises(kp.IdentifierError, match="must not be empty"):
        validate("")
    with pytest.raises(kp.IdentifierError, match="must be a str, not int"):
        validate(7)


def test_identifier_error_is_a_wire_value_error() -> None:
    """IdentifierError is a WireError and a ValueError."""
    assert issubclass(kp.IdentifierError, kp.WireError)
    assert issubclass(kp.IdentifierError, ValueError)


@pytest.mark.parametrize(
    ("wire_type", "frame", "path"),
    [
        (kp.ToolCallParams, '{"tool_call_id":"","tool_id":"t","arguments":1}', "$.tool_call_id"),
        (kp.ToolCallParams, '{"tool_call_id":"c","tool_id":"a.b","arguments":1}', "$.tool_id"),
        (
            kp.ToolCallResult,
            '{"tool_call_id":"","output":{"kind":"text","value":""}}',
            "$.tool_call_id",
        ),
        (HookFrame, '{"session_id":"","event":{"type":"Pause"}}', "$.session_id"),
        (HookFrame, '{"session_id":"s","call_id":"","event":{"type":"Cancel"}}', "$.call_id"),
        (
            HookFrame,
            '{"session_id":"s","tool_id":"x:y:z","event":{"type":"Cancel"}}',
            "$.tool_id",
        ),
        (kp.ToolErrorWire, '{"code":"internal_error","request_id":""}', "$.request_id"),
        (kp.ToolErrorWire, '{"code":"cancelled","tool_id":"a b"}', "$.tool_id"),
        (HookReplyParams, '{"session_id":"","hook_id":"h","result":1}', "$.session_id"),
    ],
    ids=[
        "params-call-id",
        "params-tool-id",
        "result-call-id",
        "hook-session",
        "hook-call-id",
        "hook-tool-id",
        "error-request-id",
        "error-tool-id",
        "reply-session",
    ],
)
def test_one_bad_id_fails_the_whole_frame(wire_type: Any, frame: str, path: str) -> None:
    """Ids are validated during decode, and the error points at the bad id."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, wire_type)
    assert info.value.path == path
