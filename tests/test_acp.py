"""kigi tools as ACP tool calls, end to end: the test agent on the SDK's
``AgentSideConnection`` in a child process, the SDK's own
``ClientSideConnection`` as the editor, real pipes between them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, ToolCallProgress, ToolCallStart
from acp_editor import AGENT, CAPABILITIES, Call, Editor, agent, content_text, markers, prompt
from docs_pages import blocks, page
from host_tools import every_byte, quiet_tool, split_tool
from processes import pid_alive, until_gone, until_group_gone

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import LiveText, Reassembler, ShellTool
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime.acp import AcpToolCalls
from kigi_tool_runtime.acp._mapping import (
    META_FRAME,
    META_LIVE,
    TERMINAL_OUTPUT,
    TERMINAL_OUTPUT_DELTA,
)
from kigi_tool_runtime.testing import python_writer_argv

#: Every test's own bound on the agent it drives.
DEADLINE_S = 90

#: A 2-, a 3- and a 4-byte character, twice, and a newline.
SPLIT_TEXT = "é€😀" * 2 + "\n"


def _frames(call: Call) -> list[tuple[int, ToolCallProgressFrame[Any]]]:
    """The kigi frames the call's updates carried, with their ``seq``."""
    frames = []
    for update in call.live:
        meta = update.field_meta or {}
        if META_FRAME in meta:
            frame = msgspec.convert(meta[META_FRAME], ToolCallProgressFrame[PartialResultPayload])
            frames.append((meta[META_LIVE]["seq"], frame))
    return frames


def _check_split_call(call: Call, cap: int) -> None:
    """What an appending client got of :data:`SPLIT_TEXT` written a byte at a
    time at ``cap``: every append valid text within the cap (or one
    character), the appends the output exactly, the frames they carried."""
    appends = call.appends()
    assert "".join(appends) == SPLIT_TEXT, cap
    assert call.view() == SPLIT_TEXT
    assert len(appends) > 1
    for data in appends:
        assert "\ufffd" not in data
        assert len(data.encode()) <= cap or len(data) == 1, (cap, data)
    assert [frame.body.delta for _, frame in _frames(call)] == appends
    assert call.last.status == "completed"
    assert SPLIT_TEXT in call.text()
    assert call.loss()["complete"] is True


async def test_split_characters_reach_the_terminal_whole() -> None:
    """A 2-, a 3- and a 4-byte character written a byte at a time by a real
    command reach an appending client of the real agent whole (cap 1; every
    cap is checked in process below)."""
    steps: list[bytes | None] = []
    for byte in SPLIT_TEXT.encode():
        steps += [bytes([byte]), None]
    command = python_writer_argv(steps, tick_s=0.03)
    async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES["append"]) as (conn, editor, _):
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        spec = {"args": {"command": command}, "shell": {"max_delta_bytes": 1, "tick": 0.01}}
        assert await prompt(conn, session.session_id, spec) == "end_turn"
        (call,) = editor.calls()
    _check_split_call(call, 1)
    assert call.start.kind == "execute"


@pytest.mark.parametrize("cap", range(5))
async def test_split_characters_reach_the_terminal_whole_at_caps_0_to_4(cap: int) -> None:
    """The same at caps 0 to 4, the tool in process (the promise is the
    mapping to appends): each character whole, each append within the cap."""
    editor = Editor()
    calls = AcpToolCalls(editor, client_capabilities={"_meta": CAPABILITIES["append"]})
    tool = split_tool(every_byte(SPLIT_TEXT), cap=cap)
    async with asyncio.timeout(DEADLINE_S):
        end = await calls.run("s1", tool, {})
    assert end.ok
    (call,) = editor.calls()
    _check_split_call(call, cap)


@pytest.mark.parametrize("mode", ["append", "content"])
async def test_each_capability_set_gets_its_updates(mode: str) -> None:
    """A client gets the output as it declared: appends, or (declaring neither)
    plain content updates with no terminal at all; the last update is the same
    for both but the terminal. Through the real agent for a terminal mode and
    the plain one; what replacing clients get (replacements alone, or with
    appends) is tested on the mapper in test_acp_mapping.py, and through the
    agent by the flood tests below."""
    assert set(CAPABILITIES) == {"append", "append_and_replace", "replace", "content"}
    command = "printf 'grüße '; sleep 0.05; printf '✓ 😀\\n'; sleep 0.05; printf 'done\\n'"
    output = "grüße ✓ 😀\ndone\n"
    async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES[mode] or None) as (conn, editor, _):
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        assert await prompt(conn, session.session_id, {"args": {"command": command}}) == "end_turn"
        (call,) = editor.calls()
    terminal = mode != "content"
    assert call.terminal() is terminal
    assert [item.type for item in call.start.content or []] == (["terminal"] if terminal else [])
    assert call.start.title == command
    if mode == "append":
        assert "".join(call.appends()) == output
        assert call.replacements() == []
    else:
        for update in call.updates:
            meta = update.field_meta or {}
            assert TERMINAL_OUTPUT not in meta
            assert TERMINAL_OUTPUT_DELTA not in meta
            assert "terminal_exit" not in meta
        assert all(output.startswith(content_text(u)) for u in call.live)
    assert call.rebuilt() == output or mode == "content"
    assert call.view() == (output if terminal else "")
    assert call.last.status == "completed"
    assert call.text().startswith(output + "\n[exit code 0;")
    assert (call.exit() is not None) is terminal
    assert [item.type for item in call.last.content or []] == (
        ["terminal", "content"] if terminal else ["content"]
    )
    assert call.last.raw_output["exit_code"] == 0


def _flood_spec(**extra: Any) -> dict[str, Any]:
    lines = 200_000  # 1.6 MB of numbered lines, far past a 4 KiB tail
    script = f"import sys\nfor i in range({lines}): sys.stdout.write(f'{{i:07d}}\\n')"
    return {
        "args": {"command": [sys.executable, "-c", script]},
        "shell": {"tail_capacity": 4096, "max_delta_bytes": 1024, "tick": 0.02},
        "tail_bytes": 4096,
        **extra,
    }


def _check_markers_match_the_report(call: Call, text: str) -> None:
    """The text an appending client rebuilt says every loss the report has:
    one marker per gap, each bounding the gap's final figures, and the rest of
    the text is the bytes the report says were delivered."""
    loss = call.loss()
    assert loss["complete"] is False
    gaps = loss["gaps"]
    said = markers(text)
    assert len(gaps) >= 1
    assert len(said) == len(gaps)
    for (low, high), gap in zip(said, gaps, strict=True):
        assert low <= gap["lost_min"] <= gap["lost_max"] <= high
    rest = re.sub(r"\[\.\.\. \d+(?:-\d+)? bytes lost \.\.\.\]\n", "", text).encode()
    # A marker starts a line: a newline is put before it when the text did not end with one.
    assert 0 <= len(rest) - loss["delivered_bytes"] <= len(said)
    lost = loss["lost_bytes"]
    accounted = loss["delivered_bytes"] + loss["undelivered_bytes"]
    assert accounted + lost["min"] <= loss["total_bytes"] <= accounted + lost["max"]


def _check_frames_fold_to_the_text(call: Call, text: str) -> None:
    """A kigi-aware client folds the frames the updates carried: the same live
    text, and the same loss report the last update gave."""
    live = LiveText(call.start.tool_call_id)
    folded = "".join(live.add(frame, seq).text for seq, frame in _frames(call))
    assert text.startswith(folded)
    report = live.report()
    assert report is not None
    assert len(report.gaps) == len(call.loss()["gaps"])
    fold = Reassembler()
    for seq, frame in _frames(call):
        fold.appended(frame, seq)
    assert fold.reports(ended=True)[0].lost_bytes == call.loss()["lost_bytes"]["max"]


@pytest.mark.slow
async def test_flood_through_a_small_tail_is_marked_and_resynchronised() -> None:
    """A flood through a 4 KiB tail loses bytes. An appending client's text
    says each loss where it happened, as the loss report counts it; a client
    that also replaces gets a replacement (with the marker) after a loss, and
    the two clients' texts, put together by kigi's offsets, agree."""
    texts = {}
    for mode in ("append", "append_and_replace"):
        async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES[mode]) as (conn, editor, _):
            session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
            assert await prompt(conn, session.session_id, _flood_spec()) == "end_turn"
            (call,) = editor.calls()
        text = call.rebuilt()
        _check_markers_match_the_report(call, text)
        _check_frames_fold_to_the_text(call, text)
        assert text.endswith("0199999\n")
        assert call.view().endswith("0199999\n")
        assert text.endswith(call.view())
        assert "[kigi: the live output lost" in call.text()
        texts[mode] = (call, text)
    call, text = texts["append"]
    assert call.replacements() == []
    assert "".join(call.appends()) == text
    call, _ = texts["append_and_replace"]
    replacements = call.replacements()
    assert replacements
    assert markers(replacements[0])
    assert all(len(data.encode()) <= 4096 for data in replacements)
    # The last loss is followed by a replacement: the client ends resynchronised.
    kinds = [TERMINAL_OUTPUT in (u.field_meta or {}) for u in call.live]
    losses = [(u.field_meta or {})[META_LIVE]["gap"] for u in call.live]
    assert max(i for i, gap in enumerate(losses) if gap) <= max(i for i, r in enumerate(kinds) if r)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replace", "content"])
async def test_flood_to_a_replacing_client_stays_within_the_bound(mode: str) -> None:
    """A client that only replaces (or declared nothing) gets paced snapshots:
    their bytes stay within 4 per byte of live text plus one tail per idle
    period (and two more), and the losses they say cover the report's."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES[mode] or None) as (conn, editor, _):
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        began = loop.time()
        assert await prompt(conn, session.session_id, _flood_spec()) == "end_turn"
        elapsed = loop.time() - began
        (call,) = editor.calls()
    snapshots = call.replacements() if mode == "replace" else [content_text(u) for u in call.live]
    assert snapshots
    live_bytes = (call.live[-1].field_meta or {})[META_LIVE]["end"]
    sent = sum(len(text.encode()) for text in snapshots)
    assert sent <= 4 * live_bytes + 4096 * (elapsed / 2.0 + 2)
    assert len(snapshots) <= elapsed / 0.2 + 2
    assert all(len(text.encode()) <= 4096 + 100 for text in snapshots)
    if mode == "replace":
        said = [high for text in snapshots for _, high in markers(text)]
        assert sum(said) >= call.loss()["lost_bytes"]["max"]
        assert snapshots[-1].endswith("0199999\n")
    assert call.last.status == "completed"
    assert "[kigi: the live output lost" in call.text()


async def test_failing_command_and_bad_arguments_end_failed() -> None:
    """A command that exits non-zero ends ``failed`` with its exit code and
    output; arguments the tool refuses end ``failed`` with the error's text."""
    async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES["append"]) as (conn, editor, _):
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        spec = {"args": {"command": "echo oops >&2; exit 3"}}
        assert await prompt(conn, session.session_id, spec) == "end_turn"
        assert await prompt(conn, session.session_id, {"args": {"command": 5}}) == "end_turn"
        failing, refused = editor.calls()
    assert failing.last.status == "failed"
    assert failing.exit() == {
        "terminal_id": failing.start.tool_call_id,
        "exit_code": 3,
        "signal": None,
    }
    assert "".join(failing.appends()) == "oops\n"
    assert "oops" in failing.text()
    assert "exit code 3" in failing.text()
    assert failing.last.raw_output["exit_code"] == 3
    assert refused.last.status == "failed"
    assert refused.text().startswith("invalid_params error")
    assert refused.last.raw_output["error"]["kind"] == "invalid_params"
    assert refused.exit() == {
        "terminal_id": refused.start.tool_call_id,
        "exit_code": None,
        "signal": None,
    }


_FOREVER = (
    "import os, sys, time\n"
    "print('pgid', os.getpgid(0), flush=True)\n"
    "time.sleep(0.5)\n"  # the line is shown before the flood can overrun the tail
    "while True: sys.stdout.write('y' * 999 + '\\n')"
)


@pytest.mark.parametrize("how", ["session_cancel", "task_cancel"])
async def test_cancel_mid_flood_stops_the_call_and_its_processes(how: str) -> None:
    """``session/cancel`` mid-flood stops the call: its process group is gone,
    its last update is ``failed`` with the cancelled error, the prompt ends
    ``cancelled``, and the agent serves the next call. The same when the agent
    cancels the prompt's task instead."""
    spec = {
        "args": {"command": [sys.executable, "-c", _FOREVER]},
        "shell": {"tail_capacity": 4096, "max_delta_bytes": 1024},
        "tail_bytes": 4096,
        "cancel_by": how,
    }
    async with asyncio.timeout(DEADLINE_S), agent(CAPABILITIES["append"]) as (conn, editor, _):
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        turn = asyncio.create_task(prompt(conn, session.session_id, spec))
        while not re.search(
            r"pgid (\d+)\n", "".join(c for call in editor.calls() for c in call.appends())
        ):
            editor.changed.clear()
            await editor.changed.wait()
        (call,) = editor.calls()
        match = re.search(r"pgid (\d+)\n", "".join(call.appends()))
        assert match is not None
        while len(call.appends()) < 5 and not turn.done():  # mid-flood
            editor.changed.clear()
            await editor.changed.wait()
            (call,) = editor.calls()
        await conn.cancel(session_id=session.session_id)
        assert await turn == "cancelled"
        await until_group_gone(int(match[1]))
        (call,) = editor.calls()
        assert call.last.status == "failed"
        assert "cancelled error" in call.text()
        assert call.last.raw_output["error"]["kind"] == "cancelled"
        again = {"args": {"command": "echo still here"}}
        assert await prompt(conn, session.session_id, again) == "end_turn"
        assert editor.calls()[-1].appends() == ["still here\n"]


DYING_EDITOR = Path(__file__).resolve().parent / "acp_dying_editor.py"


async def _kill_the_editor_mid_flood(agent_script: Path, text: str) -> None:
    """Run ``agent_script`` under the dying editor with the prompt ``text`` (a
    flood that prints its process group first), SIGKILL the editor mid-flood,
    and wait for the command's group and then the agent process to be gone."""
    editor = subprocess.Popen(
        [sys.executable, str(DYING_EDITOR), str(agent_script), text],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    agent_pid = pgid = None
    try:
        async with asyncio.timeout(DEADLINE_S):
            assert editor.stdout is not None
            line = await asyncio.to_thread(editor.stdout.readline)
            match = re.fullmatch(rb"pgid (\d+) agent (\d+)\n", line)
            assert match is not None, line
            pgid, agent_pid = int(match[1]), int(match[2])
            await asyncio.sleep(0.5)  # mid-flood
            editor.kill()
            await asyncio.to_thread(editor.wait)
            await until_group_gone(pgid)
            await until_gone(f"agent {agent_pid} still running", lambda: pid_alive(agent_pid))
    finally:
        editor.kill()
        editor.wait()
        assert editor.stdout is not None
        editor.stdout.close()
        if agent_pid is not None and pid_alive(agent_pid):
            os.kill(agent_pid, signal.SIGKILL)
        if pgid is not None and group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


async def test_an_editor_killed_mid_flood_leaves_nothing_running() -> None:
    """The editor vanishes (SIGKILL) mid-flood: its pipes break under an
    agent that is writing an update. The call stops, its process group gone,
    and the agent process exits instead of waiting forever on a dead pipe."""
    spec = {"args": {"command": [sys.executable, "-c", _FOREVER]}}
    await _kill_the_editor_mid_flood(AGENT, json.dumps(spec))


async def test_the_docs_agent_exits_when_its_editor_is_killed(tmp_path: Path) -> None:
    """The same for the agent docs/hosts/acp.md shows, run as written."""
    script = tmp_path / "agent.py"
    script.write_text(_readme_agent(), encoding="utf-8")
    await _kill_the_editor_mid_flood(script, shlex.join([sys.executable, "-c", _FOREVER]))


def _readme_agent() -> str:
    (block,) = blocks("python", page("hosts/acp.md"))
    return block


async def test_readme_acp_agent_runs_as_written(tmp_path: Path) -> None:
    """The README's agent, saved as agent.py and run as written, serves a
    command as a tool call to the SDK's client: the output live, the call
    completed with the model's text, and a cancel that stops a command."""
    script = tmp_path / "agent.py"
    script.write_text(_readme_agent(), encoding="utf-8")
    editor = Editor()
    command = "printf 'grüße '; sleep 0.2; printf '✓ 😀\\n'"
    async with (
        asyncio.timeout(DEADLINE_S),
        spawn_agent_process(
            editor, sys.executable, str(script), cwd=tmp_path, transport_kwargs={"stderr": None}
        ) as (conn, _),
    ):
        declared = ClientCapabilities(field_meta=CAPABILITIES["append"])
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block(command)])
        assert done.stop_reason == "end_turn"
        turn = asyncio.create_task(
            conn.prompt(
                session_id=session.session_id, prompt=[text_block("echo started; sleep 60")]
            )
        )
        while len(editor.calls()) < 2 or not editor.calls()[1].appends():
            editor.changed.clear()
            await editor.changed.wait()
        await conn.cancel(session_id=session.session_id)
        assert (await turn).stop_reason == "cancelled"
    first, cancelled = editor.calls()
    assert "".join(first.appends()) == "grüße ✓ 😀\n"
    assert first.start.kind == "execute"
    assert first.last.status == "completed"
    assert first.text().startswith("grüße ✓ 😀\n\n[exit code 0;")
    assert cancelled.last.status == "failed"
    assert "cancelled error" in cancelled.text()


#: The TypeScript SDK the Node editor runs (its major version).
NPM_SDK = "@agentclientprotocol/sdk@2"
NODE_CLIENT = Path(__file__).resolve().parent / "acp_node_client.mjs"


@pytest.fixture(scope="session")
def node_editor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the npm ACP SDK installed and the Node editor beside it."""
    where = tmp_path_factory.mktemp("acp-node")
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", NPM_SDK],
        cwd=where,
        check=True,
        timeout=300,
        capture_output=True,
    )
    (where / "client.mjs").write_text(NODE_CLIENT.read_text(encoding="utf-8"), encoding="utf-8")
    return where


def _node_call(where: Path, mode: str, spec: dict[str, Any]) -> tuple[str, Call]:
    """One prompt from the Node editor to the test agent: its stop reason and call."""
    done = subprocess.run(
        [
            "node",
            "client.mjs",
            sys.executable,
            str(AGENT),
            json.dumps(CAPABILITIES[mode]),
            json.dumps(spec),
        ],
        cwd=where,
        check=True,
        timeout=DEADLINE_S,
        capture_output=True,
        text=True,
    )
    got = json.loads(done.stdout)
    start, *updates = got["updates"]
    call = Call(ToolCallStart.model_validate(start))
    call.updates = [ToolCallProgress.model_validate(update) for update in updates]
    return got["stopReason"], call


@pytest.mark.slow
def test_node_editor_on_the_typescript_sdk(node_editor: Path) -> None:
    """The TypeScript SDK's client, driven by Node, gets the same: split
    characters whole at cap 4 (every cap is checked in process above), and a
    flood's losses marked as the report counts them, with a replacement after
    a loss."""
    steps: list[bytes | None] = []
    for byte in SPLIT_TEXT.encode():
        steps += [bytes([byte]), None]
    command = python_writer_argv(steps, tick_s=0.03)
    cap = 4
    spec = {"args": {"command": command}, "shell": {"max_delta_bytes": cap, "tick": 0.01}}
    stop, call = _node_call(node_editor, "append", spec)
    assert stop == "end_turn"
    assert "".join(call.appends()) == SPLIT_TEXT
    assert all(len(d.encode()) <= cap or len(d) == 1 for d in call.appends())
    assert call.last.status == "completed"
    stop, call = _node_call(node_editor, "append_and_replace", _flood_spec())
    assert stop == "end_turn"
    text = call.rebuilt()
    _check_markers_match_the_report(call, text)
    assert call.replacements()
    assert text.endswith("0199999\n")


class _Updates:
    """Anything that sends ``session/update`` (the SessionUpdates protocol)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.sent.append(update)


async def test_a_call_refused_up_front_sends_nothing_and_leaves_nothing_running() -> None:
    """A deadline the runner refuses, or a tail too small for the tool's
    frames, raises ValueError before any update, and no call stays registered."""
    updates = _Updates()
    calls = AcpToolCalls(updates)
    with pytest.raises(ValueError, match="timeout_ms"):
        await calls.run("s1", ShellTool(), {"command": "true"}, timeout_ms=-1)
    with pytest.raises(ValueError, match="tail_bytes"):
        await AcpToolCalls(updates, tail_bytes=2048).run("s1", ShellTool(), {"command": "true"})
    assert updates.sent == []
    assert calls.running("s1") == 0
    assert calls.cancel("s1") == 0


async def test_a_silent_call_sends_heartbeat_updates() -> None:
    """``heartbeat_s=0.1``: a tool silent for 1 s sends several
    ``tool_call_update`` heartbeats (in progress, the figures and a sentence
    under ``_meta["dev.kigi/heartbeat"]``, no content), valid for the SDK's
    model, and none after the last update. (A tool in process: the beats are
    the call's, whatever the tool runs.)"""
    updates = _Updates()
    calls = AcpToolCalls(updates, heartbeat_s=0.1)
    async with asyncio.timeout(30):
        end = await calls.run("s1", quiet_tool(1.0), {})
    assert end.ok
    metas = [getattr(update, "field_meta", None) or {} for update in updates.sent]
    beats = [meta["dev.kigi/heartbeat"] for meta in metas if "dev.kigi/heartbeat" in meta]
    assert len(beats) >= 3
    assert all(beat["silent_s"] >= 0.099 for beat in beats)
    assert all(beat["elapsed_s"] >= beat["silent_s"] for beat in beats)
    assert all(beat["text"].startswith("running ") for beat in beats)
    for update, meta in zip(updates.sent, metas, strict=True):
        if "dev.kigi/heartbeat" in meta:
            assert update.status == "in_progress"
            assert update.content is None
    assert "dev.kigi/heartbeat" not in metas[-1]
    with pytest.raises(ValueError, match="heartbeat_s"):
        AcpToolCalls(updates, heartbeat_s=-1)
