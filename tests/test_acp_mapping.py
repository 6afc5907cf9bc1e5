"""The sans-IO ACP mapping: modes from capabilities, the retained tail, the
pacing bound, and the updates a call becomes."""

from __future__ import annotations

import asyncio
import importlib.metadata
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from acp.agent.connection import AgentSideConnection
from acp.schema import ClientCapabilities, ToolCallProgress, ToolCallStart
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import (
    CallEnd,
    LiveText,
    ShellOutcome,
    ShellTool,
    ToolError,
    ToolResult,
    _upstream,
)
from kigi_tool_runtime.acp import AcpToolCalls, LiveOutput, Pacing
from kigi_tool_runtime.acp import _host as acp_host
from kigi_tool_runtime.acp import _privates as acp_privates
from kigi_tool_runtime.acp._host import tool_title
from kigi_tool_runtime.acp._mapping import (
    META_FRAME,
    META_LIVE,
    META_LOSS,
    TERMINAL_EXIT,
    TERMINAL_INFO,
    TERMINAL_OUTPUT,
    TERMINAL_OUTPUT_DELTA,
    TERMINAL_REDRAW,
    TextTail,
    ToolCallMapper,
)


class _Mapper(ToolCallMapper):
    """The mapper, its updates validated as the SDK's models (nothing salvaged
    away: the model holds exactly the JSON given)."""

    def start(self, *args: Any) -> ToolCallStart:  # type: ignore[override]
        return _model(super().start(*args), ToolCallStart)

    def frame(self, *args: Any) -> ToolCallProgress | None:  # type: ignore[override]
        update = super().frame(*args)
        return None if update is None else _model(update, ToolCallProgress)

    def finish(self, *args: Any) -> list[ToolCallProgress]:  # type: ignore[override]
        return [_model(update, ToolCallProgress) for update in super().finish(*args)]


def _model(update: dict[str, Any], kind: Any) -> Any:
    model = kind.model_validate(update)
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == update
    return model


# -- modes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "mode"),
    [
        ({TERMINAL_OUTPUT_DELTA: True, TERMINAL_OUTPUT: True}, LiveOutput.APPEND_AND_REPLACE),
        ({TERMINAL_OUTPUT_DELTA: True}, LiveOutput.APPEND),
        ({TERMINAL_OUTPUT: True}, LiveOutput.REPLACE),
        ({}, LiveOutput.CONTENT),
        ({TERMINAL_OUTPUT_DELTA: "yes", TERMINAL_OUTPUT: 1}, LiveOutput.CONTENT),
        (None, LiveOutput.CONTENT),
    ],
)
def test_mode_is_what_the_client_declared(meta: dict[str, Any] | None, mode: LiveOutput) -> None:
    """Each capability set picks its mode, from the SDK's model or its JSON;
    only ``true`` declares."""
    assert LiveOutput.of(ClientCapabilities(field_meta=meta)) is mode
    assert LiveOutput.of({"_meta": meta}) is mode
    assert LiveOutput.of(None) is LiveOutput.CONTENT


def test_mode_refuses_what_is_not_capabilities() -> None:
    """Anything else is a TypeError naming its type."""
    with pytest.raises(TypeError, match="not int"):
        LiveOutput.of(3)  # type: ignore[arg-type]


# -- the retained tail ---------------------------------------------------------------

_texts = st.lists(st.text(alphabet="aé€😀\n", max_size=40), max_size=30)


@given(_texts, st.integers(1, 64))
def test_tail_is_the_text_s_end_cut_between_characters(texts: list[str], limit: int) -> None:
    """The tail is a suffix of everything appended, at most ``limit`` bytes and
    short of it by less than one character; ``start`` is where it begins."""
    tail = TextTail(limit)
    for text in texts:
        tail.append(text)
    whole = "".join(texts).encode()
    got = tail.snapshot().encode()
    assert whole.endswith(got)
    assert len(got) <= limit
    assert len(got) > min(len(whole), limit) - 4
    assert tail.start == len(whole) - len(got)
    assert tail.total == len(whole)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30)), max_size=40), st.integers(40, 90))
def test_tail_counts_markers_that_fell_out_unseen(
    pieces: list[tuple[bool, int]], limit: int
) -> None:
    """A marker line is kept whole or dropped; one dropped before any snapshot
    showed it is counted, and the next snapshot opens with one line for all of
    them: each marker is shown, or counted in exactly one such line."""
    tail = TextTail(limit)
    appended: list[int] = []
    seen: set[int] = set()
    hidden = 0

    def snapshot() -> None:
        nonlocal hidden
        text = tail.snapshot()
        found = _markers(text)
        if found and found[0][0] != found[0][1]:  # only the hidden line is a range
            hidden += found.pop(0)[0]
        seen.update(low for low, _ in found)

    for n, (is_marker, size) in enumerate(pieces):
        if is_marker:
            lost = 10 * (len(appended) + 1)  # unique: each marker is told apart
            tail.append(f"[... {lost} bytes lost ...]\n", gap=(lost, lost + 1))
            appended.append(lost)
        else:
            tail.append("x" * size)
        if n % 7 == 6:
            snapshot()
    snapshot()
    assert hidden == sum(lost for lost in appended if lost not in seen)
    assert tail.hidden is None


def _markers(text: str) -> list[tuple[int, int]]:
    import re

    return [
        (int(m[1]), int(m[2] or m[1]))
        for m in re.finditer(r"\[\.\.\. (\d+)(?:-(\d+))? bytes lost \.\.\.\]\n", text)
    ]


def test_tail_refuses_no_room() -> None:
    with pytest.raises(ValueError, match="limit"):
        TextTail(0)


# -- pacing ------------------------------------------------------------------------------


def test_pacing_checks_its_figures() -> None:
    """Figures must be positive, and idle at least the interval."""
    with pytest.raises(ValueError, match="positive"):
        Pacing(interval=0)
    with pytest.raises(ValueError, match="positive"):
        Pacing(ratio=0)
    with pytest.raises(ValueError, match="below interval"):
        Pacing(interval=1.0, idle=0.5)


def test_pacing_rule() -> None:
    """Due: something new, and the interval passed with enough new or idle passed."""
    pacing = Pacing(interval=0.2, ratio=4, idle=2.0)
    assert pacing.due(since=None, new_bytes=1, size=100)
    assert not pacing.due(since=None, new_bytes=0, size=100)
    assert not pacing.due(since=0.1, new_bytes=100, size=100)
    assert pacing.due(since=0.2, new_bytes=25, size=100)
    assert not pacing.due(since=0.2, new_bytes=24, size=100)
    assert pacing.due(since=2.0, new_bytes=1, size=100)


# -- a call's updates ---------------------------------------------------------------------

# A frame: (seconds since the last one, source bytes lost before it, its delta).
_frames = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.01, 0.05, 0.3, 2.5]),
        st.sampled_from([0, 0, 0, 5, 300]),
        st.text(alphabet="ab\né€😀", max_size=12),
    ),
    max_size=60,
)


def _deltas(frames: list[tuple[float, int, str]]) -> tuple[list[tuple[float, Any]], str]:
    live = LiveText("c1")
    total = 0
    now = 0.0
    out = []
    for seq, (dt, lost, delta) in enumerate(frames):
        total += lost + len(delta.encode())
        now += dt
        frame = ToolCallProgressFrame(
            tool_call_id="c1",
            kind="bash_output_chunk",
            body=PartialResultPayload(delta=delta, total_bytes=total, gap=lost > 0),
        )
        out.append((now, live.add(frame, seq)))
    return out, live.finish()


def _end(closing: str = "", *, exit_code: int = 0) -> CallEnd:
    outcome = ShellOutcome(
        exit_code=exit_code,
        signal=None,
        timed_out=False,
        duration_ms=5,
        total_bytes=3,
        truncated=False,
        omitted_bytes=0,
        output="out",
    )
    return CallEnd.of("c1", "bash", ToolResult(value=outcome), None, frames=0, closing=closing)


def _data(update: ToolCallProgress, key: str) -> str | None:
    """The data under ``key``; a replacement's after its redraw."""
    meta = update.field_meta or {}
    if key not in meta:
        return None
    data: str = meta[key]["data"]
    if key == TERMINAL_OUTPUT:
        assert data.startswith(TERMINAL_REDRAW)
        return data[len(TERMINAL_REDRAW) :]
    return data


@given(_frames)
def test_append_client_gets_the_live_text_once(frames: list[tuple[float, int, str]]) -> None:
    """An appending client gets every frame's text, markers inline, and the
    closing text: the live text exactly, each append with kigi's offsets and frame."""
    deltas, closing = _deltas(frames)
    mapper = _Mapper("c1", LiveOutput.APPEND)
    updates = [u for now, d in deltas if (u := mapper.frame(d, now)) is not None]
    assert all(META_FRAME in (u.field_meta or {}) for u in updates)
    assert len(updates) == sum(1 for _, d in deltas if d.text)
    updates += mapper.finish(_end(closing), 99.0)
    appended = [_data(u, TERMINAL_OUTPUT_DELTA) for u in updates[:-1]]
    assert "".join(a or "" for a in appended) == "".join(d.text for _, d in deltas) + closing
    at = 0
    for update in updates[:-1]:
        meta = update.field_meta or {}
        assert TERMINAL_OUTPUT not in meta
        assert meta[META_LIVE]["offset"] == at
        at = meta[META_LIVE]["end"]


@given(_frames, st.sampled_from([1100, 1200, 2000]))
def test_replacements_are_paced_within_the_bound(
    frames: list[tuple[float, int, str]], tail_bytes: int
) -> None:
    """A replacing client's bytes stay within ratio * L + tail * (seconds / idle
    + 2), at most one replacement per interval (and the last), and the last
    shows the live text's end; every loss appended is said in some replacement."""
    deltas, closing = _deltas(frames)
    pacing = Pacing()
    for output in (LiveOutput.REPLACE, LiveOutput.CONTENT):
        mapper = _Mapper("c1", output, tail_bytes=tail_bytes, pacing=pacing)
        updates = [u for now, d in deltas if (u := mapper.frame(d, now)) is not None]
        elapsed = deltas[-1][0] if deltas else 0.0
        updates += mapper.finish(_end(closing), elapsed)
        live = updates[:-1]
        whole = "".join(d.text for _, d in deltas) + closing
        sent = sum(len(_replacement(u, output).encode()) for u in live)
        redraws = len(TERMINAL_REDRAW) * len(live) if output is LiveOutput.REPLACE else 0
        size = len(whole.encode())
        assert sent + redraws == mapper.sent_bytes
        assert sent <= pacing.ratio * size + tail_bytes * (elapsed / pacing.idle + 2)
        assert len(live) <= elapsed / pacing.interval + 2
        if output is LiveOutput.REPLACE and whole:
            last = _replacement(live[-1], output)
            kept = last.split("bytes lost ...]\n", 1)[-1] if last.startswith("[...") else last
            assert whole.endswith(kept)
        said = [m for u in live for m in _markers(_replacement(u, output))]
        lost = [(d.gap.lost_bytes_min, d.gap.lost_bytes) for _, d in deltas if d.gap]
        if output is LiveOutput.REPLACE:
            assert sum(high for _, high in said) >= sum(high for _, high in lost)


def _replacement(update: ToolCallProgress, output: LiveOutput) -> str:
    if output is LiveOutput.CONTENT:
        assert not update.field_meta or TERMINAL_OUTPUT not in update.field_meta
        return "".join(item.content.text for item in update.content or [])
    data = _data(update, TERMINAL_OUTPUT)
    assert data is not None
    return data


@given(_frames)
def test_append_and_replace_client_resynchronises_at_losses(
    frames: list[tuple[float, int, str]],
) -> None:
    """A client that declared both gets appends, and after each frame that
    showed a loss a replacement (at that frame when the pacer allows, else at
    a later one, at the end at the latest); together, by their offsets, they
    are the live text, and a replacement comes only after a loss."""
    deltas, closing = _deltas(frames)
    mapper = _Mapper("c1", LiveOutput.APPEND_AND_REPLACE, tail_bytes=1100)
    known = bytearray()
    pending = False
    updates: list[tuple[bool, ToolCallProgress]] = []
    for now, delta in deltas:
        pending = pending or delta.marker is not None
        update = mapper.frame(delta, now)
        if update is not None:
            updates.append((pending, update))
            if _data(update, TERMINAL_OUTPUT) is not None:
                pending = False
        else:
            assert not delta.text or pending
    end = 99.0 if not deltas else deltas[-1][0] + 1
    *closing_updates, _last = mapper.finish(_end(closing), end)
    updates += [(pending, update) for update in closing_updates]
    replaced = False
    for was_pending, update in updates:
        meta = update.field_meta or {}
        data = _data(update, TERMINAL_OUTPUT)
        if data is not None:
            assert was_pending
            replaced = True
        else:
            data = _data(update, TERMINAL_OUTPUT_DELTA)
        assert data is not None
        start, stop = meta[META_LIVE]["offset"], meta[META_LIVE]["end"]
        assert start <= len(known)
        known[start:stop] = data.encode()
    assert known.decode() == "".join(d.text for _, d in deltas) + closing
    assert replaced == any(d.marker is not None for _, d in deltas)
    if updates and pending:
        assert _data(updates[-1][1], TERMINAL_OUTPUT) is not None


def test_start_and_last_updates() -> None:
    """The start names the call, its kind and (terminal modes) its terminal;
    the last says completed or failed, the model's text, the exit and the loss."""
    for output in LiveOutput:
        mapper = _Mapper("c1", output)
        start = mapper.start("echo hi", "execute", {"command": "echo hi"})
        assert (start.tool_call_id, start.title, start.kind) == ("c1", "echo hi", "execute")
        assert start.status == "in_progress"
        assert start.raw_input == {"command": "echo hi"}
        assert (TERMINAL_INFO in (start.field_meta or {})) is output.terminal
        (ok,) = mapper.finish(_end(), 1.0)
        assert ok.status == "completed"
        assert ok.raw_output["exit_code"] == 0
        assert (ok.field_meta or {})[META_LOSS]["complete"] is True
        texts = [item.content.text for item in ok.content or [] if item.type == "content"]
        assert texts == [_end().text]
        exit_meta = (ok.field_meta or {}).get(TERMINAL_EXIT)
        if output.terminal:
            assert exit_meta == {"terminal_id": "c1", "exit_code": 0, "signal": None}
            assert (ok.content or [])[0].type == "terminal"
        else:
            assert exit_meta is None
        (failed,) = _Mapper("c1", output).finish(_end(exit_code=3), 1.0)
        assert failed.status == "failed"
        error = ToolError("cancelled", "call 'c1' was cancelled").with_tool_id("bash")
        end = CallEnd.of("c1", "bash", error, None, frames=0)
        (cancelled,) = _Mapper("c1", output).finish(end, 1.0)
        assert cancelled.status == "failed"
        assert cancelled.raw_output == {
            "error": {"kind": "cancelled", "code": error.code, "message": error.message}
        }


def test_tail_must_hold_a_frame_and_its_marker() -> None:
    """A tail too small for the tool's frames is refused, saying what to give."""
    with pytest.raises(ValueError, match="at least 17412"):
        _Mapper("c1", LiveOutput.REPLACE, tail_bytes=4096, max_delta_bytes=16384)


def test_title_is_the_command() -> None:
    """The shell tool's title is its command (an argv joined for a shell)."""
    assert tool_title(ShellTool(), {"command": "ls -l"}) == "ls -l"
    assert tool_title(ShellTool(), {"command": ["echo", "a b"]}) == "echo 'a b'"
    assert tool_title(ShellTool(), {"cwd": "/"}) == "bash"


class _NoTransport:
    """An ACP transport that carries nothing (the SDK's ``Transport`` protocol)."""

    async def send(self, message: dict[str, Any]) -> None:
        return None

    async def receive(self) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
def fresh_acp_fence() -> Iterator[None]:
    """The fence says its warnings afresh in each test."""
    acp_privates.ACP.forget()
    yield
    acp_privates.ACP.forget()


@pytest.mark.usefixtures("fresh_acp_fence")
async def test_the_pinned_acp_sdk_says_when_its_connection_is_closed() -> None:
    """Inside the range the ``acp`` extra pins, the host sees an SDK
    connection close (``_privates`` Rule 1), with no warning; anything else
    sending updates is never gone."""
    connection = AgentSideConnection(object(), _NoTransport(), listening=False)
    assert acp_privates.connection_gone(connection) is False
    await connection.close()
    assert acp_privates.connection_gone(connection) is True
    assert acp_privates.connection_gone(object()) is False


@pytest.mark.usefixtures("fresh_acp_fence")
@pytest.mark.parametrize("how", ["inner gone", "out of range"])
async def test_an_unreadable_acp_connection_bounds_each_send_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Where the SDK connection's state cannot be read (its inner connection
    gone, or the SDK outside the pinned range), one ``RuntimeWarning`` names
    the package, its version and what degrades, and an update the client never
    takes ends its call with ``ConnectionError`` after ``UNSEEN_SEND_S``,
    the tool stopped, instead of waiting for ever (``_host`` Rule 4)."""
    connection = AgentSideConnection(object(), _NoTransport(), listening=False)
    if how == "inner gone":
        del connection._conn
    else:
        monkeypatch.setattr(_upstream, "installed", lambda package: "0.99")

    async def never_sent(**update: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(connection, "session_update", never_sent)
    monkeypatch.setattr(acp_host, "UNSEEN_SEND_S", 0.3)
    calls = AcpToolCalls(connection)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        async with asyncio.timeout(30):
            for _ in range(2):
                with pytest.raises(ConnectionError):
                    await calls.run("s1", ShellTool(), {"command": "sleep 20"})
    ours = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
    assert len(ours) == 1, ours
    version = (
        "0.99" if how == "out of range" else importlib.metadata.version("agent-client-protocol")
    )
    assert ours[0].startswith(f"agent-client-protocol {version} ")
    assert "within 60 s" in ours[0]


@pytest.mark.usefixtures("fresh_acp_fence")
async def test_a_send_given_up_has_ended_when_its_call_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An update's send given up (the connection gone) is cancelled and awaited,
    its cleanup included, before the call raises ``ConnectionError``: no task
    of the host outlives its call (``_host`` Rule 4)."""
    connection = AgentSideConnection(object(), _NoTransport(), listening=False)
    del connection._conn
    cleaned: list[bool] = []

    async def never_sent(**update: Any) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # a cleanup that suspends
            cleaned.append(True)

    monkeypatch.setattr(connection, "session_update", never_sent)
    monkeypatch.setattr(acp_host, "UNSEEN_SEND_S", 0.3)
    before = asyncio.all_tasks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        async with asyncio.timeout(30):
            with pytest.raises(ConnectionError):
                await AcpToolCalls(connection).run("s1", ShellTool(), {"command": "sleep 20"})
    assert cleaned == [True]
    assert asyncio.all_tasks() <= before
