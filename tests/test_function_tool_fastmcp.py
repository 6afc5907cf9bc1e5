"""Function tools (tests/function_tools.py) added to a user's FastMCP app as
they are (``add_kigi_tools``): the schema the model is shown (from the hints
and docstring), and, with the app a real process driven over stdio by
FastMCP's own client, split characters at caps 0-4 through ``out.run`` of a
real child, a function that raises, a plain ``def``, bad arguments, and a
cancel mid-run that leaves no process group. Not collected without the
fastmcp extra (conftest)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import fastmcp
from function_tools import SPLIT_PARTS, SPLIT_TEXT, TOOLS
from processes import cancel_once_started
from test_fastmcp import _connected, _Recorder

from kigi_tool_runtime.fastmcp import add_kigi_tools
from kigi_tool_runtime.mcp._mapping import META_ERROR
from kigi_tool_runtime.testing import check_stream

#: A bound on each test body: a hang fails, never a timing assertion.
WAIT_S = 120.0
SOURCE = SPLIT_TEXT.encode()


async def test_the_model_is_shown_the_schema_from_the_hints() -> None:
    """Each function tool is listed with its docstring and the JSON Schema
    its type hints give: the Meta description and bound, defaults, the
    required arguments, no other field."""
    app = fastmcp.FastMCP("app")
    add_kigi_tools(app, TOOLS)
    async with asyncio.timeout(WAIT_S), fastmcp.Client(app) as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
    assert set(listed) == {tool.id for tool in TOOLS}
    count = listed["count"]
    assert count.description == "Count from 1 to `to`, a line each."
    assert count.input_schema["properties"]["to"] == {
        "description": "The last number.",
        "type": "integer",
        "minimum": 0,
        "default": 3,
    }
    assert count.input_schema["additionalProperties"] is False
    assert listed["typed"].input_schema["required"] == ["name", "size"]


async def test_function_tools_in_a_fastmcp_app_process(tmp_path: Path) -> None:
    """Over stdio to the app: a real child's split characters stream whole at
    caps 0-4 (the frames capped and lossless, the result the text exactly);
    a ToolError keeps its kind, any other exception is internal_error with
    its message; a plain def runs in a thread; bad arguments name the
    argument; cancelling a call while out.run waits stops the command's
    whole group, and the app goes on serving."""
    recorder = _Recorder()
    pid_file = tmp_path / "pid"
    async with asyncio.timeout(WAIT_S), _connected("fastmcp", "stdio", recorder) as call:
        for cap in range(5):
            result, token = await call(f"split-{cap}", {"parts": SPLIT_PARTS}, f"s{cap}")
            assert not result.is_error
            check_stream(recorder.frames[token], SOURCE, cap=cap, lossless=True)
            folded = await recorder.folder.settle(token, result)
            assert folded.text == SPLIT_TEXT
            assert result.content[0].text.startswith(SPLIT_TEXT)  # type: ignore[union-attr]

        failures: dict[str, Any] = {}
        for how in ("tool_error", "value_error"):
            failures[how], _ = await call("fails", {"how": how}, how)
        for failed in failures.values():
            assert failed.is_error
        assert failures["tool_error"].meta[META_ERROR]["kind"] == "forbidden"
        assert "no such thing" in failures["tool_error"].content[0].text
        assert failures["value_error"].meta[META_ERROR]["kind"] == "internal_error"
        assert "ValueError: the value was wrong" in failures["value_error"].content[0].text

        plain, _ = await call("threaded", {"lines": 2}, "plain")
        assert not plain.is_error
        output, value = plain.content[0].text.rsplit("\n", 1)  # type: ignore[union-attr]
        assert output == "line 0\nline 1"
        names = json.loads(value)
        assert names["thread"] != names["main"]

        refused, _ = await call("count", {"to": "x"}, "refused")
        assert refused.is_error
        assert refused.meta[META_ERROR]["kind"] == "invalid_params"
        assert "$.to" in refused.content[0].text  # type: ignore[union-attr]

        task = asyncio.create_task(call("sleeper", {"pid_file": str(pid_file)}, "cancel"))
        await cancel_once_started(task, pid_file)
        again, _ = await call("count", {"to": 1}, "after")
        assert again.content[0].text == "1\n1"  # type: ignore[union-attr]
