"""The served call: ``LiveText`` (frames to host text, every loss said where it
happened), ``CallEnd`` (the model's text and the loss report) and
``ServedCall`` (a real tool call served to its end, stopped early, cancelled)."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import sys
from typing import Any

import msgspec
import pytest
from host_tools import quiet_tool, split_tool
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import group_running, until_group_gone

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    StreamingSpec,
    progress_to_frame,
)
from kigi_tool_runtime import (
    CallEnd,
    CommandNotStarted,
    LiveText,
    OutputStream,
    ServedCall,
    ShellArgs,
    ShellOutcome,
    ShellTool,
    ToolError,
    ToolResult,
)
from kigi_tool_runtime._call._heartbeat import Beat
from kigi_tool_runtime._call._outcome import loss_line, model_text
from kigi_tool_runtime._call._served import check_arguments
from kigi_tool_runtime._consumer._loss import TRUNCATION_MARKER
from kigi_tool_runtime._process import group_alive

SPEC_CAPS = (0, 1, 2, 3, 4, 64)
LOSS_LINE = re.compile(r"\[\.\.\. \d+(-\d+)? bytes lost \.\.\.\]\n")

# Characters of 1 to 4 bytes, and bytes that are no UTF-8 at all.
_PIECES = st.sampled_from(["a", "\n", "é", "✓", "😀"]).map(lambda c: c.encode())
_SOURCE = st.lists(st.one_of(_PIECES, st.binary(min_size=1, max_size=3), st.none()), max_size=60)


def _serve(steps: list[bytes | None], cap: int, capacity: int, limit: int | None = None):
    """Frames of ``steps`` (bytes written, or None: a tick) through an
    ``OutputStream``, folded by a ``LiveText``: the texts and the fold."""
    spec = StreamingSpec(subkind="echo_chunk", max_delta_bytes=cap)
    stream = OutputStream(spec, capacity=max(capacity, cap, 4), limit=limit)
    live = LiveText("c1")
    texts: list[str] = []
    seq = 0

    def add(progress: list[Any]) -> None:
        nonlocal seq
        for item in progress:
            texts.append(live.add(progress_to_frame("c1", item), seq).text)
            seq += 1

    for step in steps:
        if step is None:
            add(stream.drain())
        else:
            stream.write(step)
    add(stream.finish())
    texts.append(live.finish())
    return texts, live


@settings(max_examples=150, deadline=None)
@given(steps=_SOURCE, cap=st.sampled_from(SPEC_CAPS))
def test_live_text_is_the_output_exactly_when_nothing_was_lost(
    steps: list[bytes | None], cap: int
) -> None:
    texts, live = _serve(steps, cap, capacity=1 << 20)
    report = live.report()
    source = b"".join(step for step in steps if step is not None)
    if report is None:
        assert source == b""
        return
    assert report.complete
    assert "".join(texts) == source.decode("utf-8", "replace")


@settings(max_examples=150, deadline=None)
@given(steps=_SOURCE, cap=st.sampled_from(SPEC_CAPS), capacity=st.integers(4, 12))
def test_every_loss_is_said_on_a_line_of_its_own(
    steps: list[bytes | None], cap: int, capacity: int
) -> None:
    texts, live = _serve(steps, cap, capacity=capacity)
    report = live.report()
    text = "".join(texts)
    source = b"".join(step for step in steps if step is not None)
    if report is None or report.complete:
        assert text == source.decode("utf-8", "replace")
        return
    markers = LOSS_LINE.findall(text) + re.findall(r"never delivered", text)
    assert len(markers) >= len(report.gaps) > 0 or report.unseen_bytes
    for match in LOSS_LINE.finditer(text):
        start = match.start()
        assert start == 0 or text[start - 1] == "\n", text
    # Without the markers, what is left is the output with bytes missing: every
    # delivered piece of it in order (a subsequence of the whole text).
    kept = LOSS_LINE.sub("", text)
    assert len(kept.encode()) <= len(source.decode("utf-8", "replace").encode()) + len(texts)


def test_a_gap_is_said_before_the_text_that_follows_it() -> None:
    texts, live = _serve([b"x" * 40, None, b"tail\n"], cap=4, capacity=8)
    text = "".join(texts)
    report = live.report()
    assert report is not None
    assert not report.complete
    assert LOSS_LINE.match(text), text
    assert text.endswith("tail\n")


def test_truncation_is_said_once_where_the_text_stops() -> None:
    texts, live = _serve([b"abcdef", None, b"ghij"], cap=2, capacity=64, limit=5)
    text = "".join(texts)
    assert text == "abcde\n" + TRUNCATION_MARKER + "\n"
    report = live.report()
    assert report is not None
    assert report.truncated


def test_bytes_never_delivered_are_said_at_the_end() -> None:
    live = LiveText("c1")
    spec_frame = progress_to_frame("c1", _custom("ab", total=5))
    assert live.add(spec_frame, 0).text == "ab"
    closing = live.finish()
    assert closing == "\n[... 3 bytes never delivered ...]\n"
    report = live.report()
    assert report is not None
    assert not report.complete


def _custom(delta: str, total: int) -> Any:
    return CustomProgress(subkind="s", payload=PartialResultPayload(delta=delta, total_bytes=total))


def test_the_model_text_says_a_loss() -> None:
    _texts, live = _serve([b"x" * 40, None, b"end\n"], cap=4, capacity=8)
    end = CallEnd.of("c1", "echo", ToolResult(value="done"), live.report(), frames=live.frames)
    assert not end.complete
    assert end.ok
    assert end.text.startswith("done\n[kigi: the live output lost ")
    data = end.loss_json()
    assert data["complete"] is False
    assert data["gaps"]
    assert data["gaps"][0]["lost_max"] >= data["gaps"][0]["lost_min"] >= 1
    msgspec.json.encode(data)  # JSON values only
    assert loss_line(None) is None


def test_an_error_end_is_said_without_a_traceback() -> None:
    error = ToolError("execution", "it broke")
    end = CallEnd.of("c1", "echo", error, None, frames=0)
    assert not end.ok
    assert end.error is not None
    # The end names the tool; the error made is immutable, so never changed.
    assert (end.error.kind, end.error.message, end.error.tool_id) == (
        "execution",
        "it broke",
        "echo",
    )
    assert error.tool_id is None
    assert end.value is None
    assert end.text == f"execution error ({end.error.code}): it broke"
    assert end.complete
    assert end.loss_json()["frames"] == 0


# -- real calls of the shell tool ------------------------------------------------


def _writer(*pieces: bytes, pause: float = 0.05) -> ShellArgs:
    script = (
        "import sys,time\n"
        f"for p in {list(pieces)!r}:\n"
        "    sys.stdout.buffer.write(p); sys.stdout.flush(); time.sleep(%r)\n" % pause
    )
    return ShellArgs(command=[sys.executable, "-c", script])


_SPLIT_PIECES = [b"\xc3", b"\xa9 \xe2", b"\x9c", b"\x93 \xf0\x9f", b"\x98", b"\x80\n"]


@pytest.mark.parametrize(("cap", "real"), [(1, True), *((c, False) for c in (0, 1, 2, 3, 4, 64))])
async def test_a_served_shell_call_streams_split_characters_exactly(cap: int, real: bool) -> None:
    """Characters cut across writes stream whole and exact at every cap:
    through a real command once, through an in-process tool at each cap."""
    if real:
        tool: Any = ShellTool(tick=0.01, max_delta_bytes=cap)
        args: Any = _writer(*_SPLIT_PIECES)
    else:
        tool, args = split_tool(_SPLIT_PIECES, cap=cap), {}
    async with asyncio.timeout(30):
        async with ServedCall(tool, args, call_id="c1") as call:
            deltas = [delta async for delta in call]
    end = call.end
    assert "".join(d.text for d in deltas) + end.closing == "é ✓ 😀\n"
    assert [d.seq for d in deltas] == list(range(len(deltas)))
    assert all(d.marker is None for d in deltas)
    # At most `cap` bytes a delta, or one whole character where it is longer.
    assert all(len(d.delta.encode()) <= cap or len(d.delta) == 1 for d in deltas)
    assert end.ok
    assert end.complete
    if real:
        assert "[exit code 0;" in end.text
        assert end.text == model_text(end.value)
    else:
        assert end.text.startswith("é ✓ 😀\n")


async def test_a_flood_through_a_small_tail_is_marked_live_and_reported() -> None:
    tool = ShellTool(tick=0.05, max_delta_bytes=64, tail_capacity=256)
    command = ShellArgs(command="seq 1 200000")
    async with asyncio.timeout(60):
        async with ServedCall(tool, command, call_id="c1") as call:
            texts = []
            async for delta in call:
                texts.append(delta.text)
                await asyncio.sleep(0)  # a host that takes a moment per frame
    end = call.end
    text = "".join(texts) + end.closing
    assert end.ok
    assert not end.complete
    assert end.report is not None
    assert end.report.gaps
    assert len(LOSS_LINE.findall(text)) == len(end.report.gaps)
    assert text.endswith("200000\n")
    assert "[kigi: the live output lost" in end.text
    assert end.loss_json()["gaps"]


async def _pgid_from(call: ServedCall) -> int:
    async for delta in call:
        if delta.delta.strip():
            return int(delta.delta.split()[0])
    raise AssertionError("no pid printed")


async def test_leaving_a_served_call_early_stops_the_process_group() -> None:
    # A short SIGTERM-to-SIGKILL grace: the background sleep, killed, is an
    # orphan zombie of the group until init reaps it (seconds, on some inits),
    # and the stop waits the grace out for it; a zombie runs nothing.
    tool = ShellTool(tick=0.01, grace=0.3)
    async with asyncio.timeout(30):
        async with ServedCall(
            tool, ShellArgs(command="echo $$; sleep 30 & wait"), call_id="c1"
        ) as call:
            pgid = await _pgid_from(call)
            assert group_alive(pgid)
        assert not group_running(pgid)
    assert not call.ended


async def test_a_cancelled_served_call_ends_cancelled_with_no_process_left() -> None:
    tool = ShellTool(tick=0.01)
    async with asyncio.timeout(30):
        async with ServedCall(tool, ShellArgs(command="echo $$; sleep 30"), call_id="c1") as call:
            pgid = await _pgid_from(call)
            call.cancel("the user pressed stop")
            async for _ in call:
                pass
        await until_group_gone(pgid)
    error = call.end.error
    assert error is not None
    assert error.kind.value == "cancelled"
    assert error.message == "the user pressed stop"  # made so, never rewritten


async def test_the_host_task_cancelled_stops_the_process_group() -> None:
    tool = ShellTool(tick=0.01)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def host() -> None:
        async with ServedCall(tool, ShellArgs(command="echo $$; sleep 30"), call_id="c1") as call:
            started.set_result(await _pgid_from(call))
            async for _ in call:
                pass

    async with asyncio.timeout(30):
        task = asyncio.create_task(host())
        pgid = await started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not group_alive(pgid)


async def test_bad_arguments_end_the_call_with_a_clear_error() -> None:
    tool = ShellTool()
    with pytest.raises(ToolError, match="invalid arguments for tool 'bash'") as raised:
        check_arguments(tool, {"comand": "ls"})
    assert raised.value.kind.value == "invalid_params"
    async with asyncio.timeout(10), ServedCall(tool, {"comand": "ls"}, call_id="c1") as call:
        end = await call.run()
    assert end.error is not None
    assert end.error.kind.value == "invalid_params"
    assert end.text.startswith("invalid_params error (")
    with pytest.raises(RuntimeError, match="has not ended"):
        _ = ServedCall(tool, {}, call_id="c2").end


async def test_a_call_without_progress_streams_nothing_and_ends() -> None:
    tool = ShellTool(tick=0.01)
    async with asyncio.timeout(10):
        call = ServedCall(tool, ShellArgs(command="echo hi"), call_id="c1", wants_progress=False)
        async with call:
            assert [delta async for delta in call] == []
    assert call.end.ok
    assert call.end.frames == 0
    assert call.end.complete
    assert call.end.value.output == "hi\n"


async def test_timeout_ms_inf_lifts_the_deadline_the_tool_declares() -> None:
    """``timeout_ms=math.inf`` (``kigi-stream run`` without ``--timeout``): no
    deadline, so a call outlives the 100 ms its tool declares, which ends
    the same call given the tool's own deadline (``None``). (A tool in
    process: the deadline is the call's, whatever the tool runs.)"""
    tool = quiet_tool(0.6, name="slow")
    tool.capabilities = msgspec.structs.replace(tool.capabilities, timeout_ms=100)
    async with asyncio.timeout(30):
        async with ServedCall(tool, {}, call_id="c1", timeout_ms=math.inf) as call:
            end = await call.run()
        async with ServedCall(tool, {}, call_id="c2") as bounded:
            cut = await bounded.run()
    assert end.ok, end.text
    assert end.value == "written"
    assert cut.error is not None
    assert cut.error.kind.value == "timeout"


async def test_the_end_carries_the_runs_own_terminal() -> None:
    """``CallEnd.terminal`` is the very terminal the run ended with, its type
    kept: ``kigi-stream run`` tells a command that never started (exit 127)
    from one that failed by it, and reads the shell outcome's figures."""
    tool = ShellTool(tick=0.01)
    async with asyncio.timeout(30):
        async with ServedCall(
            tool, ShellArgs(command=["/nonexistent/kigi-prog"]), call_id="c1"
        ) as call:
            refused = await call.run()
        async with ServedCall(tool, ShellArgs(command="echo hi; exit 3"), call_id="c2") as call:
            failed = await call.run()
    assert isinstance(refused.terminal, CommandNotStarted)
    assert refused.error is refused.terminal
    assert isinstance(failed.terminal, ToolResult)
    assert isinstance(failed.terminal.value, ShellOutcome)
    assert (failed.terminal.value.exit_code, failed.terminal.value.output) == (3, "hi\n")


async def test_the_live_fold_is_the_one_each_delta_came_from() -> None:
    """``live.reassembler`` is the fold that made each delta's ``appended``
    (a host that reads figures from it, as ``kigi-stream run`` does, folds
    nothing itself): it counted every frame once."""
    tool = ShellTool(tick=0.01, max_delta_bytes=4)
    async with asyncio.timeout(30):
        async with ServedCall(tool, _writer(b"abcdefgh", b"ijkl\n"), call_id="c1") as call:
            deltas = [delta async for delta in call]
    reports = call.live.reassembler.reports(ended=True)
    assert len(deltas) > 1
    assert [report.frames for report in reports] == [len(deltas)] == [call.live.frames]
    assert reports[0].total_bytes == 13
    assert "".join(delta.appended.text or "" for delta in deltas) == "abcdefghijkl\n"


async def test_events_beat_through_silence_between_the_deltas() -> None:
    """``events()`` with a 0.1 s heartbeat: a tool silent for 1 s yields
    several beats between its two lines, each silence at least one interval
    longer than the one before; the deltas and the end are as without them.
    (A tool in process: the beats are the call's, whatever the tool runs.)"""
    async with asyncio.timeout(30):
        async with ServedCall(quiet_tool(1.0), {}, call_id="c1", heartbeat_s=0.1) as call:
            items = [item async for item in call.events()]
    # A beat may come before the first line (a slow start): the silence after
    # the first line is the one measured here.
    first = next(i for i, item in enumerate(items) if not isinstance(item, Beat))
    beats = [item for item in items[first:] if isinstance(item, Beat)]
    deltas = [item for item in items if not isinstance(item, Beat)]
    assert "".join(d.delta for d in deltas) == "a\nb\n"
    assert [d.seq for d in deltas] == list(range(len(deltas)))
    assert len(beats) >= 3
    assert all(b.silent_s - a.silent_s >= 0.1 - 1e-6 for a, b in itertools.pairwise(beats))
    assert all(beat.silent_s >= 0.1 for beat in beats)
    assert call.end.ok


async def test_leaving_events_at_a_beat_stops_the_process_group() -> None:
    """Leaving ``events()`` while it waits for a silent command (at a beat)
    still stops the command's whole process group (Rule 3)."""
    tool = ShellTool(tick=0.01)
    async with asyncio.timeout(30):
        async with ServedCall(
            tool, ShellArgs(command="echo $$; sleep 30 & wait"), call_id="c1", heartbeat_s=0.05
        ) as call:
            pgid = None
            async for item in call.events():
                if isinstance(item, Beat):
                    break
                if item.delta.strip():
                    pgid = int(item.delta.split()[0])
            assert pgid is not None
            assert group_alive(pgid)
        assert not group_alive(pgid)
    assert not call.ended


async def test_plain_iteration_yields_no_beats() -> None:
    """Iterating the call itself yields deltas only, whatever its heartbeat."""
    async with asyncio.timeout(30):
        async with ServedCall(quiet_tool(0.3), {}, call_id="c1", heartbeat_s=0.05) as call:
            items = [item async for item in call]
    assert all(not isinstance(item, Beat) for item in items)
    tool = ShellTool(tick=0.01)
    with pytest.raises(ValueError, match=">= 0"):
        ServedCall(tool, ShellArgs(command="true"), call_id="c", heartbeat_s=-1)
