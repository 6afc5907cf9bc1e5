"""No line longer than a peer takes: a ``serve --tools`` tool that declares no
frame limit and returns, or streams, 20 MB ends its call with
``frame_too_large`` (the server's Rule 1), and a client that skips a line it
cannot take ends the call the line was for (``_rpc_client`` Rule 6)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import encode_progress_line
from kigi_tool_runtime import Client, RemoteToolError
from kigi_tool_runtime._transport._rpc_client import owner_of
from kigi_tool_runtime._wire._rpc_lines import result_line
from kigi_tool_runtime._wire._split import OVERSIZED_HEAD_BYTES

BIG_TOOLS = """
import msgspec

from kigi_tool_protocol import CustomProgress
from kigi_tool_runtime import Tool


class Args(msgspec.Struct):
    size: int


class BigResult(Tool[Args]):
    id = "big_result"
    args_type = Args

    async def run(self, ctx, args):
        return {"data": "x" * args.size}


class BigProgress(Tool[Args]):
    id = "big_progress"
    args_type = Args

    async def execute(self, ctx, args):
        yield CustomProgress(subkind="blob", payload="y" * args.size)
        yield ToolResult(value="done")


from kigi_tool_runtime import ToolResult

TOOLS = [BigResult(), BigProgress()]
"""

MB20 = 20 * 1024 * 1024


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "big.py"
    path.write_text(BIG_TOOLS, encoding="utf-8")
    return path


def _argv(tools: Path) -> list[str]:
    return [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", f"{tools}:TOOLS"]


@pytest.mark.parametrize("tool", ["big_result", "big_progress"])
def test_a_20_mb_line_ends_its_call_with_frame_too_large(tools: Path, tool: str) -> None:
    """A 20 MB result, and a 20 MB progress item, of a tool that declared no
    limit: the call ends with ``frame_too_large`` naming both sizes, and a
    small call on the same connection still answers."""

    async def main() -> None:
        async with asyncio.timeout(90):
            client = await Client.spawn(_argv(tools))
            async with client:
                with pytest.raises(RemoteToolError) as caught:
                    await client.call(tool, {"size": MB20}).result()
                assert caught.value.kind == "frame_too_large"
                assert "16777216" in str(caught.value)
                small = await client.call("big_result", {"size": 3}).result()
                assert small.output.value == {"data": "xxx"}

    asyncio.run(main())


@pytest.mark.parametrize("tool", ["big_result", "big_progress"])
def test_a_client_that_skips_a_line_ends_the_call_it_was_for(tools: Path, tool: str) -> None:
    """A client whose line limit (64 KiB) is below a 1 MB line the server may
    send: the call that line belonged to ends with ``frame_too_large`` at
    once instead of waiting forever, and the next call answers."""

    async def main() -> None:
        async with asyncio.timeout(90):
            client = await Client.spawn(_argv(tools), max_frame_bytes=64 * 1024)
            async with client:
                with pytest.raises(RemoteToolError) as caught:
                    await client.call(tool, {"size": 1024 * 1024}).result()
                assert caught.value.kind == "frame_too_large"
                assert "65536" in str(caught.value)
                small = await client.call("big_result", {"size": 3}).result()
                assert small.output.value == {"data": "xxx"}

    asyncio.run(main())


# Ids short enough that both, escaped (6 bytes a character at most), fit the head.
_IDS = st.text(min_size=1, max_size=64).filter(lambda t: "\x00" not in t)


@given(_IDS, st.one_of(st.none(), _IDS), st.integers(0, 100), st.text(max_size=50))
def test_owner_of_reads_a_progress_lines_call_id(
    call_id: str, session_id: str | None, seq: int, body: str
) -> None:
    """Whatever its ids, a progress line's first bytes name its call."""
    line = encode_progress_line(call_id, "stdout", {"delta": body}, seq=seq, session_id=session_id)
    assert owner_of(line[:OVERSIZED_HEAD_BYTES]) == (None, call_id)


@given(st.one_of(st.integers(-(2**63), 2**63 - 1), _IDS), st.one_of(st.none(), _IDS))
def test_owner_of_reads_a_responses_id(request_id: int | str, session_id: str | None) -> None:
    """A response's first bytes name its id, even when its result holds a
    ``tool_call_id`` (the call's own result does)."""
    line = result_line(request_id, session_id, {"tool_call_id": "c", "output": "z" * 5000})
    assert owner_of(line[:OVERSIZED_HEAD_BYTES]) == (request_id, None)


def test_owner_of_an_unreadable_head_is_unknown() -> None:
    """Bytes that name no id are nobody's line."""
    assert owner_of(b"x" * 100) == (None, None)


def test_over_mcp_a_20_mb_progress_item_ends_its_call_with_frame_too_large(tools: Path) -> None:
    """``serve --mcp``: a 20 MB progress item ends its call with an error result
    saying ``frame_too_large``, and the next call answers."""
    mcp = pytest.importorskip("mcp")

    async def main() -> None:
        server = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "kigi_tool_runtime", "serve", "--mcp", "--tools", f"{tools}:TOOLS"],
        )
        async with asyncio.timeout(90), mcp.Client(server) as client:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                pass

            big = await client.call_tool(
                "big_progress", {"size": MB20}, progress_callback=on_progress
            )
            assert big.is_error
            assert "16777216" in big.content[0].text
            small = await client.call_tool("big_result", {"size": 3})
            assert not small.is_error

    asyncio.run(main())
