"""Every loss said in the progress ``message`` text too, where it happened: what
a host that never sees ``_meta`` (the official Python client's
``progress_callback``, ADK, pydantic-ai) shows, whether it appends the
messages or shows only the latest."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from mcp import Client

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    StreamingSpec,
    ToolCapabilities,
)
from kigi_tool_runtime import Tool, ToolContext, ToolEvent, ToolResult
from kigi_tool_runtime._call._status import MessageMode
from kigi_tool_runtime.mcp import McpToolServer

SPEC = StreamingSpec(subkind="gappy_chunk", max_delta_bytes=16)


class Args(msgspec.Struct):
    pass


class Gappy(Tool[Args]):
    """Streams "abc", then a gap of 4 bytes (the producer's tail skipped
    them), then "xyz\\n", then "end"."""

    id = "gappy"
    args_type = Args
    capabilities = ToolCapabilities(streaming=SPEC)

    async def execute(self, ctx: ToolContext, args: Args) -> AsyncIterator[ToolEvent]:
        for delta, total, gap in (("abc", 3, False), ("xyz\n", 11, True), ("end", 14, False)):
            payload = PartialResultPayload(delta=delta, total_bytes=total, gap=gap)
            yield CustomProgress(subkind=SPEC.subkind, payload=msgspec.to_builtins(payload))
        yield ToolResult(value="done")


def _in_process(tool: Tool[Any], mode: MessageMode = "delta") -> Any:
    # In process, only the legacy path carries a progressToken on the wire
    # (the SDK's direct 2026 path calls progress callbacks without one).
    return McpToolServer([tool], message_mode=mode).server


def _messages(mode: MessageMode = "delta") -> list[str | None]:
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async def body() -> None:
        async with asyncio.timeout(30), Client(_in_process(Gappy(), mode), mode="legacy") as client:
            result = await client.call_tool("gappy", {}, progress_callback=on_progress)
            assert not result.is_error
            await asyncio.sleep(0.05)  # progress callbacks run in tasks of their own

    asyncio.run(body())
    return seen


def test_a_host_that_overwrites_sees_the_newest_line_after_the_loss_marker() -> None:
    """Status mode (the default): each message is the newest complete line,
    the one after the hole starts with the loss marker, and before any line
    the message says the bytes and the time run."""
    seen = _messages("status")
    assert re.fullmatch(r"3 bytes of output, running \d+\.\d s", seen[0] or "")
    assert seen[1:] == ["[... 1-4 bytes lost ...] xyz", "xyz"]


def test_status_is_the_default_message_mode() -> None:
    """A server made without a mode says the status."""

    async def body() -> list[str | None]:
        seen: list[str | None] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message)

        server = McpToolServer([Gappy()]).server
        async with asyncio.timeout(30), Client(server, mode="legacy") as client:
            await client.call_tool("gappy", {}, progress_callback=on_progress)
            await asyncio.sleep(0.05)
        return seen

    assert asyncio.run(body())[1:] == ["[... 1-4 bytes lost ...] xyz", "xyz"]


def test_a_host_that_appends_messages_sees_the_loss_marked_where_it_happened() -> None:
    """Delta mode: appended, the messages are the output with the loss on a line of its
    own between the bytes before and after it."""
    assert "".join(m or "" for m in _messages()) == "abc\n[... 1-4 bytes lost ...]\nxyz\nend"


def test_in_delta_mode_each_message_carries_its_marker_whole() -> None:
    """Delta mode: each message stands alone: the one after the hole carries the whole
    marker line before its text; the others are plain deltas."""
    assert _messages() == ["abc", "\n[... 1-4 bytes lost ...]\nxyz\n", "end"]


def test_without_loss_the_messages_are_the_output_exactly() -> None:
    class Whole(Gappy):
        id = "whole"

        async def execute(self, ctx: ToolContext, args: Args) -> AsyncIterator[ToolEvent]:
            for delta, total in (("grüße ", 8), ("✓\n", 12)):
                payload = PartialResultPayload(delta=delta, total_bytes=total)
                yield CustomProgress(subkind=SPEC.subkind, payload=msgspec.to_builtins(payload))
            yield ToolResult(value="done")

    seen: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async def body() -> None:
        async with asyncio.timeout(30), Client(_in_process(Whole()), mode="legacy") as client:
            await client.call_tool("whole", {}, progress_callback=on_progress)
            await asyncio.sleep(0.05)

    asyncio.run(body())
    assert seen == ["grüße ", "✓\n"]
