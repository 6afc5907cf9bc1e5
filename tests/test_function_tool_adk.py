"""Function tools (tests/function_tools.py) given to a Google ADK agent as
they are (``KigiAdkTool``), run by a real ``Runner`` with test_adk.py's fake
model: the declaration the model is shown (from the hints and docstring),
split characters at caps 0-4 through ``out.run`` of a real child, a function
that raises, a plain ``def``, bad arguments, and a cancel mid-run that leaves
no process group. Not collected without the google-adk extra (conftest)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bounded import run_within
from function_tools import SPLIT_BY_CAP, SPLIT_PARTS, SPLIT_TEXT, count, fails, sleeper, threaded
from processes import cancel_once_started
from test_adk import CALL_ID, Run, _run

from kigi_tool_runtime.adk import KigiAdkTool
from kigi_tool_runtime.adk._keys import RESPONSE_KEY
from kigi_tool_runtime.testing import check_stream

#: A bound on each test body: a hang fails, never a timing assertion.
WAIT_S = 120.0
SOURCE = SPLIT_TEXT.encode()


def test_the_model_is_shown_the_declaration_from_the_hints() -> None:
    """The function declaration: the tool's name, its docstring, and the
    JSON Schema its type hints give (the Meta description and bound, the
    default, no other field)."""
    declaration = KigiAdkTool(count)._get_declaration()
    assert declaration is not None
    assert declaration.name == "count"
    assert declaration.description == "Count from 1 to `to`, a line each."
    schema: Any = declaration.parameters_json_schema
    assert schema["type"] == "object"
    assert schema["properties"]["to"] == {
        "description": "The last number.",
        "type": "integer",
        "minimum": 0,
        "default": 3,
    }
    assert schema["additionalProperties"] is False


def test_split_characters_stream_whole_at_caps_0_to_4() -> None:
    """A real child's 2-, 3- and 4-byte characters cut across its writes
    stream whole at caps 0-4: one partial event per frame, the frames capped
    and lossless, the fold and the function response the text exactly."""

    async def body() -> list[Run]:
        return [
            await _run(KigiAdkTool(split), {"parts": SPLIT_PARTS}, Run()) for split in SPLIT_BY_CAP
        ]

    for cap, run in enumerate(run_within(body(), WAIT_S)):
        frames = run.frames()
        assert len(run.partials()) == len(frames)
        check_stream(frames, SOURCE, cap=cap, lossless=True)
        assert run.folder[CALL_ID].text == SPLIT_TEXT
        response = run.response()
        assert response["result"].startswith(SPLIT_TEXT)
        assert response[RESPONSE_KEY]["complete"] is True


def test_errors_a_plain_def_and_bad_arguments() -> None:
    """A ToolError is an ``error`` response saying its kind; any other
    exception is internal_error with its message; a plain def runs in a
    worker thread; bad arguments are an error naming the argument."""

    async def body() -> list[Run]:
        return [
            await _run(KigiAdkTool(fails), {"how": "tool_error"}, Run()),
            await _run(KigiAdkTool(fails), {"how": "value_error"}, Run()),
            await _run(KigiAdkTool(threaded), {"lines": 2}, Run()),
            await _run(KigiAdkTool(count), {"to": "x"}, Run()),
        ]

    forbidden, internal, plain, refused = (run.response() for run in run_within(body(), WAIT_S))
    assert forbidden["error"].startswith("forbidden error (")
    assert "no such thing" in forbidden["error"]
    assert internal["error"].startswith("internal_error error (")
    assert "ValueError: the value was wrong" in internal["error"]
    output, value = plain["result"].rsplit("\n", 1)
    assert output == "line 0\nline 1"
    names = json.loads(value)
    assert names["thread"] != names["main"]
    assert refused["error"].startswith("invalid_params error (")
    assert "$.to" in refused["error"]
    assert all(r[RESPONSE_KEY]["ok"] is False for r in (forbidden, internal, refused))


def test_cancelling_the_run_mid_run_stops_the_group(tmp_path: Path) -> None:
    """Cancelling the task consuming the run while the function waits in
    out.run stops the command's whole group."""
    pid_file = tmp_path / "pid"

    async def body() -> None:
        run = Run()
        task = asyncio.create_task(_run(KigiAdkTool(sleeper), {"pid_file": str(pid_file)}, run))
        await cancel_once_started(task, pid_file)

    run_within(body(), WAIT_S)
