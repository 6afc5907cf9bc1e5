"""``ProgressFolder``: MCP progress folded on the host side."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime.mcp import ProgressFolder, _host
from kigi_tool_runtime.mcp._mapping import META_STREAM, ProgressNote, progress_params


def _frame(delta: str, total: int, *, gap: bool = False) -> ToolCallProgressFrame[Any]:
    return ToolCallProgressFrame(
        tool_call_id="t1",
        kind="bash_output_chunk",
        body=PartialResultPayload(delta=delta, total_bytes=total, gap=gap),
    )


def _result(sent: int) -> types.CallToolResult:
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": "done"}],
            "_meta": {META_STREAM: {"frames_sent": sent, "frames_dropped": 0}},
        },
        by_name=False,
    )


PLAIN_SERVER = """
import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def call_tool(ctx, params):
    await ctx.session.report_progress(1, 2, "half way")
    await ctx.session.report_progress(2, 2, "done")
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="plain", input_schema={"type": "object"})])


async def main():
    server = Server("plain", on_call_tool=call_tool, on_list_tools=list_tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


def test_plain_mcp_progress_is_kept_as_notes(tmp_path: Path) -> None:
    """An ordinary MCP server's progress (no kigi _meta), through the official
    client over stdio, becomes notes: no stream, no text, nothing lost."""
    script = tmp_path / "plain_server.py"
    script.write_text(PLAIN_SERVER)
    notes: list[ProgressNote] = []
    folder = ProgressFolder(on_note=notes.append)
    params = StdioServerParameters(command=sys.executable, args=[str(script)])

    async def body() -> None:
        async with asyncio.timeout(30), Client(params, message_handler=folder.message_handler) as c:
            folded = await folder.call_tool(c, "plain", {})
            await asyncio.sleep(0.1)  # the result announces no kigi frames to wait for
        assert folded.text is None
        assert folded.streams == ()
        assert folded.complete

    asyncio.run(body())
    assert [(n.progress, n.total, n.message) for n in notes] == [
        (1.0, 2.0, "half way"),
        (2.0, 2.0, "done"),
    ]
    assert folder.notes == notes
    assert folder.reassembler.records == 0


def test_typed_params_fold_with_gap_markers_and_appended_events() -> None:
    """Typed ProgressNotificationParams fold like raw ones: the appended
    events carry the deltas and the gap, and the report counts the loss."""
    events = []
    folder = ProgressFolder(on_appended=events.append)
    frames = [_frame("ab", 2), _frame("yz", 10, gap=True)]
    for seq, frame in enumerate(frames):
        params = types.ProgressNotificationParams.model_validate(
            progress_params("t1", seq, frame), by_name=False
        )
        folder.absorb(params)
    assert [event.text for event in events] == ["ab", "yz"]
    assert events[1].gap is not None
    (state,) = folder.reassembler.streams.values()
    report = state.report()
    assert report.lost_bytes == 6
    assert not report.complete


def test_settle_reports_notifications_that_never_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    """A result announcing more notifications than arrived: settle waits its
    bounded while, then counts the missing ones and the call is not complete."""
    monkeypatch.setattr(_host, "SETTLE_WAIT_S", 0.2)
    folder = ProgressFolder()
    folder.absorb(progress_params("t1", 0, _frame("ab", 2)))

    async def body() -> None:
        late = asyncio.get_running_loop().call_later(
            0.05, folder.absorb, progress_params("t1", 1, _frame("cd", 4))
        )
        folded = await folder.settle("t1", _result(3))
        late.cancel()
        assert folded.missing == 1
        assert folded.text == "abcd"
        assert not folded.complete
        whole = await folder.settle("t1", _result(2))
        assert whole.missing == 0
        assert whole.complete

    asyncio.run(body())
