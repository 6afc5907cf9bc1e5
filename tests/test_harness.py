"""Harness events from tool-call traffic, and history repair after a failed turn."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import JsonRpcResponse, decode_message
from kigi_tool_runtime import (
    AnomalyReported,
    GapReported,
    Message,
    OutputAppended,
    ProgressNoted,
    Reassembler,
    TextBlock,
    ToolCallMonitor,
    ToolCompleted,
    ToolFailed,
    ToolResultBlock,
    ToolStarted,
    ToolUseBlock,
    history_is_valid,
    repair_history_after_failure,
)
from kigi_tool_runtime.testing import producer_runs, progress_line

KIND = "bash_output_chunk"


def user(content: Any) -> Message:
    return Message("user", content)


def assistant(content: Any) -> Message:
    return Message("assistant", content)


# -- history repair ------------------------------------------------------------------


def test_repair_keeps_the_prompt_that_started_the_turn() -> None:
    """A pre-existing trailing user message is never removed by repair."""
    messages = [user("hello")]
    assert repair_history_after_failure(messages, 1) == []
    assert messages == [user("hello")]


def test_repair_keeps_partial_assistant_output_and_tool_results() -> None:
    """Text the assistant managed to say and completed tool results survive."""
    messages = [
        user("do the thing"),
        assistant((TextBlock("working on it"), ToolUseBlock(id="tu_1", name="bash", input={}))),
        user((ToolResultBlock(tool_use_id="tu_1", content="ok"),)),
        assistant((TextBlock("partial answer before the failure"),)),
    ]
    before = list(messages)
    assert repair_history_after_failure(messages, 1) == []
    assert messages == before


def test_repair_drops_a_turn_appended_unanswered_tool_use() -> None:
    """A trailing assistant tool request the turn appended is invalid: removed."""
    request = assistant((ToolUseBlock(id="tu_1", name="bash", input={}),))
    messages = [user("do the thing"), request]
    assert repair_history_after_failure(messages, 1) == [request]
    assert messages == [user("do the thing")]


def test_repair_removes_empty_assistant_content_back_to_valid_history() -> None:
    """Empty assistant messages and trailing tool requests go, oldest kept first."""
    messages = [
        user("go"),
        assistant((TextBlock("fine"),)),
        assistant(""),
        assistant(()),
        assistant((TextBlock("x"), ToolUseBlock(id="t", name="n", input=1))),
    ]
    removed = repair_history_after_failure(messages, 1)
    assert messages == [user("go"), assistant((TextBlock("fine"),))]
    assert removed == [
        assistant(""),
        assistant(()),
        assistant((TextBlock("x"), ToolUseBlock(id="t", name="n", input=1))),
    ]


def test_repair_never_reaches_before_the_baseline() -> None:
    """An invalid message from before the turn is not the turn's to remove."""
    stale = assistant((ToolUseBlock(id="old", name="bash", input={}),))
    messages = [user("a"), stale]
    assert repair_history_after_failure(messages, 2) == []
    assert messages == [user("a"), stale]
    assert repair_history_after_failure(messages, 5) == []


def test_repair_refuses_a_negative_baseline() -> None:
    """A baseline below zero is a caller error, named in the message."""
    with pytest.raises(ValueError, match="turn_baseline must not be negative, got -1"):
        repair_history_after_failure([], -1)


_blocks = st.one_of(
    st.builds(TextBlock, st.text(max_size=3)),
    st.builds(ToolUseBlock, st.text(max_size=2), st.just("bash"), st.none()),
    st.builds(ToolResultBlock, st.text(max_size=2), st.text(max_size=2)),
)
_messages = st.builds(
    Message,
    st.sampled_from(["user", "assistant"]),
    st.one_of(st.text(max_size=3), st.lists(_blocks, max_size=3).map(tuple)),
)


@given(st.lists(_messages, max_size=8), st.data())
def test_repair_only_trims_the_turn_and_leaves_valid_history(
    history: list[Message], data: st.DataObject
) -> None:
    """Repair removes a suffix of the turn's messages only, stops at the first
    valid trailing message, and leaves history valid unless what is left is
    all from before the turn."""
    baseline = data.draw(st.integers(0, len(history) + 1))
    messages = list(history)
    removed = repair_history_after_failure(messages, baseline)
    assert messages + removed == history
    assert len(messages) >= min(baseline, len(history))
    assert history_is_valid(messages) or len(messages) <= baseline
    if removed:
        assert not history_is_valid([removed[-1]])


def test_history_validity_of_trailing_messages() -> None:
    """Users may end a history; assistants only with something said and no request."""
    assert history_is_valid([])
    assert history_is_valid([user("")])
    assert history_is_valid([assistant("hi")])
    assert not history_is_valid([assistant("")])
    assert not history_is_valid([assistant(())])
    assert not history_is_valid([user("q"), assistant((ToolUseBlock("t", "n", None),))])


# -- events ---------------------------------------------------------------------


def test_monitor_turns_frames_into_ordered_events() -> None:
    """Start, text, a gap before the text after it, a note, then the result."""
    monitor = ToolCallMonitor()
    assert monitor.started("c1", "bash") == ToolStarted("c1", "bash")
    events = []
    for body in (
        {"delta": "ab", "total_bytes": 2},
        {"delta": "cd", "total_bytes": 20, "gap": True},
    ):
        events += monitor.progress(progress_line("c1", KIND, body))
    events += monitor.progress(progress_line("c1", "text", {"text": "half way"}))
    assert [type(event) for event in events] == [
        OutputAppended,
        GapReported,
        OutputAppended,
        ProgressNoted,
    ]
    assert events[0] == OutputAppended("c1", KIND, "ab")
    gap = events[1]
    assert isinstance(gap, GapReported)
    assert gap.gap.lost_bytes == 16
    assert events[3] == ProgressNoted("c1", "text", {"text": "half way"})
    done = monitor.completed("c1", {"exit_code": 0})
    assert isinstance(done, ToolCompleted)
    assert done.output == {"exit_code": 0}
    assert done.tool_id == "bash"
    assert [report.key.subkind for report in done.reports] == [KIND, "text"]
    assert done.reports[0].gaps == (gap.gap,)


def test_monitor_reports_anomalies_as_events() -> None:
    """A broken record becomes an event to display, never silence."""
    monitor = ToolCallMonitor()
    (event,) = monitor.progress(b"{oops")
    assert isinstance(event, AnomalyReported)
    assert event.anomaly.kind == "undecodable"


def test_monitor_failure_carries_the_streamed_reports() -> None:
    """A failed call still says what its output lost."""
    monitor = ToolCallMonitor(Reassembler(known_calls={"c1"}))
    monitor.started("c1", "bash")
    monitor.progress(progress_line("c1", KIND, {"delta": "x", "total_bytes": 1, "truncated": True}))
    failed = monitor.failed("c1", "exit 2", -32603)
    assert isinstance(failed, ToolFailed)
    assert (failed.message, failed.code) == ("exit 2", -32603)
    assert failed.reports[0].truncated
    assert failed.tool_id == "bash"
    stranger = monitor.failed("other", "x")
    assert (stranger.reports, stranger.tool_id) == ((), None)


def test_monitor_maps_a_response_to_its_outcome() -> None:
    """A result completes the call; an error fails it with message and code."""
    monitor = ToolCallMonitor()
    ok = decode_message(b'{"jsonrpc":"2.0","id":1,"result":{"output":"done"}}')
    bad = decode_message(b'{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"timed out"}}')
    assert isinstance(ok, JsonRpcResponse)
    assert isinstance(bad, JsonRpcResponse)
    assert monitor.outcome("c1", ok) == ToolCompleted("c1", {"output": "done"}, ())
    assert monitor.outcome("c2", bad) == ToolFailed("c2", "timed out", -32001, ())


def test_monitor_refuses_to_start_a_call_twice() -> None:
    """Call ids are unique; starting one twice is a caller error."""
    monitor = ToolCallMonitor()
    monitor.started("c1", "bash")
    with pytest.raises(ValueError, match="tool call 'c1' was already started"):
        monitor.started("c1", "bash")


@given(producer_runs())
def test_events_rebuild_the_rendered_output(run: Any) -> None:
    """Concatenating OutputAppended texts, with a marker per GapReported, gives
    the stream's text with a marker at every gap offset."""
    monitor = ToolCallMonitor()
    pieces: list[str] = []
    for frame in run.frames:
        for event in monitor.progress(progress_line(run.tool_call_id, run.subkind, frame)):
            if isinstance(event, GapReported):
                pieces.append("|")
            elif isinstance(event, OutputAppended):
                pieces.append(event.text)
    state = monitor.reassembler.stream(run.tool_call_id, run.subkind)
    expected = "" if state is None else state.render("|")
    assert "".join(pieces) == expected
