"""kigi tools in real LangGraph: a fake chat model calls the shell tool through a
``ToolNode``; the output streams live on the ``tools`` channel, the
``ToolMessage`` carries the model's text and the loss report, and
``ToolEventFolder`` folds the events back into what the stdio client reports
for the same command."""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from host_tools import pieces_of, quiet_tool, split_tool
from hypothesis import given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolCallTransformer, ToolNode, ToolRuntime, tools_condition
from processes import until_group_gone

from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_runtime import (
    LOSS_MARKER,
    Appended,
    CallProgress,
    Client,
    OutputStream,
    RemoteToolError,
    ShellArgs,
    ShellTool,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
    _upstream,
)
from kigi_tool_runtime._call._held import BLIND_FRAMES
from kigi_tool_runtime._call._served import BEATING_AHEAD_FRAMES
from kigi_tool_runtime._consumer._loss import TRUNCATION_MARKER
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime._tools._runner import CHANNEL_DEPTH
from kigi_tool_runtime._transport._client import CALL_BUFFER_FRAMES, MAX_CALL_TEXT_BYTES
from kigi_tool_runtime.langchain import (
    KigiToolError,
    LiveChunk,
    ToolEventFolder,
    _privates,
    as_langchain_tool,
    cancel_running_calls,
)
from kigi_tool_runtime.langchain._fold import MAX_TEXT_BYTES
from kigi_tool_runtime.langchain._mapping import HeldBack, langchain_tool_name
from kigi_tool_runtime.langchain._pacing import MAX_PENDING_EVENTS

V3_WARNING = "ignore:The v3 streaming protocol on Pregel is experimental"
LOSS_LINE = re.compile(re.escape(LOSS_MARKER).replace(r"\{lost\}", r"\d+(-\d+)?") + "\n")

#: 2-, 3- and 4-byte characters, each split across ticks: the first byte of
#: each goes out, then the command sleeps past a tick, then the rest.
SPLIT = (
    "printf 'a\\303'; sleep 0.15; printf '\\251 \\342\\234'; sleep 0.15;"
    " printf '\\223 \\360\\237'; sleep 0.15; printf '\\230\\200 end\\n'"
)
SPLIT_TEXT = "aé ✓ 😀 end\n"
#: The same pieces, written by an in-process tool (no process): where the
#: promise is how LangGraph shows the frames.
SPLIT_PIECES = pieces_of(SPLIT_TEXT, [2, 6, 10])
#: The same text in one write (where the test needs the shell, not the cuts).
SPLIT_AT_ONCE = "printf 'a\\303\\251 \\342\\234\\223 \\360\\237\\230\\200 end\\n'"


def split_bash(cap: int) -> BaseTool:
    """The in-process split writer (:data:`SPLIT_PIECES`) as the LangChain tool ``bash``."""
    return as_langchain_tool(split_tool(SPLIT_PIECES, cap=cap), timeout_ms=CALL_DEADLINE_MS)


#: The call of :func:`split_bash` (it takes no arguments).
SPLIT_CALL: dict[str, Any] = {"name": "bash", "args": {}}


#: Every call a test makes has a deadline of its own.
CALL_DEADLINE_MS = 30_000


def kigi_bash(**shell: Any) -> BaseTool:
    """The shell tool (``ShellTool(**shell)``) as a LangChain tool whose calls
    end by the test's deadline."""
    return as_langchain_tool(ShellTool(**shell), timeout_ms=CALL_DEADLINE_MS)


def agent_graph(
    tools: Sequence[Any],
    calls: Sequence[dict[str, Any]],
    *,
    eager: bool = True,
    parallel: bool = False,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A real LangGraph agent loop: a fake chat model that asks for ``calls``
    (tool name and arguments, ids ``call-0``, ``call-1``, ...), one turn each
    or all in one turn (``parallel``), then answers ``done``; a ``ToolNode``
    runs the tools."""
    asked = [
        {"id": f"call-{i}", "name": call["name"], "args": call["args"]}
        for i, call in enumerate(calls)
    ]
    turns = (
        [AIMessage("", tool_calls=asked)]
        if parallel
        else [AIMessage("", tool_calls=[one]) for one in asked]
    )
    model = GenericFakeChatModel(messages=iter([*turns, AIMessage("done")]), disable_streaming=True)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(list(tools)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()
    # LangGraph streams a running node's tools events live only when it
    # streams concurrently ("custom" or "messages" among the modes does too).
    graph.stream_eager = eager
    return graph


def bash_call(command: Any, **args: Any) -> dict[str, Any]:
    return {"name": "bash", "args": {"command": command, **args}}


def _start() -> dict[str, Any]:
    return {"messages": [HumanMessage("run it")]}


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def run_sync(graph: Any, folder: ToolEventFolder) -> tuple[list[Any], dict[str, Any]]:
    """Stream a run with the ``tools`` and ``values`` modes; the tools events
    (folded as they come) and the final state."""
    events: list[Any] = []
    state: dict[str, Any] = {}
    for mode, payload in graph.stream(_start(), stream_mode=["tools", "values"]):
        if mode == "tools":
            events.append(payload)
            folder.absorb((mode, payload))
        else:
            state = payload
    return events, state


async def run_async(graph: Any, folder: ToolEventFolder) -> tuple[list[Any], dict[str, Any]]:
    events: list[Any] = []
    state: dict[str, Any] = {}
    async for mode, payload in graph.astream(_start(), stream_mode=["tools", "values"]):
        if mode == "tools":
            events.append(payload)
            folder.absorb((mode, payload))
        else:
            state = payload
    return events, state


def deltas(events: list[Any], call_id: str) -> list[Any]:
    return [
        e["delta"]
        for e in events
        if e["event"] == "tool-output-delta" and e["tool_call_id"] == call_id
    ]


def _check_split_run(
    events: list[Any], state: dict[str, Any], folder: ToolEventFolder, cap: int, *, real: bool
) -> None:
    chunks = deltas(events, "call-0")
    assert chunks, events
    assert all(isinstance(chunk, LiveChunk) and chunk.frame is not None for chunk in chunks)
    assert "".join(chunks) == SPLIT_TEXT
    assert "\ufffd" not in "".join(chunks)
    for chunk in chunks:  # each delta is capped, or one whole character
        size = len(chunk.encode())
        assert size <= max(cap, 1) or len(chunk) == 1, (cap, chunk)
    (message,) = tool_messages(state)
    assert message.status == "success"
    assert message.content.startswith(SPLIT_TEXT)
    if real:
        assert "exit code 0" in message.content
        assert message.artifact["value"]["exit_code"] == 0
    else:
        assert message.artifact["value"] == "written"
    assert message.artifact["loss"]["complete"] is True
    assert message.artifact["loss"]["frames"] == len(chunks)
    folded = folder.call("call-0")
    assert folded is not None
    assert folded.kigi
    assert folded.finished
    assert folded.complete
    assert folded.text == SPLIT_TEXT
    report = folded.report()
    assert report is not None
    assert report.frames == len(chunks)
    assert folded.artifact == message.artifact


def _split_graph(cap: int, real: bool) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent loop calling the split writer at ``cap``: the shell running
    :data:`SPLIT` (``real``), or the in-process tool writing its pieces."""
    if real:
        return agent_graph([kigi_bash(tick=0.02, max_delta_bytes=cap)], [bash_call(SPLIT)])
    return agent_graph([split_bash(cap)], [SPLIT_CALL])


@pytest.mark.parametrize(
    ("cap", "real"),
    [(0, False), (1, True), (1, False), (2, False), (3, False), (4, False), (64, False)],
)
def test_split_characters_stream_whole_through_a_sync_graph(cap: int, real: bool) -> None:
    """Characters cut across writes stream whole through a sync graph at every
    cap: through a real command once, through an in-process tool at each cap."""
    folder = ToolEventFolder()
    events, state = run_sync(_split_graph(cap, real), folder)
    _check_split_run(events, state, folder, cap, real=real)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "tool-started"
    assert kinds[-1] == "tool-finished"
    assert set(kinds[1:-1]) == {"tool-output-delta"}


@pytest.mark.parametrize("cap", [0, 1, 4, 64])
async def test_split_characters_stream_whole_through_an_async_graph(cap: int) -> None:
    """The same through an async graph (the in-process tool)."""
    folder = ToolEventFolder()
    async with asyncio.timeout(30):
        events, state = await run_async(_split_graph(cap, False), folder)
    _check_split_run(events, state, folder, cap, real=False)


def test_without_tools_streaming_the_call_runs_the_same_and_emits_nothing() -> None:
    state = agent_graph([split_bash(2)], [SPLIT_CALL]).invoke(_start())
    (message,) = tool_messages(state)
    assert message.content.startswith(SPLIT_TEXT)
    assert message.artifact["loss"]["complete"] is True


def _waits_for(go: Path) -> str:
    """A command that prints ``one``, waits (at most 20 s) for ``go`` to
    exist, then prints ``two``: only a consumer that saw ``one`` while the
    command ran can let it finish in time."""
    return (
        f"echo one; for i in $(seq 1000); do [ -e {go} ] && break; sleep 0.02; done;"
        f" [ -e {go} ] && echo two"
    )


@pytest.mark.parametrize(
    ("eager", "modes"), [(True, ["tools"]), (False, ["tools", "custom"])], ids=["eager", "custom"]
)
def test_deltas_arrive_while_the_command_runs(
    eager: bool, modes: list[str], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    bash = kigi_bash(tick=0.02)
    graph = agent_graph([bash], [bash_call(_waits_for(go))], eager=eager)
    seen: list[str] = []
    for mode, payload in graph.stream(_start(), stream_mode=modes):
        if mode == "tools" and payload["event"] == "tool-output-delta":
            seen.append(payload["delta"])
            go.touch()
        if mode == "tools" and payload["event"] == "tool-finished":
            assert payload["output"].artifact["value"]["exit_code"] == 0
    assert "".join(seen) == "one\ntwo\n"


class ToolCallingFake(GenericFakeChatModel):
    """The fake chat model an agent factory can bind tools to (it calls the
    tools its scripted messages name)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def test_create_agent_runs_the_tool_and_answers_a_bad_argument() -> None:
    bash = kigi_bash(tick=0.02, max_delta_bytes=2)
    turns = [
        AIMessage(
            "", tool_calls=[{"id": "a1", "name": "bash", "args": {"command": SPLIT_AT_ONCE}}]
        ),
        AIMessage("", tool_calls=[{"id": "a2", "name": "bash", "args": {"command": ""}}]),
        AIMessage("done"),
    ]
    model = ToolCallingFake(messages=iter(turns), disable_streaming=True)
    agent = create_agent(model, [bash])
    folder = ToolEventFolder()
    for event in agent.stream(_start(), stream_mode=["tools", "custom"]):
        folder.absorb(event)
    good, bad = folder.call("a1"), folder.call("a2")
    assert good is not None
    assert bad is not None
    assert good.text == SPLIT_TEXT
    assert good.complete
    assert bad.error is not None
    assert bad.error.startswith("invalid_params error (-32602): ")
    assert "at `$.command`" in bad.error


async def test_parallel_calls_fold_apart() -> None:
    bash = kigi_bash(tick=0.02, max_delta_bytes=3)
    counting = "for i in 1 2 3; do echo $i; sleep 0.05; done"
    graph = agent_graph([bash], [bash_call(SPLIT_AT_ONCE), bash_call(counting)], parallel=True)
    folder = ToolEventFolder()
    async with asyncio.timeout(30):
        events, state = await run_async(graph, folder)
    started = [e for e in events if e["event"] == "tool-started"]
    # The ToolRuntime LangGraph injects is no argument of the call.
    assert sorted(e["input"]["command"] for e in started) == sorted([SPLIT_AT_ONCE, counting])
    assert all(set(e["input"]) == {"command"} for e in started)
    assert folder.call("call-0").text == SPLIT_TEXT  # type: ignore[union-attr]
    assert folder.call("call-1").text == "1\n2\n3\n"  # type: ignore[union-attr]
    assert all(call.complete for call in folder.kigi_calls())
    assert len(tool_messages(state)) == 2


def test_the_args_schema_is_the_tools_and_the_name_follows_the_rules() -> None:
    bash = kigi_bash()
    assert bash.name == "bash"
    assert bash.description == ShellTool().description
    schema = bash.tool_call_schema
    assert isinstance(schema, dict)
    assert schema["type"] == "object"
    assert schema["required"] == ["command"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"command", "cwd", "env", "timeout_ms", "output_limit"}
    assert "$ref" not in schema
    openai = convert_to_openai_tool(bash)
    assert openai["function"]["name"] == "bash"
    assert "runtime" not in openai["function"]["parameters"]["properties"]
    assert langchain_tool_name("fs:read") == "fs__read"
    with pytest.raises(ValueError, match="1 to 64 ASCII letters"):
        langchain_tool_name("bash", "has space")
    with pytest.raises(ValueError, match="name="):
        langchain_tool_name("x" * 65)


class RuntimeArgs(msgspec.Struct):
    runtime: str


class Clashing(Tool[RuntimeArgs]):
    id = "clash"
    args_type = RuntimeArgs

    async def run(self, ctx: Any, args: RuntimeArgs) -> ToolResult:  # pragma: no cover
        return ToolResult(value=args.runtime)


def test_a_tool_with_an_argument_named_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="ToolRuntime"):
        as_langchain_tool(Clashing())
    with pytest.raises(TypeError, match="kigi Tool"):
        as_langchain_tool(object())  # type: ignore[arg-type]


def test_a_pending_bound_below_one_is_refused() -> None:
    """``max_pending_events`` below 1 is a clear error (``as_langchain_tool``
    Raises); the default is the stdio client's per-call buffer."""
    with pytest.raises(ValueError, match="max_pending_events must be at least 1, got 0"):
        as_langchain_tool(ShellTool(), max_pending_events=0)
    assert MAX_PENDING_EVENTS == CALL_BUFFER_FRAMES == 1024


def test_the_fold_keeps_as_much_text_as_the_stdio_client() -> None:
    """``MAX_TEXT_BYTES`` is the stdio client's ``MAX_CALL_TEXT_BYTES``, as its
    comment says (both read the one figure in ``_call/_limits``)."""
    assert MAX_TEXT_BYTES == MAX_CALL_TEXT_BYTES


async def _stdio_client(tool_source: str) -> Client:
    """A real stdio server (``serve_stdio``) in a child process serving the
    shell tool ``tool_source`` builds, and a client of it."""
    code = (
        "import asyncio\nfrom kigi_tool_runtime import ShellTool, serve_stdio\n"
        f"asyncio.run(serve_stdio([{tool_source}]))\n"
    )
    return await Client.spawn([sys.executable, "-c", code])


async def test_a_bad_argument_is_the_stdio_servers_error_on_the_tool_error_path() -> None:
    bash = kigi_bash()
    folder = ToolEventFolder()
    async with asyncio.timeout(30):
        events, state = await run_async(agent_graph([bash], [bash_call(5)]), folder)
        async with await _stdio_client("ShellTool()") as client:
            with pytest.raises(RemoteToolError) as caught:
                await client.call("bash", {"command": 5}).result()
    expected = str(caught.value)
    assert caught.value.kind.value == "invalid_params"
    (error,) = [e for e in events if e["event"] == "tool-error"]
    assert expected in error["message"]
    assert error["message"].startswith("invalid_params error (-32602): ")
    (message,) = tool_messages(state)
    assert message.status == "error"
    assert message.content == error["message"]
    assert "Traceback" not in message.content
    folded = folder.call("call-0")
    assert folded is not None
    assert not folded.kigi
    assert folded.error == error["message"]
    assert not folded.complete
    assert state["messages"][-1].content == "done"  # the model was answered, the run went on


def test_a_bad_argument_raises_kigi_tool_error_when_invoked_directly() -> None:
    bash = kigi_bash()
    with pytest.raises(KigiToolError) as caught:
        bash.invoke({"command": "true", "bogus": 1})
    assert caught.value.kind.value == "invalid_params"
    assert caught.value.code == -32602
    assert "unknown field `bogus`" in caught.value.message
    assert caught.value.end is None


@pytest.mark.parametrize(
    ("args", "place"),
    [
        (json.loads('{"\\ud800": 1}'), "the object key '\\ud800' is not valid Unicode"),
        (json.loads('{"command": "echo \\ud800"}'), "not valid Unicode at `$.command`"),
    ],
)
def test_a_lone_surrogate_in_the_arguments_is_an_error_tool_message(
    args: dict[str, Any], place: str
) -> None:
    """A model's tool call whose argument key (or value) is a lone surrogate,
    as ``json.loads`` returns it, answers the model with an ``invalid_params``
    error ``ToolMessage`` naming the place; ``graph.invoke`` raises nothing."""
    state = agent_graph([kigi_bash()], [{"name": "bash", "args": args}]).invoke(_start())
    (message,) = tool_messages(state)
    assert message.status == "error"
    assert message.content.startswith("invalid_params error (-32602): ")
    assert place in message.content
    assert state["messages"][-1].content == "done"


def test_a_failing_command_is_a_result_with_its_exit_status() -> None:
    bash = kigi_bash(tick=0.02)
    folder = ToolEventFolder()
    events, state = run_sync(agent_graph([bash], [bash_call("echo failing >&2; exit 3")]), folder)
    (message,) = tool_messages(state)
    assert message.status == "success"
    assert message.content.startswith("failing\n")
    assert "exit code 3" in message.content
    assert message.artifact["value"]["exit_code"] == 3
    assert "".join(deltas(events, "call-0")) == "failing\n"
    folded = folder.call("call-0")
    assert folded is not None
    assert folded.text == "failing\n"
    assert folded.complete


async def test_a_kigi_error_mid_call_is_the_tool_error_path_with_its_kind() -> None:
    bash = as_langchain_tool(ShellTool(tick=0.02), timeout_ms=300)
    folder = ToolEventFolder()
    async with asyncio.timeout(30):
        events, state = await run_async(
            agent_graph([bash], [bash_call("echo started; sleep 30")]), folder
        )
    (error,) = [e for e in events if e["event"] == "tool-error"]
    assert error["message"].startswith("timeout error (")
    (message,) = tool_messages(state)
    assert message.status == "error"
    assert message.content == error["message"]
    folded = folder.call("call-0")
    assert folded is not None
    assert folded.text == "started\n"
    assert folded.error == error["message"]


FLOOD_TOOL = "ShellTool(tick=5.0, max_delta_bytes=64, tail_capacity=256)"
#: One write of 60000 bytes into an empty pipe: the reader gets it in one read,
#: so the tail keeps the same last 256 bytes in every run.
FLOOD = [sys.executable, "-c", "import os; os.write(1, b'x' * 59999 + b'\\n')"]


async def test_a_flood_through_a_small_tail_folds_to_what_the_stdio_client_reports() -> None:
    bash = kigi_bash(tick=5.0, max_delta_bytes=64, tail_capacity=256)
    heard: list[Appended] = []
    folder = ToolEventFolder(on_appended=lambda call, appended: heard.append(appended))
    async with asyncio.timeout(60):
        events, state = await run_async(agent_graph([bash], [bash_call(FLOOD)]), folder)
        async with await _stdio_client(FLOOD_TOOL) as client:
            call = client.call("bash", {"command": FLOOD}, tool_call_id="call-0", keep_text=True)
            stdio: list[Appended] = [
                item.appended async for item in call if isinstance(item, CallProgress)
            ]
    live = "".join(deltas(events, "call-0"))
    assert LOSS_LINE.match(live), live[:200]  # the gap is said live, where it was
    assert live.endswith("x\n")
    (message,) = tool_messages(state)
    loss = message.artifact["loss"]
    assert loss["complete"] is False
    assert loss["total_bytes"] == 60000
    assert loss["gaps"]
    assert loss["gaps"][0]["at_char"] == 0
    assert "[kigi: the live output lost" in message.content
    folded = folder.call("call-0")
    assert folded is not None
    expected = call.reassembler.reports(ended=True)[0]
    assert folded.report() == expected
    assert not expected.complete
    assert folded.text == call.reassembler.stream("call-0", "bash_output_chunk").text  # type: ignore[union-attr]
    assert heard == stdio
    assert loss["lost_bytes"]["max"] == expected.lost_bytes


def test_output_cut_at_the_limit_ends_live_with_the_truncation_marker() -> None:
    bash = kigi_bash(tick=0.02, max_delta_bytes=16, limit=300)
    folder = ToolEventFolder()
    events, state = run_sync(agent_graph([bash], [bash_call("seq 1 1000")]), folder)
    chunks = deltas(events, "call-0")
    live = "".join(chunks)
    assert live.endswith("\n" + TRUNCATION_MARKER + "\n")
    assert chunks[-1].frame is None  # the closing text: said once the call ended
    (message,) = tool_messages(state)
    assert message.artifact["loss"]["truncated"] is True
    assert message.artifact["loss"]["complete"] is False
    folded = folder.call("call-0")
    assert folded is not None
    assert folded.closing == str(chunks[-1])
    report = folded.report()
    assert report is not None
    assert report.truncated
    assert not folded.complete
    assert live.startswith("1\n2\n3\n")


@pytest.mark.filterwarnings(V3_WARNING)
def test_v3_tool_call_streams_fold_like_the_tools_channel() -> None:
    folder = ToolEventFolder()
    graph = agent_graph([split_bash(3)], [SPLIT_CALL])
    run = graph.stream_events(_start(), version="v3", transformers=[ToolCallTransformer])
    folded = [folder.fold_tool_call(stream) for stream in run.tool_calls]
    assert [call.tool_call_id for call in folded] == ["call-0"]
    assert folded[0].text == SPLIT_TEXT
    assert folded[0].complete
    assert run.output["messages"][-1].content == "done"


@pytest.mark.filterwarnings(V3_WARNING)
async def test_v3_async_tool_call_streams_fold_too() -> None:
    folder = ToolEventFolder()
    graph = agent_graph([split_bash(3)], [SPLIT_CALL])
    async with asyncio.timeout(30):
        run = await graph.astream_events(_start(), version="v3", transformers=[ToolCallTransformer])
        folded = [await folder.afold_tool_call(stream) async for stream in run.tool_calls]
    assert folded[0].text == SPLIT_TEXT
    assert folded[0].complete


def test_events_of_ordinary_langchain_tools_are_kept_apart() -> None:
    @tool
    def plain(word: str, runtime: ToolRuntime) -> str:
        """Stream a word in two pieces."""
        runtime.emit_output_delta(word[:2])
        runtime.emit_output_delta(word[2:])
        return word

    bash = kigi_bash(tick=0.02)
    folder = ToolEventFolder()
    graph = agent_graph(
        [bash, plain], [{"name": "plain", "args": {"word": "hello"}}, bash_call("echo hi")]
    )
    run_sync(graph, folder)
    ordinary = folder.call("call-0")
    assert ordinary is not None
    assert not ordinary.kigi
    assert ordinary.notes == ["he", "llo"]
    assert ordinary.text is None
    assert ordinary.report() is None
    assert [call.tool_call_id for call in folder.kigi_calls()] == ["call-1"]
    assert folder.kigi_calls()[0].text == "hi\n"
    assert len(folder.reassembler.streams) == 1


def test_the_folder_takes_every_form_and_ignores_the_rest() -> None:
    folder = ToolEventFolder()
    started = {"event": "tool-started", "tool_call_id": "t", "tool_name": "x"}
    assert folder.absorb(started) is None
    folder.absorb(
        (("sub",), "tools", {"event": "tool-output-delta", "tool_call_id": "t", "delta": "a"})
    )
    folder.absorb(
        {
            "method": "tools",
            "params": {
                "namespace": [],
                "data": {"event": "tool-error", "tool_call_id": "t", "message": "boom"},
            },
        }
    )
    for other in [
        ("updates", {"agent": {}}),
        {"event": "other"},
        "text",
        None,
        (),
        {"method": "messages", "params": {}},
    ]:
        folder.absorb(other)
    call = folder.call("t")
    assert call is not None
    assert call.tool_name == "x"
    assert call.notes == ["a"]
    assert call.error == "boom"
    assert folder.ignored == 6
    assert MAX_TEXT_BYTES == 64 * 1024 * 1024


def test_a_live_chunk_copies_with_its_frame() -> None:
    import copy
    import pickle

    bash = kigi_bash(tick=0.02)
    events, _ = run_sync(agent_graph([bash], [bash_call("echo hi")]), ToolEventFolder())
    (chunk,) = deltas(events, "call-0")
    for twin in (copy.deepcopy(chunk), pickle.loads(pickle.dumps(chunk))):
        assert isinstance(twin, LiveChunk)
        assert twin == "hi\n"
        assert twin.frame == chunk.frame
        assert twin.seq == 0
    # A serializer sees the text: a string, whatever crosses the wire.
    assert json.dumps({"delta": chunk}) == '{"delta": "hi\\n"}'
    assert orjson.dumps(chunk) == b'"hi\\n"'
    serde = JsonPlusSerializer()
    assert serde.loads_typed(serde.dumps_typed({"delta": chunk})) == {"delta": "hi\n"}


def test_sync_invoke_inside_a_running_loop_is_a_clear_error() -> None:
    bash = kigi_bash()

    async def inside() -> None:
        bash.invoke({"command": "true"})

    with pytest.raises(RuntimeError, match="ainvoke"):
        asyncio.run(inside())


def test_direct_invoke_gives_the_message_and_artifact() -> None:
    bash = kigi_bash()
    content = bash.invoke({"command": "echo direct"})
    assert content.startswith("direct\n")
    message = bash.invoke(
        {"type": "tool_call", "id": "d1", "name": "bash", "args": {"command": "echo direct"}}
    )
    assert isinstance(message, ToolMessage)
    assert message.artifact["value"]["output"] == "direct\n"
    assert message.artifact["tool_call_id"].startswith("lc-")  # no ToolRuntime: no stream


def test_a_direct_invoke_reports_what_its_output_lost() -> None:
    """Invoked directly (no ``ToolRuntime``, nothing emitted) a call still makes
    its frames, so the artifact's loss report says the output stopped at the
    limit, as it does in a graph (Rule 1)."""
    capped = as_langchain_tool(ShellTool(limit=1000), timeout_ms=CALL_DEADLINE_MS)
    message = capped.invoke(
        {"type": "tool_call", "id": "d2", "name": "bash", "args": {"command": "yes | head -c 5000"}}
    )
    assert isinstance(message, ToolMessage)
    loss = message.artifact["loss"]
    assert loss["frames"] > 0
    assert loss["truncated"] is True
    assert loss["complete"] is False
    assert message.content.endswith("[kigi: it was truncated at the output limit]")


# -- lifecycle: a cancelled run leaves no process ------------------------------

HOLD = "echo $$; exec sleep 30"


async def test_cancelling_the_graph_task_stops_the_process_group() -> None:
    bash = kigi_bash(tick=0.02)
    graph = agent_graph([bash], [bash_call(HOLD)])
    found: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def run() -> None:
        async for mode, payload in graph.astream(_start(), stream_mode=["tools", "values"]):
            if mode == "tools" and payload["event"] == "tool-output-delta" and not found.done():
                found.set_result(int(str(payload["delta"]).strip()))

    async with asyncio.timeout(30):
        task = asyncio.create_task(run())
        pgid = await found
        assert group_alive(pgid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not group_alive(pgid)  # gone before the cancellation went on


def test_closing_a_sync_stream_mid_call_stops_the_process_group() -> None:
    """``close()`` of a sync ``graph.stream`` mid-call stops the call first
    (its deadline is ten minutes away) and returns with the command's process
    group gone; the async stream's ``aclose()`` does the same."""
    bash = as_langchain_tool(ShellTool(tick=0.02), timeout_ms=600_000)
    stream = agent_graph([bash], [bash_call(HOLD)]).stream(
        _start(), stream_mode=["tools", "values"]
    )
    pgid = None
    for mode, payload in stream:
        if mode == "tools" and payload["event"] == "tool-output-delta":
            pgid = int(str(payload["delta"]).strip())
            break
    assert pgid is not None
    assert group_alive(pgid)
    closer = threading.Thread(target=stream.close, daemon=True)
    closer.start()
    closer.join(60)  # far beyond what it takes; on failure it waits for the deadline
    closed = not closer.is_alive()
    if not closed:
        cancel_running_calls()  # clean up what the failure left running
        closer.join(60)
    assert closed, "close() waited for the running call"
    assert not group_alive(pgid)


async def _cut_when(marker: Path, cut: asyncio.Timeout) -> None:
    while not marker.exists():
        await asyncio.sleep(0.02)
    cut.reschedule(asyncio.get_running_loop().time())


async def _ainvoke_until(graph: Any, marker: Path) -> None:
    """``graph.ainvoke`` under an ``asyncio.timeout`` that expires once the
    command has written ``marker``."""
    async with asyncio.timeout(None) as cut:
        armed = asyncio.create_task(_cut_when(marker, cut))
        try:
            await graph.ainvoke(_start())
        finally:
            armed.cancel()


async def test_a_timeout_around_ainvoke_stops_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "pgid"
    command = f"echo $$ > {marker}.tmp; mv {marker}.tmp {marker}; exec sleep 30"
    bash = kigi_bash(tick=0.02)
    graph = agent_graph([bash], [bash_call(command)])
    async with asyncio.timeout(30):
        with pytest.raises(TimeoutError):
            await _ainvoke_until(graph, marker)
    assert not group_alive(int(marker.read_text()))


#: Scripts that run a held command and wait for SIGINT; each writes the
#: command's process group id to the file named by argv[1] (the command does).
_INTERRUPTED = {
    "sync direct invoke": """
        bash.invoke({"command": HOLD})
    """,
    "sync graph invoke": """
        with stop_on_interrupt():
            graph.invoke({"messages": [HumanMessage("run it")]})
    """,
    "async graph ainvoke": """
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("run it")]}))
    """,
}

_PRELUDE = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from langchain_core.messages import HumanMessage
from test_langchain import agent_graph, bash_call
from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.langchain import as_langchain_tool, stop_on_interrupt
marker = sys.argv[1]
HOLD = f"echo $$ > {{marker}}.tmp; mv {{marker}}.tmp {{marker}}; sleep 30; touch {{marker}}.done"
bash = as_langchain_tool(ShellTool(tick=0.02))
graph = agent_graph([bash], [bash_call(HOLD)])
"""


@pytest.mark.parametrize("how", sorted(_INTERRUPTED))
async def test_a_keyboard_interrupt_stops_the_process_group(how: str, tmp_path: Path) -> None:
    marker = tmp_path / "pgid"
    script = _PRELUDE.format(tests=str(Path(__file__).parent)) + textwrap.dedent(_INTERRUPTED[how])
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(marker), stderr=subprocess.PIPE
    )
    try:
        async with asyncio.timeout(60):
            while not marker.exists():
                assert child.returncode is None
                await asyncio.sleep(0.02)
            pgid = int(marker.read_text())
            assert group_alive(pgid)
            child.send_signal(signal.SIGINT)
            _, stderr = await child.communicate()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode != 0
    assert b"KeyboardInterrupt" in stderr, stderr.decode()
    await until_group_gone(pgid)  # GONE_S: far above what it takes on a loaded machine
    assert not (tmp_path / "pgid.done").exists()  # stopped, not run to its end


def test_readme_langgraph_section_runs() -> None:
    """The README's "Use it from LangGraph" example runs as written: the live
    text, then the fold's summary, the model's status line and the artifact's
    verdict."""
    from docs_pages import blocks, page

    block = blocks("python", page("hosts/langgraph.md"))[0]
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "grüße ✓ 😀"
    assert re.fullmatch(
        r"call-1/bash_output_chunk: 17 bytes in \d+ frames? \(total 17\), no gaps", lines[1]
    )
    assert re.fullmatch(r"\[exit code 0; 17 bytes of output; \d+ ms\]", lines[2])
    assert lines[3:] == ["complete: True"]


class _CountingFlood(Tool[ShellArgs]):
    """A streaming tool that makes frames as fast as it is let: 4,000 one-byte
    deltas, counting how many it has made (``made``)."""

    id = "flood"
    description = "Make many frames, counting them."
    args_type = ShellArgs
    capabilities = ToolCapabilities(streaming=StreamingSpec(subkind="flood", max_delta_bytes=1))

    def __init__(self) -> None:
        self.made = 0

    async def execute(self, ctx: ToolContext, args: ShellArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(self.capabilities.streaming, capacity=1 << 16)
        for _ in range(4000):
            stream.write(b"x")
            for frame in stream.drain():
                self.made += 1
                yield frame
            await asyncio.sleep(0)
        for frame in stream.finish():
            self.made += 1
            yield frame
        yield ToolResult(value="flooded")


class _LineFlood(Tool[ShellArgs]):
    """64 MB in 64 KiB lines, in process: the stream is drained after each
    line, so every byte is a frame for LangGraph's queue (a command would have
    to be slow enough for the shell tool to take every byte: seconds)."""

    id = "bash"
    description = "Write 64 MB in lines, every byte a frame."
    args_type = ShellArgs
    capabilities = ToolCapabilities(streaming=StreamingSpec(subkind="flood"))

    async def execute(self, ctx: ToolContext, args: ShellArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(self.capabilities.streaming, capacity=1 << 17)
        line = b"x" * 65535 + b"\n"
        for _ in range(1024):
            stream.write(line)
            for frame in stream.drain():
                yield frame
            await asyncio.sleep(0)
        for frame in stream.finish():
            yield frame
        yield ToolResult(value="flooded")


def test_a_flood_in_langgraphs_default_streaming_costs_a_bounded_amount() -> None:
    """With LangGraph's defaults (``stream_mode="tools"``, no ``stream_eager``)
    the queue is drained only when the node ends: a 64 MB flood adds at most
    24 MiB to the process (it added 107 MiB: every frame waited in the queue),
    the frames held back are said by one marker line before the last frame,
    the fold reports the loss, and the ``ToolMessage`` is whole. (The flood is
    made in process: the promise is what LangGraph's queue holds.)"""
    bash = as_langchain_tool(_LineFlood(), timeout_ms=120_000)
    graph = agent_graph([bash], [bash_call("unused")], eager=False)
    folder = ToolEventFolder()
    chunks: list[Any] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for payload in graph.stream(_start(), stream_mode="tools"):
            folder.absorb(("tools", payload))
            if payload["event"] == "tool-output-delta":
                chunks.append(payload["delta"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - before <= 24 * 1024 * 1024, (peak - before) / 2**20
    *shown, marker, last = chunks
    assert all(chunk.frame is not None for chunk in shown)
    assert marker.frame is None
    assert re.fullmatch(r"\[\.\.\. \d+ frames dropped here \.\.\.\]\n", marker)
    assert last.frame is not None
    assert last.seq > shown[-1].seq + 1
    folded = folder.call("call-0")
    assert folded is not None
    assert folded.finished
    assert not folded.complete
    report = folded.report()
    assert report is not None
    assert report.undelivered_bytes > 0
    assert folded.artifact is not None
    assert folded.artifact["value"] == "flooded"
    assert folded.artifact["loss"]["total_bytes"] == 64 * 1024 * 1024


@given(texts=st.lists(st.text("ab\n", max_size=4), max_size=4), held=st.integers(2, 10_000))
def test_the_held_back_marker_is_a_line_of_its_own(texts: list[str], held: int) -> None:
    """``HeldBack``'s marker starts a line after whatever was shown, ends one,
    and counts the frames held back before the last (sent after it)."""
    held_back = HeldBack()
    for text in texts:
        held_back.shown(text)
    held_back.count = held
    shown = "".join(texts)
    line = f"[... {held - 1} frame{'s' if held > 2 else ''} dropped here ...]\n"
    lead = "" if not shown or shown.endswith("\n") else "\n"
    assert held_back.marker() == lead + line


class _QueueProbe(Tool[ShellArgs]):
    """Records what ``_privates`` reads of the run's stream queue while it runs."""

    id = "probe"
    description = "Look at the run's stream queue."
    args_type = ShellArgs

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def execute(self, ctx: ToolContext, args: ShellArgs) -> AsyncIterator[ToolEvent]:
        self.seen.append(_privates.stream_queue())
        yield ToolResult(value="looked")


@pytest.fixture
def fresh_langgraph_fence() -> Iterator[None]:
    """The fence says its warnings afresh in each test."""
    _privates.LANGGRAPH.forget()
    yield
    _privates.LANGGRAPH.forget()


@pytest.mark.usefixtures("fresh_langgraph_fence")
async def test_the_pinned_langgraph_is_in_range_and_its_stream_queue_is_read() -> None:
    """Inside the range the ``langchain`` extra pins, the pacer reads the run's
    stream queue (``_privates`` Rule 1) with no warning, so pacing is on."""
    probe = _QueueProbe()
    graph = agent_graph([as_langchain_tool(probe)], [{"name": "probe", "args": {"command": "x"}}])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        async with asyncio.timeout(60):
            async for _ in graph.astream(_start(), stream_mode=["tools", "values"]):
                pass
    (queue,) = probe.seen
    assert isinstance(queue, _privates.StreamQueue)
    assert queue is not _privates.UNSEEN
    assert _privates.LANGGRAPH.usable("unused")


@pytest.mark.usefixtures("fresh_langgraph_fence")
@pytest.mark.parametrize("how", ["writer gone", "out of range"])
async def test_langgraph_internals_gone_bound_each_call_blind_and_warn_once(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Where the stream queue cannot be read (the private context variable
    gone, or LangGraph outside the pinned range), one ``RuntimeWarning`` (per
    thing that degrades) names
    LangGraph, its version and what degrades, and each of two calls puts at
    most ``BLIND_FRAMES`` frames into the queue, then one marker line and its
    last frame: the fold sees the loss and every byte's count."""
    if how == "writer gone":
        monkeypatch.setattr(_privates, "_tool_call_writer", None)
    else:
        monkeypatch.setattr(_upstream, "installed", lambda package: "99.0")
    floods = [_CountingFlood(), _CountingFlood()]
    tools = [as_langchain_tool(flood, name=f"flood{i}") for i, flood in enumerate(floods)]
    calls = [{"name": f"flood{i}", "args": {"command": "unused"}} for i in range(2)]
    graph = agent_graph(tools, calls)
    folder = ToolEventFolder()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        async with asyncio.timeout(120):
            events, _ = await run_async(graph, folder)
    ours = [
        str(w.message)
        for w in said
        if issubclass(w.category, RuntimeWarning) and "langgraph" in str(w.message)
    ]
    # Out of range, the run-exit hook (``_privates`` Rule 2) is not read
    # either, and says so in a warning of its own.
    assert len(ours) == len(set(ours)) == (2 if how == "out of range" else 1), ours
    (message,) = [m for m in ours if "holds the rest back" in m]
    assert ("99.0" if how == "out of range" else importlib.metadata.version("langgraph")) in message
    for call_id in ("call-0", "call-1"):
        chunks = deltas(events, call_id)
        assert len(chunks) <= BLIND_FRAMES + 2
        *shown, marker, last = chunks
        assert len(shown) == BLIND_FRAMES
        assert re.fullmatch(r"\n?\[\.\.\. \d+ frames dropped here \.\.\.\]\n", marker)
        assert last.seq > shown[-1].seq + 1
        folded = folder.call(call_id)
        assert folded is not None
        assert folded.finished
        assert not folded.complete
        report = folded.report()
        assert report is not None
        assert report.total_bytes == 4000


@pytest.mark.parametrize("bound", [16, 1_000_000])
async def test_a_slow_consumer_paces_the_call_instead_of_growing_langgraphs_queue(
    bound: int,
) -> None:
    """Backpressure, not buffering (``_tool`` Rule 5): a consumer that takes a
    while per event never has much more than the bound of the call's frames
    waiting; without pacing the tool runs thousands ahead of it."""
    flood = _CountingFlood()
    tool = as_langchain_tool(flood, max_pending_events=bound)
    graph = agent_graph([tool], [{"name": "flood", "args": {"command": "unused"}}])
    taken = 0
    ahead = 0
    async with asyncio.timeout(120):
        async for mode, payload in graph.astream(_start(), stream_mode=["tools", "values"]):
            if mode == "tools" and payload["event"] == "tool-output-delta":
                taken += 1
                ahead = max(ahead, flood.made - taken)
                await asyncio.sleep(0.001)
    assert taken >= 4000
    if bound > 4000:
        # No pacing in reach: the measure sees the tool run far ahead (the
        # check below can fail).
        assert ahead > 1000, ahead
    else:
        # The bound, the runner's channel, the frames a beating call makes
        # ahead (ServedCall Rule 5), and about as much again on its way through
        # LangGraph's hand-off; unpaced it is thousands.
        assert ahead <= bound + 2 * CHANNEL_DEPTH + BEATING_AHEAD_FRAMES + 16, ahead


async def test_a_silent_call_writes_heartbeats_to_the_custom_stream() -> None:
    """``heartbeat_s=0.1``: a tool silent for 1 s writes several heartbeats
    to the graph's ``custom`` stream (each silence, after the first line, at
    least one interval longer than the one before); the ``tools`` stream and
    the folded text are the output alone. (A tool in process: the beats are
    the call's, whatever the tool runs.)"""
    bash = as_langchain_tool(quiet_tool(1.0), timeout_ms=CALL_DEADLINE_MS, heartbeat_s=0.1)
    graph = agent_graph([bash], [{"name": "bash", "args": {}}])
    folder = ToolEventFolder()
    stream: list[tuple[str, Any]] = []
    async with asyncio.timeout(60):
        async for mode, payload in graph.astream(_start(), stream_mode=["tools", "custom"]):
            folder.absorb((mode, payload))
            stream.append((mode, payload))
    first = next(
        i
        for i, (mode, payload) in enumerate(stream)
        if mode == "tools" and payload["event"] == "tool-output-delta"
    )
    beats = [payload for mode, payload in stream[first:] if mode == "custom"]
    assert len(beats) >= 3
    assert all(beat["kigi"] == "heartbeat" for beat in beats)
    assert all(beat["tool_call_id"] == "call-0" for beat in beats)
    assert all(beat["text"].startswith("running ") for beat in beats)
    assert all(b["silent_s"] - a["silent_s"] >= 0.099 for a, b in itertools.pairwise(beats))
    call = folder.call("call-0")
    assert call is not None
    assert call.text == "a\nb\n"
    assert folder.ignored == len([1 for mode, _ in stream if mode == "custom"])
