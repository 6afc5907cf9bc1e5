"""``kigi_tool_runtime.pydantic_ai``: kigi tools served to a real pydantic-ai
``Agent`` (its ``FunctionModel`` scripted to call the shell tool), their output
streamed as ``kigi.tool_output`` events and folded back exactly."""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import json
import re
import sys
import warnings
from collections.abc import AsyncIterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from host_tools import quiet_tool, split_tool
from processes import group_running, until_group_gone
from pydantic_ai import (
    Agent,
    CancellationToken,
    CustomEvent,
    FunctionToolResultEvent,
    RunCancelled,
    RunContext,
    RunTimedOut,
    UsageLimits,
)
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.models.test import TestModel
from pydantic_ai_models import Call, Script, kigi_frame

from kigi_tool_runtime import (
    Appended,
    CallProgress,
    Client,
    ShellTool,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    _upstream,
)
from kigi_tool_runtime._call._held import BLIND_FRAMES
from kigi_tool_runtime._consumer._loss import TRUNCATION_MARKER
from kigi_tool_runtime.pydantic_ai import (
    KigiToolHeartbeat,
    KigiToolOutput,
    KigiToolOutputEnd,
    KigiToolset,
    ToolOutputFolder,
    _privates,
)
from kigi_tool_runtime.pydantic_ai._mapping import tool_definition, tool_name
from kigi_tool_runtime.pydantic_ai._toolset import MAX_PENDING_EVENTS
from kigi_tool_runtime.testing import check_stream, python_writer_argv

PY = sys.executable
#: Every 2-, 3- and 4-byte character cut at every place inside it.
SPLIT_CHARACTERS = ("é", "€", "😀")
CAPS = (0, 1, 2, 3, 4, 64)


async def _run(
    agent: Agent[None, str], prompt: str = "go", **options: Any
) -> tuple[list[Any], ToolOutputFolder]:
    """Run ``agent`` through ``run_stream_events`` under a deadline: every
    event, and the folder that absorbed them."""
    folder = ToolOutputFolder()
    events: list[Any] = []
    async with asyncio.timeout(60), agent.run_stream_events(prompt, **options) as agent_events:
        async for event in agent_events:
            folder.absorb(event)
            events.append(event)
    return events, folder


def _outputs(events: list[Any], call_id: str | None = None) -> list[KigiToolOutput]:
    return [
        event
        for event in events
        if isinstance(event, KigiToolOutput) and call_id in (None, event.tool_call_id)
    ]


def _split_steps() -> tuple[list[bytes | None], bytes]:
    """Writes that cut each multi-byte character at every inner place, with a
    pause (longer than the tool's tick) between the two halves."""
    steps: list[bytes | None] = []
    for char in SPLIT_CHARACTERS:
        raw = char.encode()
        for cut in range(1, len(raw)):
            steps += [raw[:cut], None, raw[cut:] + b" ", None]
    steps.append(b"end\n")
    source = b"".join(step for step in steps if step is not None)
    return steps, source


# -- the toolset -------------------------------------------------------------------


class _Namespaced(Tool[msgspec.Struct]):
    id = "files:read"
    description = "Read a file."
    args_type = msgspec.Struct

    async def run(self, ctx: ToolContext, args: msgspec.Struct) -> Any:
        return "read"


class _Clash(Tool[msgspec.Struct]):
    id = "files__read"
    args_type = msgspec.Struct

    async def run(self, ctx: ToolContext, args: msgspec.Struct) -> Any:
        return "clash"


async def test_the_model_is_offered_each_tool_with_its_schema() -> None:
    """The model sees the shell tool named `bash` with its description and an
    object schema; a namespaced id `a:b` is named `a__b`."""
    script = Script("done")
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool(), _Namespaced()])])
    await agent.run("go")
    offered = {tool.name: tool for tool in script.tools}
    assert set(offered) == {"bash", "files__read"}
    bash = offered["bash"]
    assert bash.description == ShellTool().description
    schema = bash.parameters_json_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["command"]
    assert "$ref" not in schema
    assert bash.metadata["kigi_tool_id"] == "bash"
    assert tool_name("files:read") == "files__read"
    assert tool_definition(_Namespaced()).name == "files__read"


async def test_arguments_testmodel_makes_from_the_schema_pass_the_check() -> None:
    """pydantic-ai's TestModel calls the shell tool with arguments it makes
    from the schema alone: they pass the strict check, the command runs (no
    such program: exit 127) and its output folds whole."""
    agent = Agent(TestModel(call_tools=["bash"]), toolsets=[KigiToolset([ShellTool()])])
    events, folder = await _run(agent)
    ((call_id, folded),) = folder.calls.items()
    (result,) = [e for e in events if isinstance(e, FunctionToolResultEvent)]
    assert result.tool_call_id == call_id
    assert result.part.outcome == "success"
    assert folded.value["exit_code"] == 127
    assert folded.text == folded.value["output"]
    assert folded.text
    assert folded.complete
    assert "[exit code 127;" in result.part.content


def test_two_tools_with_one_name_are_refused() -> None:
    """`a:b` and `a__b` would share a name: the toolset says so at once."""
    with pytest.raises(ValueError, match="'files:read' and 'files__read' would both be named"):
        KigiToolset([_Namespaced(), _Clash()])


# -- output, live and exact ----------------------------------------------------------


@pytest.mark.parametrize(("cap", "real"), [(2, True), *((cap, False) for cap in CAPS)])
async def test_split_characters_stream_whole_at_every_cap(cap: int, real: bool) -> None:
    """2-, 3- and 4-byte characters cut across ticks: each event's delta is
    whole characters within the cap (or one character), the texts add up to
    the output exactly, the fold agrees, and the model reads the output.
    Through a real command once, through an in-process tool at every cap."""
    steps, source = _split_steps()
    text = source.decode()
    if real:
        call = Call("bash", {"command": python_writer_argv(steps, tick_s=0.03)}, "c1")
        tool: Tool[Any] = ShellTool(tick=0.01, max_delta_bytes=cap)
    else:
        call = Call("bash", {}, "c1")
        tool = split_tool([step for step in steps if step is not None], cap=cap)
    script = Script([call])
    toolset = KigiToolset([tool])
    events, folder = await _run(Agent(script.model(), toolsets=[toolset]))

    outputs = _outputs(events)
    assert [event.seq for event in outputs] == list(range(len(outputs)))
    assert "".join(event.text for event in outputs) == text
    frames = [kigi_frame(event.frame) for event in outputs]
    assert all(frame.tool_call_id == "c1" for frame in frames)
    check_stream(frames, source, cap=cap, lossless=True)
    for event in outputs:
        assert event.delta == event.text
        assert len(event.delta.encode()) <= max(cap, 1) or len(event.delta) == 1
    assert all(event.tool_call_id == "c1" and event.tool_name == "bash" for event in outputs)

    folded = folder["c1"]
    assert folded.text == text
    report = folded.report()
    assert report is not None
    assert report.complete
    assert folded.complete
    assert folded.ended
    assert not folded.failed
    assert folded.metadata is not None
    assert folded.metadata["loss"]["complete"] is True
    (returned,) = script.returns()
    assert returned.outcome == "success"
    if real:
        assert folded.value["output"] == text
        assert folded.value["exit_code"] == 0
        assert returned.content.startswith(text + "\n[exit code 0;")
    else:
        assert folded.value == "written"
        assert returned.content.startswith(text)


async def test_events_arrive_while_the_command_runs(tmp_path: Path) -> None:
    """The first frame's event reaches the run's consumer while the command
    still runs: the command waits for a file the consumer writes on seeing it."""
    flag = tmp_path / "flag"
    command = f"printf 'first\\n'; while [ ! -e {flag} ]; do sleep 0.02; done; printf 'second\\n'"
    script = Script([Call("bash", {"command": command}, "c1")])
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool(tick=0.01)])])
    texts = []
    async with asyncio.timeout(30), agent.run_stream_events("go") as agent_events:
        async for event in agent_events:
            if isinstance(event, KigiToolOutput):
                texts.append(event.text)
                flag.touch()
    assert "".join(texts) == "first\nsecond\n"
    assert texts[0] == "first\n"


async def test_an_event_stream_handler_folds_the_same_as_run_stream_events() -> None:
    """`agent.run(event_stream_handler=folder.event_stream_handler)` folds the
    call, and `on_appended` hears every frame's Appended."""
    heard: list[Appended] = []
    folder = ToolOutputFolder(on_appended=heard.append)
    script = Script([Call("bash", {"command": "printf 'grüße ✓ 😀\\n'"}, "c1")])
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool()])])
    async with asyncio.timeout(30):
        result = await agent.run("go", event_stream_handler=folder.event_stream_handler)
    assert folder["c1"].text == "grüße ✓ 😀\n"
    assert "".join(event.text or "" for event in heard) == "grüße ✓ 😀\n"
    assert result.output.startswith("saw: grüße ✓ 😀\n\n[exit code 0;")


#: A stdio server (the real one, `serve_stdio`) whose one tool streams the
#: frames recorded in a file: the same frames, carried by the stdio transport.
_REPLAY_SERVER = """
import asyncio, json, msgspec
from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec, ToolCapabilities
from kigi_tool_runtime import Tool, ToolResult, serve_stdio

class Args(msgspec.Struct):
    path: str

class Replay(Tool[Args]):
    id = "replay"
    args_type = Args
    capabilities = ToolCapabilities(streaming=StreamingSpec(subkind="bash_output_chunk"))

    async def execute(self, ctx, args):
        with open(args.path) as recorded:
            frames = json.load(recorded)
        for frame in frames:
            payload = msgspec.convert(frame["body"], PartialResultPayload)
            yield CustomProgress(subkind=frame["kind"], payload=payload)
        yield ToolResult(value=len(frames))

asyncio.run(serve_stdio([Replay()]))
"""


async def test_a_flood_through_a_small_tail_folds_as_the_stdio_client_folds(
    tmp_path: Path,
) -> None:
    """A flood through a 4 KiB tail: every lost byte is in a gap that
    `check_stream` places in the source, and the model is told of the loss.
    The same frames carried by a real stdio server to the stdio `Client` fold
    to the same gaps, report and appended() events as the folder's."""
    unit = "ab é € 😀 xyz\n"
    count = 40_000
    source = (unit * count).encode()
    writer = f"import sys\nsys.stdout.write({unit!r} * {count})\n"
    tail = 4096
    tool = ShellTool(tick=0.01, tail_capacity=tail, max_delta_bytes=1024)
    script = Script([Call("bash", {"command": [PY, "-c", writer]}, "c1")])
    heard: list[Appended] = []
    folder = ToolOutputFolder(on_appended=heard.append)
    outputs: list[KigiToolOutput] = []

    async def handler(ctx: Any, events: AsyncIterable[Any]) -> None:
        async for event in events:
            folder.absorb(event)
            if isinstance(event, KigiToolOutput):
                outputs.append(event)

    async with asyncio.timeout(60):
        agent = Agent(script.model(), toolsets=[KigiToolset([tool])])
        await agent.run("go", event_stream_handler=handler)

    folded = folder["c1"]
    frames = [kigi_frame(event.frame) for event in outputs]
    assert [event.seq for event in outputs] == list(range(folded.frames))
    checked = check_stream(frames, source, cap=1024, tail_capacity=tail)
    assert checked.lost, "a 520 KB flood through a 4 KiB tail lost nothing"
    report = folded.report()
    assert report is not None
    assert not report.complete
    assert len(report.gaps) == len(checked.lost)
    lost = sum(span.end - span.start for span in checked.lost)
    assert report.lost_bytes_min <= lost <= report.lost_bytes
    assert folded.text == checked.text
    assert report.text_bytes + lost == len(source) == report.total_bytes
    assert folded.metadata is not None
    assert folded.metadata["complete"] is False
    (returned,) = script.returns()
    assert "[kigi: the live output lost" in returned.content

    recorded = tmp_path / "frames.json"
    recorded.write_text(json.dumps([event.frame for event in outputs]))
    async with asyncio.timeout(60), await Client.spawn([PY, "-c", _REPLAY_SERVER]) as client:
        call = client.call("replay", {"path": str(recorded)}, tool_call_id="c1")
        stdio = [item.appended async for item in call if isinstance(item, CallProgress)]
    assert stdio == heard
    assert call.reassembler.reports(ended=True) == [report]
    assert call.reassembler.reports(ended=True)[0].gaps == report.gaps


async def test_a_slow_consumer_pauses_the_tool_instead_of_growing_the_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer slower than a flood: at most `max_pending_events` events
    wait in pydantic-ai's buffer (an observer on `RunContext.emit` reads it),
    the tool's bounded tail reports what it skipped as gaps, and the fold
    still accounts for every byte."""
    waiting: list[int] = []
    emit = RunContext.emit

    async def observed(self: RunContext[Any], event: Any) -> Any:
        emitted = await emit(self, event)
        waiting.append(len(self._event_stream_buffer or ()))
        return emitted

    monkeypatch.setattr(RunContext, "emit", observed)
    size = 8_000_000
    writer = (
        f"import os\nblock = b'x' * 65536\nfor _ in range({size // 65536}): os.write(1, block)\n"
    )
    tool = ShellTool(tick=0.01, tail_capacity=65536)
    script = Script([Call("bash", {"command": [PY, "-c", writer]}, "c1")])
    agent = Agent(script.model(), toolsets=[KigiToolset([tool], max_pending_events=16)])
    folder = ToolOutputFolder(keep_text=False)
    async with asyncio.timeout(60), agent.run_stream_events("go") as agent_events:
        async for event in agent_events:
            folder.absorb(event)
            if isinstance(event, KigiToolOutput):
                await asyncio.sleep(0.002)
    assert max(waiting) <= 16 + 1
    report = folder["c1"].report()
    assert report is not None
    assert report.gaps
    assert report.total_bytes == (size // 65536) * 65536
    assert report.text_bytes + report.lost_bytes == report.total_bytes


# -- failures ------------------------------------------------------------------------


async def test_a_failing_command_returns_its_exit_status_to_the_model() -> None:
    """A command that fails is a result: the model reads its output and exit
    code, the application its outcome."""
    script = Script([Call("bash", {"command": "echo oops >&2; exit 3"}, "c1")])
    _events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([ShellTool()])]))
    (returned,) = script.returns()
    assert returned.outcome == "success"
    assert returned.content.startswith("oops\n\n[exit code 3;")
    assert folder["c1"].value["exit_code"] == 3
    assert folder["c1"].text == "oops\n"


async def test_a_kigi_error_is_a_failed_call_the_model_sees(tmp_path: Path) -> None:
    """A command that cannot start (no such directory) is a kigi execution
    error: the model sees a failed tool call with the error's kind and code,
    no traceback, and the run goes on to the model's answer."""
    missing = tmp_path / "missing"
    script = Script([Call("bash", {"command": "true", "cwd": str(missing)}, "c1")], "fine")
    events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([ShellTool()])]))
    (returned,) = script.returns()
    assert returned.outcome == "failed"
    assert returned.content.startswith("execution error (")
    assert str(missing) in returned.content
    assert "Traceback" not in returned.content
    (end,) = [event for event in events if isinstance(event, KigiToolOutputEnd)]
    assert end.ok is False
    assert end.frames == 0
    assert folder["c1"].failed
    assert folder["c1"].value is None
    assert events[-1].result.output == "fine"


class _Broken(Tool[msgspec.Struct]):
    id = "broken"
    args_type = msgspec.Struct

    async def run(self, ctx: ToolContext, args: msgspec.Struct) -> Any:
        raise RuntimeError("the disk caught fire")


async def test_a_tool_that_raises_is_a_failed_call_without_a_traceback() -> None:
    """An exception inside a kigi tool reaches the model as a failed call with
    the kigi error text, never as a traceback, and never stops the run."""
    script = Script([Call("broken", {}, "c1")], "fine")
    _events, _ = await _run(Agent(script.model(), toolsets=[KigiToolset([_Broken()])]))
    (returned,) = script.returns()
    assert returned.outcome == "failed"
    assert returned.content.startswith("execution error (")
    assert "the disk caught fire" in returned.content
    assert "Traceback" not in returned.content


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"cmd": "echo hi"}, "unknown field `cmd`; it takes {command (required)"),
        ({"command": "true", "timeout_ms": "soon"}, "`$.timeout_ms`"),
        ({"command": ""}, "length >= 1"),
    ],
)
async def test_bad_arguments_are_retried_with_what_was_wrong(
    bad: dict[str, Any], says: str
) -> None:
    """Arguments the tool refuses never run: the model gets a retry naming
    the field and what the tool takes, and its corrected call runs."""
    script = Script(
        [Call("bash", bad, "c1")],
        [Call("bash", {"command": "echo fixed"}, "c2")],
    )
    _events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([ShellTool()])]))
    first, second = script.returns()
    assert first.outcome == "retried"
    assert says in str(first.content)
    assert second.outcome == "success"
    assert second.content.startswith("fixed\n\n[exit code 0;")
    assert set(folder.calls) == {"c2"}


async def test_arguments_refused_past_the_retry_budget_end_the_run() -> None:
    """With `max_retries=0` a refused call is not retried: pydantic-ai ends the
    run, naming the tool."""
    script = Script([Call("bash", {"cmd": "x"}, "c1")])
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool()], max_retries=0)])
    with pytest.raises(UnexpectedModelBehavior, match="bash"):
        await _run(agent)


# -- the end of the output -------------------------------------------------------------


async def test_output_cut_at_the_limit_closes_with_the_truncation_marker() -> None:
    """Output past the tool's hard limit: the end event's closing text is the
    truncation marker, the fold says truncated, the model is told."""
    tool = ShellTool(limit=10)
    script = Script([Call("bash", {"command": "printf '%0100d' 0"}, "c1")])
    events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([tool])]))
    (end,) = [event for event in events if isinstance(event, KigiToolOutputEnd)]
    assert TRUNCATION_MARKER in end.closing
    assert end.complete is False
    assert end.loss["truncated"] is True
    assert folder["c1"].closing == end.closing
    report = folder["c1"].report()
    assert report is not None
    assert report.truncated
    (returned,) = script.returns()
    assert "truncated at the output limit" in returned.content


async def test_without_live_output_no_frame_is_made_and_the_result_is_the_same() -> None:
    """`live=False`: no kigi.tool_output event, one end event, the same
    result text and value."""
    script = Script([Call("bash", {"command": "echo quiet"}, "c1")])
    toolset = KigiToolset([ShellTool()], live=False)
    events, folder = await _run(Agent(script.model(), toolsets=[toolset]))
    assert _outputs(events) == []
    (returned,) = script.returns()
    assert returned.content.startswith("quiet\n\n[exit code 0;")
    assert folder["c1"].text is None
    assert folder["c1"].value["output"] == "quiet\n"


async def test_parallel_calls_fold_apart() -> None:
    """Two calls in one response run at once; each event names its call and
    each call folds to its own output."""
    script = Script(
        [
            Call("bash", {"command": "for i in 1 2 3; do echo a$i; sleep 0.05; done"}, "ca"),
            Call("bash", {"command": "for i in 1 2 3; do echo b$i; sleep 0.05; done"}, "cb"),
        ]
    )
    events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([ShellTool()])]))
    assert folder["ca"].text == "a1\na2\na3\n"
    assert folder["cb"].text == "b1\nb2\nb3\n"
    for call_id in ("ca", "cb"):
        assert all(kigi_frame(e.frame).tool_call_id == call_id for e in _outputs(events, call_id))


@pytest.mark.parametrize(
    "stop",
    ["cancellation token", "task cancel", "run timeout", "tool timeout"],
)
async def test_a_stopped_run_leaves_no_process(tmp_path: Path, stop: str) -> None:
    """Cancelling the run (its token, or its task), the run's time limit and
    the toolset's time limit each stop the call and the command's whole
    process group, a background child included."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; (sleep 60) & echo started; sleep 60"
    script = Script([Call("bash", {"command": command}, "c1")], "after")
    limit = 1.0 if stop == "tool timeout" else None
    # A short SIGTERM-to-SIGKILL grace: the stop is proven by the group gone,
    # not by how long a group that lingers is given.
    shell = ShellTool(tick=0.01, grace=0.3)
    agent = Agent(script.model(), toolsets=[KigiToolset([shell], timeout=limit)])
    token = CancellationToken()
    options: dict[str, Any] = {"cancellation_token": token}
    if stop == "run timeout":
        options["timeout"] = 1.0
    seen: list[str] = []

    async def consume() -> str:
        async with agent.run_stream_events("go", **options) as agent_events:
            async for event in agent_events:
                if isinstance(event, KigiToolOutput):
                    seen.append(event.text)
                    if stop == "cancellation token":
                        token.cancel()
                    elif stop == "task cancel":
                        task.cancel()
                if isinstance(event, FunctionToolResultEvent):
                    seen.append(f"result {event.part.outcome}")
        return "finished"

    async with asyncio.timeout(30):
        task = asyncio.create_task(consume())
        if stop in ("cancellation token",):
            with pytest.raises(RunCancelled):
                await task
        elif stop == "task cancel":
            with pytest.raises(asyncio.CancelledError):
                await task
        elif stop == "run timeout":
            with pytest.raises(RunTimedOut):
                await task
        else:
            assert await task == "finished"
            assert seen[-1] == "result failed"
            (returned,) = script.returns()
            assert returned.content.startswith("timeout error (")
        pid = int(pidfile.read_text())
        # Dead, not reaped: an orphan's zombie waits for init, which may take seconds.
        await until_group_gone(pid)
    assert not group_running(pid)
    assert seen[0] == "started\n"


async def test_a_usage_limit_starts_no_call_past_it(tmp_path: Path) -> None:
    """`UsageLimits(tool_calls_limit=1)`: the first call runs, the run ends with
    UsageLimitExceeded before the second call's command ever starts."""
    marker = tmp_path / "second"
    script = Script(
        [Call("bash", {"command": "echo one"}, "c1")],
        [Call("bash", {"command": f"touch {marker}"}, "c2")],
    )
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool()])])
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit of 1"):
        await _run(agent, usage_limits=UsageLimits(tool_calls_limit=1))
    assert [part.tool_call_id for part in script.returns()] == ["c1"]
    assert not marker.exists()


async def test_a_prepared_time_limit_is_the_calls_deadline(tmp_path: Path) -> None:
    """A `prepared` toolset that sets the tool definition's `timeout` bounds
    the call: the command is stopped and the model sees a timeout failure."""
    pidfile = tmp_path / "pid"

    async def limit(ctx: Any, definitions: list[Any]) -> list[Any]:
        return [replace(definition, timeout=0.5) for definition in definitions]

    script = Script([Call("bash", {"command": f"echo $$ > {pidfile}; sleep 30"}, "c1")], "ok")
    toolset = KigiToolset([ShellTool()]).prepared(limit)
    await _run(Agent(script.model(), toolsets=[toolset]))
    (returned,) = script.returns()
    assert returned.outcome == "failed"
    assert returned.content.startswith("timeout error (")
    await until_group_gone(int(pidfile.read_text()))


def test_bounds_out_of_range_are_refused() -> None:
    """A `timeout` of 0 or below and a `max_pending_events` below 1 are
    refused at once, naming the value; the default bound is the stdio
    client's."""
    with pytest.raises(ValueError, match="timeout must be > 0 seconds or None, got 0"):
        KigiToolset([ShellTool()], timeout=0)
    with pytest.raises(ValueError, match="max_pending_events must be at least 1, got 0"):
        KigiToolset([ShellTool()], max_pending_events=0)
    assert KigiToolset([ShellTool()]).max_pending_events == MAX_PENDING_EVENTS == 1024


# -- the folder, beyond kigi events ------------------------------------------------------


class _Progress(CustomEvent, name="tests.progress"):
    pass


async def test_other_events_are_left_alone() -> None:
    """Events that are not kigi's answer None and add no call; results of
    tools that streamed nothing of kigi's are not recorded."""
    folder = ToolOutputFolder()
    script = Script([Call("bash", {"command": "echo x"}, "c1")])
    events, _ = await _run(Agent(script.model(), toolsets=[KigiToolset([ShellTool()])]))
    for event in events:
        if not isinstance(event, KigiToolOutput | KigiToolOutputEnd | FunctionToolResultEvent):
            assert folder.absorb(event) is None
    assert folder.calls == {}
    results = [event for event in events if isinstance(event, FunctionToolResultEvent)]
    assert folder.absorb(results[0]) is None
    assert folder.calls == {}


def test_a_payload_that_is_no_frame_is_reported_never_taken_for_output() -> None:
    """What a UI adapter forwarded under the kigi name but holding no kigi
    frame is an anomaly of its call, not output; a payload naming no call is
    counted; other names are left alone."""
    folder = ToolOutputFolder()
    appended = folder.absorb_custom(
        "kigi.tool_output", {"tool_call_id": "c1", "seq": 0, "text": "hi", "frame": {"x": 1}}
    )
    assert appended is not None
    assert appended.text is None
    assert appended.anomalies
    assert folder["c1"].text is None
    assert not folder["c1"].complete
    assert folder.absorb_custom("kigi.tool_output", {"text": "who?"}) is None
    assert folder.unattributed == 1
    assert folder.absorb_custom("data-other", {"tool_call_id": "c1"}) is None
    assert folder.absorb_custom("kigi.tool_output", "not a mapping") is None
    assert folder.unattributed == 2


class _Echo(Tool[msgspec.Struct]):
    """A tool whose value is not text (a dict), failing on request."""

    id = "echo"
    args_type = msgspec.Struct

    async def run(self, ctx: ToolContext, args: msgspec.Struct) -> Any:
        if ctx.call_id == "bad":
            raise ToolError("forbidden", "not allowed here")
        return ToolResult(value={"ok": True})


class _Awkward(msgspec.Struct, forbid_unknown_fields=True):
    tool: str
    ctx: int


class _AwkwardTool(Tool[_Awkward]):
    """A tool whose arguments are named like the check's own parameters."""

    id = "awkward"
    args_type = _Awkward

    async def run(self, ctx: ToolContext, args: _Awkward) -> Any:
        return f"{args.tool}:{args.ctx}"


async def test_arguments_named_tool_and_ctx_are_checked_like_any_other() -> None:
    """Arguments called `tool` and `ctx` reach the tool; a wrong type among
    them is retried with its path."""
    script = Script(
        [Call("awkward", {"tool": "x", "ctx": "one"}, "c1")],
        [Call("awkward", {"tool": "x", "ctx": 1}, "c2")],
    )
    tool = _AwkwardTool()
    toolset = KigiToolset([tool])
    assert toolset.tools == {"awkward": tool}
    await _run(Agent(script.model(), toolsets=[toolset]))
    first, second = script.returns()
    assert first.outcome == "retried"
    assert "`$.ctx`" in str(first.content)
    assert second.content == "x:1"


async def test_a_non_streaming_tool_returns_its_value_as_json() -> None:
    """A tool that never streams: the model reads its value as JSON, the
    application gets it in the metadata; a forbidden call is a failure."""
    script = Script([Call("echo", {}, "good"), Call("echo", {}, "bad")])
    _events, folder = await _run(Agent(script.model(), toolsets=[KigiToolset([_Echo()])]))
    bad, good = sorted(script.returns(), key=lambda part: part.tool_call_id)
    assert (bad.tool_call_id, bad.outcome) == ("bad", "failed")
    assert bad.content == "forbidden error (-32003): not allowed here"
    assert good.content == '{"ok":true}'
    assert folder["good"].value == {"ok": True}
    assert folder["good"].report() is None


def test_the_public_surface_is_all_of_it() -> None:
    """`kigi_tool_runtime.pydantic_ai.__all__` is a tuple naming every public
    attribute once, and nothing private."""
    import kigi_tool_runtime.pydantic_ai as module

    exported = module.__all__
    assert isinstance(exported, tuple)
    assert len(exported) == len(set(exported))
    public = {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), type(module))
    }
    assert public == set(exported)


def test_readme_pydantic_ai_section_runs() -> None:
    """The README's pydantic-ai example runs as written: the output live,
    the model's answer from the tool's text, a complete fold and the value."""
    from test_readme import _EXPECTED_OUTPUT, _block_with, _run_block

    marker = "KigiToolset([ShellTool()])"
    out = _run_block(_block_with(marker))
    for part in _EXPECTED_OUTPUT[marker]:
        assert part in out, out


@pytest.fixture
def fresh_pydantic_ai_fence() -> Any:
    """The fence says its warnings afresh in each test."""
    _privates.PYDANTIC_AI.forget()
    yield
    _privates.PYDANTIC_AI.forget()


@pytest.mark.usefixtures("fresh_pydantic_ai_fence")
async def test_the_pinned_pydantic_ai_is_in_range_and_its_event_buffer_is_read() -> None:
    """Inside the range the ``pydantic-ai`` extra pins, a streamed run's event
    buffer is read live (``_privates`` Rule 1) with no warning, so pacing is on."""
    seen: list[Any] = []

    class Probe(KigiToolset):
        async def call_tool(self, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
            seen.append(_privates.event_buffer(ctx))
            return await super().call_tool(name, tool_args, ctx, tool)

    script = Script([Call("bash", {"command": "echo hi"}, "c1")])
    agent = Agent(script.model(), toolsets=[Probe([ShellTool()])])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        async with asyncio.timeout(60), agent.run_stream_events("go") as agent_events:
            async for _ in agent_events:
                pass
    (buffer,) = seen
    assert isinstance(buffer, list)
    assert _privates.PYDANTIC_AI.usable("unused")


@pytest.mark.usefixtures("fresh_pydantic_ai_fence")
@pytest.mark.parametrize("how", ["field gone", "out of range"])
async def test_pydantic_ai_internals_gone_bound_each_call_blind_and_warn_once(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Where the event buffer cannot be read (the private field gone, or
    pydantic-ai outside the pinned range), one ``RuntimeWarning`` names the
    package, its version and what degrades, and each of two calls emits at
    most ``BLIND_FRAMES`` frames, then its last frame after one marker line:
    the fold sees the loss and counts every byte."""
    if how == "field gone":
        monkeypatch.setattr(_privates, "_FIELD", "_gone_event_stream_buffer")
    else:
        monkeypatch.setattr(_upstream, "installed", lambda package: "99.0")
    size = 2_000_000
    writer = f"import os\nfor _ in range({size // 4000}): os.write(1, b'y' * 4000)\n"
    tool = ShellTool(tick=0.01, max_delta_bytes=1024)
    calls = [Call("bash", {"command": [PY, "-c", writer]}, f"c{i}") for i in (1, 2)]
    agent = Agent(Script(calls).model(), toolsets=[KigiToolset([tool])])
    folder = ToolOutputFolder(keep_text=False)
    events: list[Any] = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        async with asyncio.timeout(120), agent.run_stream_events("go") as agent_events:
            async for event in agent_events:
                folder.absorb(event)
                events.append(event)
    ours = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
    ours = [m for m in ours if "pydantic-ai-slim" in m]
    assert len(ours) == 1, ours
    version = "99.0" if how == "out of range" else importlib.metadata.version("pydantic-ai-slim")
    assert version in ours[0]
    assert "holds the rest back" in ours[0]
    for call_id in ("c1", "c2"):
        outputs = _outputs(events, call_id)
        assert len(outputs) == BLIND_FRAMES + 1
        *shown, last = outputs
        assert re.search(r"\[\.\.\. \d+ frames dropped here \.\.\.\]\n", last.text)
        assert last.seq > shown[-1].seq + 1
        report = folder[call_id].report()
        assert report is not None
        assert report.total_bytes == size
        assert not report.complete


async def test_a_silent_call_emits_heartbeats_the_folder_does_not_take_as_output() -> None:
    """``heartbeat_s=0.1``: a tool silent for 1 s emits several
    ``kigi.tool_heartbeat`` events (each silence at least one interval longer
    than the one before) between its outputs; the folded text is the output.
    (A tool in process: the beats are the call's, whatever the tool runs.)"""
    script = Script([Call("bash", {}, "c1")])
    toolset = KigiToolset([quiet_tool(1.0)], heartbeat_s=0.1)
    events, folder = await _run(Agent(script.model(), toolsets=[toolset]))
    # A beat may come before the first line (a slow start): the silence after
    # the first line is the one measured here.
    first = next(i for i, event in enumerate(events) if isinstance(event, KigiToolOutput))
    beats = [event for event in events[first:] if isinstance(event, KigiToolHeartbeat)]
    assert len(beats) >= 3
    assert all(beat.tool_call_id == "c1" for beat in beats)
    assert all(b.silent_s - a.silent_s >= 0.099 for a, b in itertools.pairwise(beats))
    assert all(beat.text.startswith("running ") for beat in beats)
    assert beats[0].to_payload()["silent_s"] == beats[0].silent_s
    assert folder["c1"].text == "a\nb\n"
    assert "".join(output.text for output in _outputs(events)) == "a\nb\n"
