"""``CallEnd``: how a served call ends when its tool breaks the contract."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from kigi_tool_runtime import CallEnd, ServedCall, Tool, ToolResult


class _Opaque(msgspec.Struct):
    pass


class _NotJson(Tool[_Opaque]):
    id = "opaque"
    args_type = _Opaque

    async def run(self, ctx: Any, args: _Opaque) -> Any:
        return object()


async def test_a_value_json_cannot_carry_ends_the_call_with_an_internal_error() -> None:
    """A tool that returns what JSON cannot carry breaks its contract: the call
    ends with an internal_error a host can send, never an exception."""
    async with asyncio.timeout(10), ServedCall(_NotJson(), {}, call_id="c1") as call:
        end = await call.run()
    assert not end.ok
    assert end.error is not None
    assert end.error.kind.value == "internal_error"
    assert end.error.tool_id == "opaque"
    assert end.text.startswith("internal_error error (-32603): the tool's result cannot be sent")
    assert end.value is None


def test_a_json_value_ends_the_call_with_its_text() -> None:
    """A value JSON carries is the model's text as JSON, the call ok."""
    end = CallEnd.of("c1", "t", ToolResult(value={"n": 1}), None, frames=0)
    assert end.ok
    assert end.text == '{"n":1}'


def test_a_string_with_a_lone_surrogate_ends_the_call_with_an_internal_error() -> None:
    """A str value is the model's text as is, unless no host could send it."""
    end = CallEnd.of("c1", "t", ToolResult(value="x\ud800y"), None, frames=0)
    assert not end.ok
    assert end.error is not None
    assert end.error.kind.value == "internal_error"
    assert "cannot be sent as JSON" in end.text
    assert CallEnd.of("c1", "t", ToolResult(value="grüße"), None, frames=0).text == "grüße"
