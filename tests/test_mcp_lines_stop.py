"""A stop of ``serve_lines_mcp`` (its task cancelled from outside, as the
CLI's stop signals do) ends it as a cancellation while requests are still on
their way into the SDK's server: never an error group of the SDK's streams
found closed by that same stop (``_lines`` Rule 6)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp_raw import INITIALIZE, INITIALIZED
from sinks import KeptSink

from kigi_tool_runtime import Output, tool
from kigi_tool_runtime.mcp import McpToolServer
from kigi_tool_runtime.mcp._lines import serve_lines_mcp

pytestmark = pytest.mark.timeout(60)


@tool
async def flood(out: Output) -> None:
    """Write lines until stopped."""
    while True:
        out.write("y\n" * 512)
        await asyncio.sleep(0)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _calls(tool: str, count: int) -> bytes:
    return b"".join(
        _line(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {}, "_meta": {"progressToken": f"t{n}"}},
            }
        )
        for n in range(1, count + 1)
    )


@pytest.mark.parametrize("turns", [0, 1, 2, 5, 10, 20, 50, 100, 200])
async def test_a_stop_while_requests_flow_in_is_a_cancellation(turns: int) -> None:
    """64 calls arrive at once and the serving task is cancelled after
    ``turns`` turns of the loop (some requests still on their way through the
    SDK): ``serve_lines_mcp`` ends cancelled."""
    server = McpToolServer([flood])
    reader = asyncio.StreamReader()
    reader.feed_data(_line(INITIALIZE) + _line(INITIALIZED) + _calls("flood", 64))
    serving = asyncio.create_task(serve_lines_mcp(server, reader, KeptSink()))
    for _ in range(turns):
        await asyncio.sleep(0)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert asyncio.all_tasks() == {asyncio.current_task()}  # every call stopped with it


async def test_serving_to_the_end_of_input_still_returns() -> None:
    """The other end, for contrast: at end of input the calls in flight are
    cancelled and ``serve_lines_mcp`` returns (no cancellation raised), each
    call answered."""
    server = McpToolServer([flood])
    reader = asyncio.StreamReader()
    reader.feed_data(_line(INITIALIZE) + _line(INITIALIZED) + _calls("flood", 8))
    reader.feed_eof()
    sink = KeptSink()
    await serve_lines_mcp(server, reader, sink)
    answered = {
        message["id"]
        for message in map(json.loads, bytes(sink.written).splitlines())
        if "id" in message and "method" not in message
    }
    assert answered == set(range(9))
    assert asyncio.all_tasks() == {asyncio.current_task()}
