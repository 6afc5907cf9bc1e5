"""Harness events from tool-call traffic (``ToolCallMonitor``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from kigi_tool_protocol import JsonRpcResponse, decode_message
from kigi_tool_runtime import (
    AnomalyReported,
    GapReported,
    OutputAppended,
    ProgressNoted,
    Reassembler,
    ToolCallMonitor,
    ToolCompleted,
    ToolFailed,
    ToolStarted,
)
from kigi_tool_runtime.testing._consumer_strategies import producer_runs, progress_line

KIND = "bash_output_chunk"


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
    (final,) = done.reports[0].gaps
    assert (final.index, final.lost_bytes) == (gap.gap.index, gap.gap.lost_bytes)
    # Live, the run could still go on: at least 1 byte; at the end, the fold's bound.
    assert gap.gap.lost_bytes_min == 1
    assert final.lost_bytes_min == 16 - 3


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
