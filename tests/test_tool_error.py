"""``ToolErrorWire`` variants, their codes, and the error-code table."""

from __future__ import annotations

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._tool_error import (
    ERROR_CODES,
    ConnectionLostWire,
    InvalidParamsWire,
    RenderLimitedWire,
    error_code,
    error_code_for,
)


@pytest.mark.parametrize(
    "frame",
    [
        '{"code":"permission_denied","reason":"x"}',
        '{"code":"payload_too_large","bytes":1,"limit":0}',
        '{"code":"transport_closed","tool_id":"t"}',
        '{"code":"invalid_arguments","message":"m"}',
        '{"code":"internal"}',
        '{"code":"rate_limited"}',
        '{"code":"Timeout","tool_id":"t","elapsed_ms":1}',
    ],
    ids=[
        "permission_denied",
        "payload_too_large",
        "transport_closed",
        "invalid_arguments",
        "internal",
        "rate_limited",
        "pascal-case",
    ],
)
def test_unknown_and_old_codes_are_rejected(frame: str) -> None:
    """Only the fifteen renamed snake_case tags decode; there is no catch-all."""
    with pytest.raises(kp.DecodeError, match="Invalid value") as info:
        kp.json_codec.decode(frame, kp.ToolErrorWire)
    assert info.value.path == "$.code"


def test_code_property_is_the_wire_tag() -> None:
    """``.code`` of a decoded error is the tag it was sent with."""
    wire = kp.json_codec.decode(b'{"tool_id":"t","code":"connection_lost"}', kp.ToolErrorWire)
    assert isinstance(wire, ConnectionLostWire)
    assert wire.code == "connection_lost"
    assert error_code_for(wire) == error_code("connection_lost") == -32004


@pytest.mark.parametrize(
    ("frame", "reason", "path"),
    [
        ('{"code":"frame_too_large","bytes":9}', "missing required field `limit`", "$"),
        ('{"code":"frame_too_large","bytes":-1,"limit":0}', "Expected `int` >= 0", "$.bytes"),
        ('{"code":"frame_too_large","bytes":0,"limit":18446744073709551616}', "`limit` = ", "$"),
        ('{"code":"timeout","tool_id":"t","elapsed_ms":1.0}', "got `float`", "$.elapsed_ms"),
        ('{"code":"unsupported_protocol_version"}', "missing required field `supported`", "$"),
        ('{"code":"render_limited","tool_id":"t"}', "missing required field `reason`", "$"),
    ],
    ids=[
        "missing-limit",
        "negative-bytes",
        "limit-past-u64",
        "float-elapsed",
        "no-supported",
        "no-reason",
    ],
)
def test_bad_variant_fields_are_rejected(frame: str, reason: str, path: str) -> None:
    """Each variant requires its fields, in their types and ranges."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.ToolErrorWire)
    assert reason in info.value.reason
    assert info.value.path == path


def test_optional_details_are_omitted_when_unset() -> None:
    """details, card_id, request_id and detail are written only when set."""
    assert kp.json_codec.encode(InvalidParamsWire(message="m")) == (
        b'{"code":"invalid_params","message":"m"}'
    )
    assert kp.json_codec.encode(InvalidParamsWire(message="m", details=[0])) == (
        b'{"code":"invalid_params","message":"m","details":[0]}'
    )
    assert kp.json_codec.encode(RenderLimitedWire(tool_id="t", reason="r")) == (
        b'{"code":"render_limited","tool_id":"t","reason":"r"}'
    )


def test_error_code_falls_back_to_internal_error() -> None:
    """An unknown code string maps to -32603; known strings map through the table."""
    assert error_code("") == error_code("no such code") == -32603
    assert error_code("tool_busy") == -32016
    assert error_code("rate_limited") == -32099
    assert error_code("parse_error") == -32700


def test_error_codes_table_is_read_only() -> None:
    """ERROR_CODES cannot be changed at run time."""
    with pytest.raises(TypeError):
        ERROR_CODES["tool_busy"] = 0  # type: ignore[index]
