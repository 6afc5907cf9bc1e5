"""``CallEnd``: how a served call ends when its tool breaks the contract."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from kigi_tool_protocol import StreamingSpec, progress_to_frame
from kigi_tool_runtime import CallEnd, OutputStream, ServedCall, Tool, ToolError, ToolResult
from kigi_tool_runtime._call._live import LiveText
from kigi_tool_runtime._call._outcome import loss_line
from kigi_tool_runtime._consumer._loss import LossReport


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


def _gappy_report() -> LossReport | None:
    """The loss report of an output whose 8-byte tail took 40 bytes at once."""
    spec = StreamingSpec(subkind="chunk", max_delta_bytes=4)
    stream = OutputStream(spec, capacity=8)
    stream.write(b"x" * 40)
    frames = [*stream.drain()]
    stream.write(b"end\n")
    frames += stream.finish()
    live = LiveText("c1")
    for seq, item in enumerate(frames):
        live.add(progress_to_frame("c1", item), seq)
    return live.report()


def test_one_loss_line_says_the_gaps_and_the_dropped_frames() -> None:
    """Every host says the output's loss in one line: its gaps, and the frames
    the host dropped, both when both happened; an end a host could not send
    (``failed``) says the same loss."""
    report = _gappy_report()
    gap = "the live output lost 32 bytes (1 gap)"
    dropped = "2 progress frame(s) were dropped because the host read too slowly"
    assert loss_line(report) == f"[kigi: {gap}]"
    assert loss_line(None, 2) == f"[kigi: {dropped}]"
    assert loss_line(report, 2) == f"[kigi: {gap}; {dropped}]"
    assert loss_line(None, 0) is None
    with pytest.raises(ValueError, match="dropped must be >= 0"):
        loss_line(None, -1)
    end = CallEnd.of("c1", "t", ToolResult(value="ok"), report, frames=2, dropped=2)
    assert end.text == f"ok\n[kigi: {gap}; {dropped}]"
    failed = end.failed(ToolError.frame_too_large(9, 5))
    assert failed.error is not None
    assert failed.error.tool_id == "t"
    assert failed.text.endswith(f"\n[kigi: {gap}; {dropped}]")
    assert (failed.frames, failed.dropped, failed.report) == (2, 2, report)
