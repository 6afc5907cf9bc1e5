"""Function tools served as they are by real hosts: ``kigi-stream serve --tools
tests/function_tools.py:TOOLS`` to the stdio ``Client``, ``serve --mcp
--tools`` to the official MCP client, and LangChain's ``as_langchain_tool``:
split characters at caps 0-4 through ``out.run`` of a real child, a function
that raises, a plain ``def``, bad arguments, cancel mid-run (the group gone),
and the schema each host shows."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from bounded import run_within
from function_tools import SPLIT_PARTS, SPLIT_TEXT, count
from mcp import Client as McpClient
from mcp import StdioServerParameters
from processes import cancel_once_started, until_group_gone
from split_calls import CAPS, SPLIT_ARGUMENTS, check_split_call

from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_runtime import Client, RemoteToolError, ToolErrorKind

TOOLS = str(Path(__file__).resolve().parent / "function_tools.py") + ":TOOLS"
SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", TOOLS]
MCP_SERVE = [*SERVE, "--mcp"]
#: A bound on each test body: a hang fails, never a timing assertion.
WAIT_S = 120.0


def test_stdio_split_characters_at_tiny_caps_through_run() -> None:
    """serve --tools: a real child's characters split across writes arrive
    whole at caps 0-4, the frames capped, the text exact (one server; the
    function tools are made for each cap, split-N)."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            for cap in CAPS:
                call = client.call(f"split-{cap}", SPLIT_ARGUMENTS, keep_text=True)
                await check_split_call(call, cap)

    run_within(body(), WAIT_S)


def test_stdio_lists_the_schema_from_the_hints() -> None:
    """The server lists each function tool with its docstring and the schema
    its type hints give."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            tools = {t["id"]: t for t in await client.list_tools()}
            count = tools["count"]
            assert count["description"] == "Count from 1 to `to`, a line each."
            schema = count["input_schema"]
            (args,) = schema["$defs"].values()
            assert args["properties"]["to"]["description"] == "The last number."
            assert args["additionalProperties"] is False

    run_within(body(), WAIT_S)


def test_stdio_errors_raise_plain_def_and_bad_arguments() -> None:
    """A ToolError keeps its kind, any other exception is internal_error with
    its message, a plain def runs, bad arguments name the argument."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            with pytest.raises(RemoteToolError) as caught:
                await client.call("fails", {"how": "tool_error"}).result()
            assert caught.value.kind is ToolErrorKind.FORBIDDEN
            with pytest.raises(RemoteToolError) as caught:
                await client.call("fails", {"how": "value_error"}).result()
            assert caught.value.kind is ToolErrorKind.INTERNAL_ERROR
            assert "ValueError: the value was wrong" in caught.value.message
            done = await client.call("threaded", {"lines": 2}).result()
            value: Any = done.output.value
            assert value["thread"] != value["main"]
            for args, named in (({"to": "3"}, "$.to"), ({"too": 3}, "`too`")):
                with pytest.raises(RemoteToolError) as caught:
                    await client.call("count", args).result()
                assert caught.value.kind is ToolErrorKind.INVALID_PARAMS
                assert named in caught.value.message

    run_within(body(), WAIT_S)


def test_stdio_cancel_mid_run_stops_the_group(tmp_path: Path) -> None:
    """Cancelling a call while its function waits in out.run stops the
    command's whole group."""
    pid_file = tmp_path / "pid"

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call = client.call("sleeper", {"pid_file": str(pid_file)})
            async for _ in call:
                break  # the command has started and written
            pid = int(pid_file.read_text())
            await call.cancel()
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind is ToolErrorKind.CANCELLED
            await until_group_gone(pid)

    run_within(body(), WAIT_S)


def _mcp_params() -> StdioServerParameters:
    return StdioServerParameters(command=MCP_SERVE[0], args=MCP_SERVE[1:])


def test_mcp_serves_function_tools_as_they_are(tmp_path: Path) -> None:
    """serve --mcp --tools: the schema from the hints, split characters of a
    real child whole in the result, a raising function an error result naming
    its message, bad arguments an error naming the argument; and cancelling a
    call (its task) while out.run waits stops the group (one server)."""
    pid_file = tmp_path / "pid"

    async def body() -> None:
        async with McpClient(_mcp_params()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["count"].description == "Count from 1 to `to`, a line each."
            assert tools["count"].input_schema["properties"]["to"]["default"] == 3
            done = await client.call_tool("split-2", {"parts": SPLIT_PARTS})
            assert not done.is_error
            assert SPLIT_TEXT in done.content[0].text  # type: ignore[union-attr]
            counted = await client.call_tool("count", {"to": 2})
            assert counted.content[0].text == "1\n2\n2"  # type: ignore[union-attr]
            failed = await client.call_tool("fails", {"how": "value_error"})
            assert failed.is_error
            assert "ValueError: the value was wrong" in failed.content[0].text  # type: ignore[union-attr]
            bad = await client.call_tool("count", {"to": "x"})
            assert bad.is_error
            assert "$.to" in bad.content[0].text  # type: ignore[union-attr]
            # Cancel mid-run.
            task = asyncio.ensure_future(client.call_tool("sleeper", {"pid_file": str(pid_file)}))
            await cancel_once_started(task, pid_file)

    run_within(body(), WAIT_S)


def test_mcp_a_result_past_the_ceiling_ends_with_frame_too_large() -> None:
    """serve --mcp --tools: a function returning a 20 MB string ends its call
    with a ``frame_too_large`` error result saying both sizes, instead of a
    response line no kigi peer takes; the next call answers, and a result
    just under the ceiling is sent whole."""

    async def body() -> None:
        async with McpClient(_mcp_params()) as client:
            done = await client.call_tool("big", {"size": 20 * 1024 * 1024})
            assert done.is_error
            error = (done.meta or {})["dev.kigi/error"]
            assert error["kind"] == "frame_too_large"
            assert error["data"]["limit"] == MAX_FRAME_BYTES_CEILING
            assert error["data"]["bytes"] > 20 * 1024 * 1024
            assert str(MAX_FRAME_BYTES_CEILING) in done.content[0].text  # type: ignore[union-attr]
            size = MAX_FRAME_BYTES_CEILING - 4096
            whole = await client.call_tool("big", {"size": size})
            assert not whole.is_error
            assert whole.content[0].text == "x" * size  # type: ignore[union-attr]

    run_within(body(), WAIT_S)


def test_langchain_serves_a_function_tool_as_it_is() -> None:
    """as_langchain_tool takes a function tool: the schema from its hints, the
    model's text (its output, then its value) as the ToolMessage content."""
    from kigi_tool_runtime.langchain import as_langchain_tool

    lc = as_langchain_tool(count)
    assert lc.name == "count"
    assert lc.args["to"]["default"] == 3

    async def body() -> Any:
        call = {"name": "count", "args": {"to": 2}, "id": "c1", "type": "tool_call"}
        return await lc.ainvoke(call)

    message = run_within(body(), WAIT_S)
    assert message.content == "1\n2\n2"
    assert message.status == "success"
