"""Every line of the conformance file ``wire_golden.jsonl``, as its own test."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import CONFORMANCE

import kigi_tool_protocol as kp
from kigi_tool_protocol import _tool_error as errors
from kigi_tool_protocol._capabilities import HookKind
from kigi_tool_protocol._hooks import HookEvent, HookFrame
from kigi_tool_protocol._identifiers import (
    ToolCallId,
    ToolId,
    validate_tool_call_id,
    validate_tool_id,
)
from kigi_tool_protocol._tool_call import ToolOutputWire
from kigi_tool_protocol._tool_error import (
    ERROR_CODES,
    FALLBACK_ERROR_CODE,
    error_code,
    error_code_for,
)

GOLDEN = [json.loads(line) for line in (CONFORMANCE / "wire_golden.jsonl").read_text().splitlines()]

#: The decode type of every wire type the file names.
WIRE_TYPES: dict[str, Any] = {
    "StreamingSpec": kp.StreamingSpec,
    "ToolCapabilities": kp.ToolCapabilities,
    "HookKind": HookKind,
    "ToolScope": kp.ToolScope,
    "PartialResultPayload": kp.PartialResultPayload,
    "ToolProgress": kp.ToolProgress,
    "ToolCallProgressFrame": kp.ToolCallProgressFrame,
    "JsonRpcRequest": kp.JsonRpcRequest,
    "JsonRpcNotification": kp.JsonRpcNotification,
    "JsonRpcResponse": kp.JsonRpcResponse,
    "JsonRpcError": kp.JsonRpcError,
    "ToolCallParams": kp.ToolCallParams,
    "ToolCallResult": kp.ToolCallResult,
    "ToolOutputWire": ToolOutputWire,
    "ToolErrorWire": kp.ToolErrorWire,
    "HookFrame": HookFrame,
    "HookEvent": HookEvent,
}
IDENTIFIERS = {
    "ToolId": (validate_tool_id, ToolId),
    "ToolCallId": (validate_tool_call_id, ToolCallId),
}


def _cases(kinds: set[str] | None, *, exclude: frozenset[str] = frozenset()) -> list[Any]:
    return [
        pytest.param(v, id=f"{v['type']}/{v['case']}")
        for v in GOLDEN
        if (kinds is None or v["type"] in kinds) and v["type"] not in exclude
    ]


def test_every_golden_type_is_covered() -> None:
    """Each type the conformance file names is mapped to a decoder or a table here."""
    known = set(WIRE_TYPES) | set(IDENTIFIERS) | {"ErrorCodes"}
    assert {v["type"] for v in GOLDEN} <= known
    assert len(GOLDEN) == 113


@pytest.mark.parametrize("vector", _cases(None, exclude=frozenset({"ErrorCodes", *IDENTIFIERS})))
def test_wire_vector(vector: dict[str, Any]) -> None:
    """The vector decodes and re-encodes byte for byte, or is rejected with DecodeError."""
    wire_type = WIRE_TYPES[vector["type"]]
    data = vector["json"].encode()
    if not vector["decodes"]:
        with pytest.raises(kp.DecodeError) as info:
            kp.json_codec.decode(data, wire_type)
        assert info.value.reason
        return
    value = kp.json_codec.decode(data, wire_type)
    expected = vector.get("canonical", vector["json"]).encode()
    assert kp.json_codec.encode(value) == expected
    # The canonical form is a fixed point, and MessagePack carries the same value.
    assert kp.json_codec.decode(expected, wire_type) == value
    assert kp.msgpack_codec.decode(kp.msgpack_codec.encode(value), wire_type) == value


@pytest.mark.parametrize("vector", _cases(set(IDENTIFIERS)))
def test_identifier_vector(vector: dict[str, Any]) -> None:
    """An identifier vector passes validation, and decoding, exactly when it should."""
    validate, annotated = IDENTIFIERS[vector["type"]]
    text = json.loads(vector["json"])
    if vector["decodes"]:
        assert validate(text) == text
        assert kp.json_codec.decode(vector["json"], annotated) == text
    else:
        with pytest.raises(kp.IdentifierError):
            validate(text)
        with pytest.raises(kp.DecodeError):
            kp.json_codec.decode(vector["json"], annotated)


def _table(case: str) -> dict[str, int]:
    (vector,) = (v for v in GOLDEN if v["type"] == "ErrorCodes" and v["case"] == case)
    table: dict[str, int] = json.loads(vector["json"])
    return table


def test_error_codes_table() -> None:
    """ERROR_CODES is the conformance table, entry for entry and in order, and a bijection."""
    table = _table("table")
    assert list(ERROR_CODES.items()) == list(table.items())
    assert len(set(ERROR_CODES.values())) == len(ERROR_CODES) == 28
    for name, number in table.items():
        assert error_code(name) == number
    assert error_code("no_such_code") == FALLBACK_ERROR_CODE == -32603


def test_error_code_for_every_tool_error_wire() -> None:
    """error_code_for maps each ToolErrorWire code to the conformance number."""
    table = _table("from_tool_error_wire")
    samples: list[kp.ToolErrorWire] = [
        errors.ToolNotFoundWire(tool_id="t"),
        errors.SessionMismatchWire(),
        errors.ForbiddenWire(reason="r"),
        errors.ConnectionLostWire(tool_id="t"),
        errors.TimeoutWire(tool_id="t", elapsed_ms=1),
        errors.CancelledWire(tool_id="t"),
        errors.InvalidParamsWire(message="m"),
        errors.ExecutionWire(tool_id="t", message="m"),
        errors.UnsupportedProtocolVersionWire(supported=["1"]),
        errors.FrameTooLargeWire(bytes=2, limit=1),
        errors.BehaviorVersionUnsupportedWire(tool_id="t", requested="v"),
        errors.RenderLimitedWire(tool_id="t", reason="r"),
        errors.TerminalErrorWire(tool_id="t", message="m"),
        errors.InternalErrorWire(),
        errors.CustomErrorWire(subcode="s", message="m"),
    ]
    assert {wire.code: error_code_for(wire) for wire in samples} == table
    assert [wire.code for wire in samples] == list(table)
