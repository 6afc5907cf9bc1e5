"""Kigi tools given to a Google ADK agent (``kigi_tool_runtime.adk``), run by a
real ``Runner`` with an in-memory session service and a fake model (a
``BaseLlm`` that calls the tool, then answers in text; no network): split
characters, a flood through a small tail with every loss marked, a failing
command and a tool error, a cancel that leaves no process group, and bounded
memory with a slow consumer."""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from google.adk.agents import Agent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from host_tools import pieces_of, split_tool
from processes import until_group_gone
from pydantic import Field
from split_writer import SPLIT_TEXT

import kigi_tool_runtime.adk._privates as adk_privates
import kigi_tool_runtime.adk._tool as adk_tool
from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_runtime import Output, ShellTool, Tool, _upstream
from kigi_tool_runtime import tool as kigi_tool
from kigi_tool_runtime._call._held import BLIND_FRAMES
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime._upstream import UNSEEN
from kigi_tool_runtime.adk import AdkEventFolder, KigiAdkTool, adk_tools
from kigi_tool_runtime.adk._keys import META_FRAME, META_SEQ, RESPONSE_KEY
from kigi_tool_runtime.adk._mapping import adk_tool_name
from kigi_tool_runtime.testing import check_stream, python_writer_argv

PY = sys.executable
DEADLINE_S = 90
CALL_ID = "call-1"
SMALL_TAIL = 4096

UNIT = "ab é € 😀 xyz\n"
BLOCK = (UNIT * 4096).encode()
FLOOD_BLOCKS = 64
FLOOD = (
    "import sys\n"
    f"block = ({UNIT!r} * 4096).encode()\n"
    f"for _ in range({FLOOD_BLOCKS}):\n"
    "    sys.stdout.buffer.write(block)\n"
)
SLOW_FLOOD = (
    "import sys, time\n"
    "while True:\n"
    "    sys.stdout.write('tick ' * 100 + '\\n'); sys.stdout.flush(); time.sleep(0.01)\n"
)


#: What :data:`SPLIT` writes, piece by piece (for the in-process tool).
SPLIT_PIECES = pieces_of(SPLIT_TEXT, [4, 8, 12, 14])


class FakeModel(BaseLlm):
    """Calls ``tool`` with ``args`` (id :data:`CALL_ID`), then, once the
    function response is back, answers ``done``."""

    model: str = "fake"
    tool: str = "bash"
    args: dict[str, Any] = Field(default_factory=dict)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        if any(part.function_response for part in last.parts or []):
            part = types.Part(text="done")
        else:
            call = types.FunctionCall(name=self.tool, args=self.args, id=CALL_ID)
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


class Run:
    """One agent run's events, folded, and its session afterwards."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.folder = AdkEventFolder()
        self.saved: list[Event] = []

    def partials(self) -> list[Event]:
        return [e for e in self.events if e.partial]

    def frames(self) -> list[ToolCallProgressFrame[PartialResultPayload]]:
        out = []
        for event in self.partials():
            frame = (event.custom_metadata or {}).get(META_FRAME)
            if frame is not None:
                raw = msgspec.json.encode(frame)
                out.append(json_codec.decode(raw, ToolCallProgressFrame[PartialResultPayload]))
        return out

    def response(self) -> dict[str, Any]:
        for event in self.events:
            for part in (event.content.parts or []) if event.content else []:
                if part.function_response is not None and event.author != "bash":
                    assert part.function_response.response is not None
                    return part.function_response.response
        raise AssertionError("no function response")


async def _run(
    tool: KigiAdkTool, args: dict[str, Any], run: Run, *, consumer_delay: float = 0.0
) -> Run:
    agent = Agent(name="agent", model=FakeModel(tool=tool.name, args=args), tools=[tool])
    sessions = InMemorySessionService()
    runner = Runner(app_name="app", agent=agent, session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        run.events.append(event)
        run.folder.absorb(event)
        if consumer_delay:
            await asyncio.sleep(consumer_delay)
    saved = await sessions.get_session(app_name="app", user_id="u", session_id=session.id)
    assert saved is not None
    run.saved = list(saved.events)
    return run


@pytest.mark.parametrize(("cap", "real"), [(1, True), *((cap, False) for cap in range(5))])
async def test_split_characters_stream_whole_at_caps_0_to_4(cap: int, real: bool) -> None:
    """2-, 3- and 4-byte characters cut across writes stream whole at caps 0
    to 4: one partial event per frame, each within its cap (or one
    character), no U+FFFD in their text, none saved to the session; the
    folder's text is the output exactly and the function response has the
    model text and a complete loss report. Through a real command at cap 1,
    through an in-process tool at every cap."""
    # A real command once; every cap through an in-process tool writing
    # the same pieces (the promise is how ADK shows the frames).
    if real:
        tool = KigiAdkTool(ShellTool(max_delta_bytes=cap, tick=0.01))
        steps = [step for piece in SPLIT_PIECES for step in (piece, None)]
        args: dict[str, Any] = {"command": python_writer_argv(steps, tick_s=0.03)}
    else:
        tool = KigiAdkTool(split_tool(SPLIT_PIECES, cap=cap))
        args = {}
    async with asyncio.timeout(DEADLINE_S):
        run = await _run(tool, args, Run())
    frames = run.frames()
    assert len(frames) > 1
    assert len(run.partials()) == len(frames)
    for event, frame in zip(run.partials(), frames, strict=True):
        delta = frame.body.delta
        assert len(delta.encode()) <= cap or len(delta) == 1, (cap, delta)
        assert event.content is not None
        assert event.content.parts is not None
        text = event.content.parts[0].text or ""
        assert "\ufffd" not in text
        assert text == delta
    assert not any(event.partial for event in run.saved)
    call = run.folder[CALL_ID]
    assert call.text == SPLIT_TEXT
    assert call.complete
    response = run.response()
    assert response["result"].startswith(SPLIT_TEXT)
    assert response[RESPONSE_KEY]["complete"] is True
    assert response[RESPONSE_KEY]["frames"] == len(frames)
    assert run.events[-1].content is not None
    assert run.events[-1].content.parts is not None
    assert run.events[-1].content.parts[0].text == "done"


async def test_a_flood_through_a_small_tail_has_every_loss_marked() -> None:
    """A fast flood through a 4 KiB tail: every delta is the source's bytes at
    its place and every skipped byte is in a gap frame (``check_stream``);
    each gap frame's event text carries the loss marker; the folder and the
    function response say the call is not complete."""
    tool = KigiAdkTool(ShellTool(tail_capacity=SMALL_TAIL, max_delta_bytes=1024))
    async with asyncio.timeout(DEADLINE_S):
        run = await _run(tool, {"command": [PY, "-c", FLOOD]}, Run())
    frames = run.frames()
    checked = check_stream(frames, BLOCK * FLOOD_BLOCKS, tail_capacity=SMALL_TAIL, cap=1024)
    assert checked.lost, "a 4 KiB tail lost nothing of a fast flood"
    marked = 0
    for event, frame in zip(run.partials(), frames, strict=False):
        if frame.body.gap:
            assert event.content is not None
            assert event.content.parts is not None
            assert "bytes lost" in (event.content.parts[0].text or "")
            marked += 1
    assert marked == len(checked.lost)
    call = run.folder[CALL_ID]
    report = call.report()
    assert report is not None
    assert not report.complete
    assert not call.complete
    assert len(report.gaps) == len(checked.lost)
    assert call.text == checked.text
    response = run.response()
    assert response[RESPONSE_KEY]["complete"] is False
    assert response[RESPONSE_KEY]["loss"]["total_bytes"] == len(BLOCK) * FLOOD_BLOCKS


async def test_a_failing_command_and_a_tool_error(tmp_path: Path) -> None:
    """A command that exits 3 is a result whose text says so; a command that
    cannot start is an ``error`` response the folder marks failed."""
    tool = KigiAdkTool(ShellTool())
    async with asyncio.timeout(DEADLINE_S):
        failing = await _run(tool, {"command": "printf 'oops'; exit 3"}, Run())
        missing = tmp_path / "missing"
        broken = await _run(tool, {"command": "true", "cwd": str(missing)}, Run())
    response = failing.response()
    assert response["result"].startswith("oops")
    assert "exit code 3" in response["result"]
    assert failing.folder[CALL_ID].text == "oops"
    error = broken.response()
    assert "result" not in error
    assert str(missing) in error["error"]
    assert error[RESPONSE_KEY]["ok"] is False
    assert broken.folder[CALL_ID].failed


async def test_cancelling_the_run_stops_the_process_group(tmp_path: Path) -> None:
    """Cancelling the task consuming the run mid-output stops the command's
    whole process group."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; exec {PY} -c {shlex.quote(SLOW_FLOOD)}"
    run = Run()
    async with asyncio.timeout(DEADLINE_S):
        task = asyncio.create_task(_run(KigiAdkTool(ShellTool()), {"command": command}, run))
        while len(run.partials()) < 3:
            await asyncio.sleep(0.02)
        pid = int(pidfile.read_text())
        assert group_alive(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_group_gone(pid)


async def test_a_slow_consumer_keeps_the_event_queue_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a consumer that takes 2 ms an event, a flood never has more than
    ``max_pending_events`` (+1, the one just put) partial events waiting:
    the call pauses, the tool's bounded tail skips, and the skip is a loss."""
    seen: list[int] = []
    real = adk_tool._pending_events

    def counting(tool_context: Any) -> int | None:
        pending = real(tool_context)
        assert pending is not None, "the ADK internal the pacer reads is gone"
        seen.append(pending)
        return pending

    monkeypatch.setattr(adk_tool, "_pending_events", counting)
    bound = 8

    @kigi_tool(name="bash", max_delta_bytes=1024)
    async def flood(out: Output) -> None:
        """Write 160 blocks as fast as the call takes them (in process: the
        promise is the bound on ADK's queue, whatever the tool runs)."""
        for _ in range(160):
            out.write(BLOCK)
            await asyncio.sleep(0)

    tool = KigiAdkTool(flood, max_pending_events=bound)
    async with asyncio.timeout(DEADLINE_S):
        run = await _run(tool, {}, Run(), consumer_delay=0.002)
    assert seen
    assert max(seen) <= bound + 1
    assert max(seen) >= bound, "the consumer never fell behind"
    call = run.folder[CALL_ID]
    report = call.report()
    assert report is not None
    assert report.total_bytes == len(BLOCK) * 160
    assert not report.complete


def test_names_and_duplicates() -> None:
    """A kigi id ``a:b`` is named ``a__b``; two tools of one name are refused."""
    assert adk_tool_name("ns:grep") == "ns__grep"
    tools: list[Tool[Any]] = [ShellTool()]
    (made,) = adk_tools(tools)
    assert made.name == "bash"
    declaration = made._get_declaration()
    assert declaration.parameters_json_schema["type"] == "object"  # type: ignore[index]
    with pytest.raises(ValueError, match="both be named"):
        adk_tools([ShellTool(), ShellTool()])
    with pytest.raises(ValueError, match="max_pending_events"):
        KigiAdkTool(ShellTool(), max_pending_events=0)


def test_readme_adk_section_runs() -> None:
    """The README's ADK example runs as written: the live text, then the
    model text's first line and a complete fold."""
    from test_readme import _EXPECTED_OUTPUT, _block_with, _run_block

    marker = "KigiAdkTool(ShellTool())]"
    out = _run_block(_block_with(marker))
    for part in _EXPECTED_OUTPUT[marker]:
        assert part in out, out


@pytest.fixture
def fresh_adk_fence() -> Any:
    """The fence says its warnings afresh in each test."""
    adk_privates.GOOGLE_ADK.forget()
    yield
    adk_privates.GOOGLE_ADK.forget()


@pytest.mark.usefixtures("fresh_adk_fence")
async def test_the_pinned_adk_is_in_range_and_its_event_queue_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside the range the ``google-adk`` extra pins, a call reads the run's
    event queue (``_privates`` Rule 1) with no warning, so pacing is on."""
    seen: list[Any] = []
    real = adk_privates.pending_events

    def recording(tool_context: Any) -> Any:
        seen.append(real(tool_context))
        return seen[-1]

    monkeypatch.setattr(adk_tool, "pending_events", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        async with asyncio.timeout(DEADLINE_S):
            await _run(KigiAdkTool(ShellTool()), {"command": "echo hi"}, Run())
    assert seen
    assert all(isinstance(pending, int) for pending in seen)
    assert adk_privates.GOOGLE_ADK.usable("unused")


@pytest.mark.usefixtures("fresh_adk_fence")
def test_an_invocation_without_its_event_queue_is_unseen_and_said_once() -> None:
    """An invocation context with no ``_event_queue`` (another ADK's shape)
    is :data:`UNSEEN`, said by one ``RuntimeWarning`` however often it is read."""
    context = SimpleNamespace(get_invocation_context=lambda: SimpleNamespace())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        seen = [adk_privates.pending_events(context) for _ in range(3)]
    assert seen == [UNSEEN] * 3
    assert len(said) == 1
    assert re.match(r"google-adk \S+ has no asyncio.Queue", str(said[0].message))


@pytest.mark.usefixtures("fresh_adk_fence")
async def test_adk_out_of_range_bounds_each_call_blind_and_warns_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With google-adk outside the pinned range, its event queue is not read:
    one ``RuntimeWarning`` names the package, the version and what degrades,
    and a flood yields at most ``BLIND_FRAMES`` partial events, then its last
    frame after one marker line; the fold counts every byte and the loss."""
    monkeypatch.setattr(_upstream, "installed", lambda package: "99.0")
    tool = KigiAdkTool(ShellTool(max_delta_bytes=1024, tick=0.01))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        async with asyncio.timeout(DEADLINE_S):
            run = await _run(tool, {"command": [PY, "-c", FLOOD]}, Run())
    ours = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
    ours = [m for m in ours if "google-adk" in m]
    assert len(ours) == 1, ours
    assert "google-adk 99.0 is outside the range" in ours[0]
    assert "holds the rest back" in ours[0]
    frames = run.frames()
    assert len(frames) == BLIND_FRAMES + 1
    seqs = [
        event.custom_metadata[META_SEQ]
        for event in run.partials()
        if event.custom_metadata and META_FRAME in event.custom_metadata
    ]
    assert seqs[-1] > seqs[-2] + 1
    texts = [
        "".join(part.text or "" for part in (event.content.parts or []))
        for event in run.partials()
        if event.content is not None and META_FRAME in (event.custom_metadata or {})
    ]
    assert re.match(r"\n?\[\.\.\. \d+ frames dropped here \.\.\.\]\n", texts[-1])
    report = run.folder[CALL_ID].report()
    assert report is not None
    assert report.total_bytes == len(BLOCK) * FLOOD_BLOCKS
    assert not report.complete
