"""Reassembler: exact reassembly, bounded gaps, every anomaly reported, and the
fold contract ``fold(a).absorb(fold(b)) == fold(a + b)``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    MAX_FRAME_BYTES_CEILING,
    METHOD_TOOL_CALL_PROGRESS,
    DecodeError,
    JsonRpcNotification,
    PartialResultPayload,
    StreamingSpec,
    ToolCallProgressFrame,
    json_codec,
)
from kigi_tool_runtime import (
    DEFAULT_GAP_MARKER,
    DEFAULT_MAX_RECORD_BYTES,
    MAX_HELD_BYTES,
    DeltaStreamer,
    Gap,
    Reassembler,
    StreamKey,
    TailBuffer,
)
from kigi_tool_runtime._lines import OversizedLine
from kigi_tool_runtime.testing import (
    FrameLog,
    damaged_frame_logs,
    frame_logs,
    producer_runs,
    progress_line,
    utf8_text_sources,
)

KIND = "bash_output_chunk"


def body(delta: str, total: int, *, gap: bool = False, truncated: bool = False) -> dict[str, Any]:
    return {"delta": delta, "total_bytes": total, "truncated": truncated, "gap": gap}


def line(body_: Any, *, seq: int | None = None, call: str = "c1", kind: str = KIND) -> bytes:
    return progress_line(call, kind, body_, seq)


def only(reassembler: Reassembler, call: str = "c1", kind: str = KIND) -> Any:
    state = reassembler.stream(call, kind)
    assert state is not None
    return state


def decoded(lines: list[bytes]) -> list[Any]:
    """Lines decoded once into typed notifications, so folding them many times
    is cheap; a line that does not decode stays a line."""
    typed = JsonRpcNotification[ToolCallProgressFrame[PartialResultPayload]]
    records: list[Any] = []
    for one in lines:
        try:
            records.append(json_codec.decode(one, typed))
        except DecodeError:
            records.append(one)
    return records


#: How many records one example may fold in total across its split points.
#: Logs up to ~245 records are cut at every point; a longer one (a cap of 0
#: streams one character per frame) at its first and last 10 points and evenly
#: between, so the quadratic check stays within the suite's time budget.
SPLIT_WORK = 60_000


def split_points(count: int) -> list[int]:
    points = max(SPLIT_WORK // max(count, 1), 40)
    if count + 1 <= points:
        return list(range(count + 1))
    middle = range(10, count - 10, max((count - 20) // (points - 20), 1))
    return sorted({*range(11), *middle, *range(count - 10, count + 1)})


# -- producer -> codec -> reassembler -------------------------------------------


@given(producer_runs())
def test_reassembly_is_exact_without_loss_and_gaps_bound_real_losses(run: Any) -> None:
    """Through the real core and the JSON codec, the text equals the source when
    no gap is reported, and each gap sits on a frame whose tail overflowed, with
    bounds that contain the bytes truly lost there."""
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    folded = Reassembler.fold(lines)
    state = folded.stream(run.tool_call_id, run.subkind)
    if not run.frames:
        assert state is None
        return
    assert folded.anomalies == ()
    gap_frames = [index for index, frame in enumerate(run.frames) if frame.gap]
    assert [gap.index for gap in state.gaps] == gap_frames
    if not gap_frames:
        assert state.text == run.source.decode("utf-8", "replace")
        assert state.report().complete
    for gap in state.gaps:
        truth = run.losses[gap.index]
        if truth is not None:
            assert truth > 0
            assert gap.lost_bytes_min <= truth <= gap.lost_bytes
            assert not gap.exact or gap.lost_bytes == truth
    assert state.text == "".join(frame.delta for frame in run.frames)
    assert state.total_bytes == len(run.source)


@given(producer_runs(utf8_text_sources()))
def test_valid_text_loses_exactly_what_the_gaps_and_total_account_for(run: Any) -> None:
    """For valid UTF-8 drained to the end, the text plus the lost bytes is the
    whole source: total minus text bytes lies within the gaps' summed bounds."""
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    state = Reassembler.fold(lines).stream(run.tool_call_id, run.subkind)
    if state is None:
        assert run.source == b""
        return
    report = state.report()
    assert "\ufffd" not in state.text or "\ufffd" in run.source.decode()
    assert report.lost_bytes_min <= report.undelivered_bytes <= report.lost_bytes or (
        not report.gaps and report.undelivered_bytes == 0
    )


def test_a_gap_is_exact_when_the_producer_was_caught_up() -> None:
    """A tail overflow between two ASCII ticks is reported at the right place,
    with the exact byte count, and rendered with the marker."""
    buffer = TailBuffer(8)
    streamer = DeltaStreamer(StreamingSpec(subkind=KIND, max_delta_bytes=3))
    lines = []
    for write in (b"hello ", b"world, this is long", b"!"):
        buffer.write(write)
        lines += [line(frame.payload) for frame in streamer.drain_buffer(buffer)]
    lines += [line(frame.payload) for frame in streamer.finish_buffer(buffer)]
    state = only(Reassembler.fold(lines))
    assert state.text == "hello  is long!"
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact) == (6, 11, True)
    assert state.render() == "hello [... 11 bytes lost ...] is long!"


def test_a_held_character_makes_the_gap_a_bound_of_at_most_three_bytes() -> None:
    """When the frame after a gap starts with a 4-byte character, the producer
    may have held up to 3 of its bytes back, so the count is a range."""
    lines = [
        line(body("ab", 2)),
        line(body("cd", 20, gap=True)),
        line(body("😀z", 25)),
    ]
    (gap,) = only(Reassembler.fold(lines)).gaps
    assert (gap.lost_bytes_min, gap.lost_bytes) == (16 - MAX_HELD_BYTES, 16)
    assert not gap.exact
    assert gap.describe() == "13-16"


def test_an_ascii_frame_after_a_gap_pins_its_count() -> None:
    """An ASCII first character after a gap's run proves nothing was held."""
    lines = [line(body("ab", 2)), line(body("cd", 20, gap=True)), line(body("z", 21))]
    (gap,) = only(Reassembler.fold(lines)).gaps
    assert (gap.lost_bytes_min, gap.lost_bytes, gap.exact) == (16, 16, True)


def test_replacement_characters_widen_a_gap_into_a_bound() -> None:
    """A U+FFFD stands for 1 to 3 source bytes, so a gap after one is a range."""
    lines = [line(body("a\ufffd", 4)), line(body("b", 10, gap=True)), line(body("c", 11))]
    (gap,) = only(Reassembler.fold(lines)).gaps
    assert (gap.lost_bytes_min, gap.lost_bytes) == (5, 7)


def test_paced_frames_after_a_gap_belong_to_it() -> None:
    """Frames that repeat the gap frame's total are the rest of its surviving
    tail, so they lower the lost count, even across a fold split."""
    lines = [line(body("ab", 2)), line(body("c", 12, gap=True)), line(body("de", 12))]
    folded = Reassembler.fold(lines)
    (gap,) = only(folded).gaps
    assert gap.lost_bytes == 7
    split = Reassembler.fold(lines[:2]).absorb(Reassembler.fold(lines[2:]))
    assert split == folded


def test_empty_gap_frame_makes_text_present_but_empty() -> None:
    """Absent is not empty: no frame means None, a gap with nothing decodable means ""."""
    assert Reassembler.fold([]).stream("c1", KIND) is None
    state = only(Reassembler.fold([line(body("", 50, gap=True))]))
    assert state.text == ""
    assert state.gaps[0].lost_bytes == 50
    assert state.render("<{lost}>") == "<47-50>"


# -- the fold contract -----------------------------------------------------------


@given(frame_logs())
def test_fold_contract_holds_at_every_split(log: FrameLog) -> None:
    """Folding the two sides of any split and absorbing equals folding the whole."""
    records = decoded(list(log.lines))
    whole = Reassembler.fold(records)
    for cut in split_points(len(records)):
        assert Reassembler.fold(records[:cut]).absorb(Reassembler.fold(records[cut:])) == whole
    assert Reassembler.fold(log.lines) == whole


@given(damaged_frame_logs(), st.data())
def test_fold_contract_holds_on_damaged_logs(damaged: tuple[list[bytes], str], data: Any) -> None:
    """Duplicates, holes, regressions and garbage straddling a split are found
    all the same, from raw lines, at any two split points."""
    lines, _ = damaged
    whole = Reassembler.fold(lines)
    first = data.draw(st.integers(0, len(lines)))
    second = data.draw(st.integers(first, len(lines)))
    parts = [lines[:first], lines[first:second], lines[second:]]
    left = Reassembler.fold(parts[0])
    assert left.absorb(Reassembler.fold(parts[1]).absorb(Reassembler.fold(parts[2]))) == whole
    assert (
        Reassembler.fold(parts[0])
        .absorb(Reassembler.fold(parts[1]))
        .absorb(Reassembler.fold(parts[2]))
        == whole
    )
    assert whole.records == len(lines)


def test_cross_boundary_checks_are_found_after_a_split() -> None:
    """A seq hole and a total regression right at the split are still reported."""
    lines = [line(body("abc", 3), seq=1), line(body("d", 2), seq=5)]
    whole = Reassembler.fold(lines)
    assert [a.kind for a in whole.anomalies] == ["seq_gap", "total_regressed"]
    assert Reassembler.fold(lines[:1]).absorb(Reassembler.fold(lines[1:])) == whole


def test_absorbing_itself_doubles_the_records() -> None:
    """``r.absorb(r)`` folds the sequence twice, as if it had been received twice."""
    lines = [line(body("ab", 2), seq=1)]
    twice = Reassembler.fold(lines)
    twice.absorb(twice)
    assert twice == Reassembler.fold(lines + lines)
    assert only(twice).text == "abab"


def test_absorbing_a_differently_configured_fold_is_refused() -> None:
    """Folds made with different known calls cannot be combined."""
    with pytest.raises(ValueError, match="different known_calls or max_record_bytes"):
        Reassembler(known_calls={"a"}).absorb(Reassembler())


def test_state_is_a_value() -> None:
    """Two folds of the same records are equal, and differ once one absorbs more."""
    lines = [line(body("ab", 2))]
    one, two = Reassembler.fold(lines), Reassembler.fold(lines)
    assert one == two
    assert only(one) == only(two)
    two.absorb_line(line(body("c", 3)))
    assert one != two
    assert only(one) != only(two)
    assert one != "not a reassembler"


# -- bad and hostile input ---------------------------------------------------------


def test_unknown_field_in_a_payload_is_reported_and_the_stream_goes_on() -> None:
    """A body with an extra field fails strict decode; the next frame still lands."""
    folded = Reassembler.fold(
        [line({"delta": "x", "total_bytes": 1, "colour": "red"}), line(body("ab", 2))]
    )
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "payload_invalid"
    assert anomaly.key == StreamKey("c1", KIND)
    assert "unknown field `colour`" in anomaly.detail
    assert only(folded).text == "ab"
    assert only(folded).frames == 2


def test_payload_that_is_not_an_object_is_reported() -> None:
    """A list body is not a partial result, and the path says where."""
    (anomaly,) = Reassembler.fold([line([1, 2])]).anomalies
    assert anomaly.kind == "payload_invalid"
    assert "Expected `object`, got `array`" in anomaly.detail
    assert "$.params.body" in anomaly.detail


def test_payload_with_a_float_total_is_reported() -> None:
    """``1.0`` is not an integer on this wire."""
    (anomaly,) = Reassembler.fold([line({"delta": "", "total_bytes": 1.0})]).anomalies
    assert "Expected `int`, got `float`" in anomaly.detail
    assert "total_bytes" in anomaly.detail


def test_frame_for_an_unknown_call_is_reported_once_and_kept() -> None:
    """A harness that names its calls hears about a stranger, and keeps its text."""
    folded = Reassembler.fold(
        [line(body("a", 1), call="ghost"), line(body("b", 2), call="ghost")],
        known_calls={"c1"},
    )
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "unknown_call"
    assert "'ghost'" in anomaly.detail
    assert only(folded, "ghost").text == "ab"


def test_total_bytes_going_backwards_is_reported() -> None:
    """A regression names both totals; an equal total (pacing) is fine."""
    folded = Reassembler.fold([line(body("a", 10)), line(body("b", 10)), line(body("c", 5))])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "total_regressed"
    assert anomaly.detail == "total_bytes went back from 10 to 5; it never decreases"
    assert anomaly.index == 2


def test_seq_hole_is_reported_with_the_count_lost() -> None:
    """Envelope seq 1 then 4: two frames were lost in transport."""
    folded = Reassembler.fold([line(body("a", 1), seq=1), line(body("b", 2), seq=4)])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "seq_gap"
    assert anomaly.detail == "seq jumped from 1 to 4: 2 frame(s) lost in transport"
    assert anomaly.key is None


def test_seq_is_one_counter_across_streams() -> None:
    """seq counts the connection, so frames of two calls interleave without holes."""
    lines = [
        line(body("a", 1), seq=7, call="x"),
        line(body("b", 1), seq=8, call="y"),
        line(body("c", 2), seq=9, call="x"),
    ]
    assert Reassembler.fold(lines).anomalies == ()


def test_duplicated_frames_are_reported_and_visible_in_the_text() -> None:
    """A repeated seq is reported; its delta is absorbed again, and the report says so."""
    frame = line(body("ab", 2), seq=3)
    folded = Reassembler.fold([frame, frame])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "seq_repeated"
    assert "absorbed again" in anomaly.detail
    assert only(folded).text == "abab"
    assert "1 anomaly (seq_repeated)" in folded.summary()


def test_reordered_frames_are_reported() -> None:
    """seq going back is a reordering (or a replay)."""
    folded = Reassembler.fold([line(body("a", 1), seq=5), line(body("b", 2), seq=4)])
    assert [a.kind for a in folded.anomalies] == ["seq_reordered"]
    assert folded.anomalies[0].detail == "seq went back from 5 to 4"


def test_dropped_count_is_reported() -> None:
    """A sender that dropped frames says so, and the reader hears it."""
    frame = ToolCallProgressFrame(
        tool_call_id="c1",
        kind=KIND,
        body=PartialResultPayload(delta="a", total_bytes=1),
        dropped_count=3,
    )
    folded = Reassembler()
    folded.absorb_frame(frame)
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "dropped_frames"
    assert "dropped 3 frame(s)" in anomaly.detail
    frame_zero = ToolCallProgressFrame(
        tool_call_id="c1",
        kind=KIND,
        body=PartialResultPayload(delta="b", total_bytes=2),
        dropped_count=0,
    )
    folded.absorb_frame(frame_zero)
    assert len(folded.anomalies) == 1


def test_truncated_last_line_is_undecodable_and_counted() -> None:
    """A line cut mid-write is reported, and the fold goes on after it."""
    whole = line(body("abc", 3))
    folded = Reassembler.fold([whole[:-7], line(body("de", 5))])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "undecodable"
    assert anomaly.detail == "not a JSON-RPC message: Input data was truncated"
    assert only(folded).text == "de"
    assert folded.records == 2


def test_invalid_utf8_in_a_delta_is_reported_against_its_stream() -> None:
    """Invalid UTF-8 inside a delta is rejected, not replaced, and the frame
    still counts against its stream."""
    bad = line(body("aXb", 3)).replace(b"X", b"\xff")
    folded = Reassembler.fold([bad, line(body("c", 4))])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "payload_invalid"
    assert "Invalid UTF-8" in anomaly.detail
    assert only(folded).text == "c"


def test_a_20_mib_line_is_rejected_by_the_frame_limit_unparsed() -> None:
    """A line past the 16 MiB ceiling is reported with its size and the limit."""
    huge = line(body("x" * (20 * 1024 * 1024), 20 * 1024 * 1024))
    folded = Reassembler.fold([huge, line(body("ok", 2))])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "undecodable"
    assert f"exceeds the frame limit of {MAX_FRAME_BYTES_CEILING} bytes" in anomaly.detail
    assert DEFAULT_MAX_RECORD_BYTES == MAX_FRAME_BYTES_CEILING
    assert only(folded).text == "ok"


def test_record_limit_is_a_bound_that_is_hit_exactly() -> None:
    """A line of exactly the limit is parsed; one byte more is not."""
    frame = line(body("a", 1))
    at_limit = Reassembler.fold([frame], max_record_bytes=len(frame))
    assert at_limit.anomalies == ()
    over = Reassembler.fold([frame], max_record_bytes=len(frame) - 1)
    assert over.anomalies[0].kind == "undecodable"
    assert "exceeds the frame limit" in over.anomalies[0].detail


def test_record_limit_must_be_positive() -> None:
    """A limit below one byte is a caller error."""
    with pytest.raises(ValueError, match="max_record_bytes must be at least 1, got 0"):
        Reassembler(max_record_bytes=0)


def test_oversized_line_marker_is_reported() -> None:
    """A line the reader skipped unread is counted, with its size."""
    folded = Reassembler.fold([OversizedLine(size=999, limit=10)])
    (anomaly,) = folded.anomalies
    assert anomaly.detail == (
        "line of 999 bytes exceeds the frame limit of 10 bytes; it was skipped unread"
    )


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        (b"", "Input data was truncated"),
        (b"}{", "JSON is malformed"),
        (b'{"jsonrpc":"2.0","method":"tool_call_progress\xff","params":1}', "Invalid UTF-8"),
        (b"[1,2]", "not a JSON-RPC message"),
        (b'{"method":"tool_call_progress","params":{}}', "jsonrpc"),
        (
            b'{"jsonrpc":"2.0","method":"tool_call_progress","params":{"kind":"k","body":1}}',
            "`$.params`",
        ),
        (
            b'{"jsonrpc":"2.0","method":"tool_call_progress",'
            b'"params":{"tool_call_id":"","kind":"k","body":1}}',
            "tool_call_id",
        ),
    ],
)
def test_broken_envelopes_are_undecodable(record: bytes, needle: str) -> None:
    """Each layer that is wrong is named in the report."""
    (anomaly,) = Reassembler.fold([record]).anomalies
    assert anomaly.kind == "undecodable"
    assert needle in anomaly.detail


def test_seq_of_other_notifications_counts_too() -> None:
    """seq numbers every notification on the connection, so a ping in between
    is no hole, and a missing one is."""
    lines = [
        line(body("a", 1), seq=1),
        b'{"jsonrpc":"2.0","seq":2,"method":"ping","params":null}',
        line(body("b", 2), seq=3),
        JsonRpcNotification(seq=4, method="ping", params=None),
        line(body("c", 3), seq=6),
    ]
    folded = Reassembler.fold(lines)
    assert [a.kind for a in folded.anomalies] == ["seq_gap"]
    assert folded.anomalies[0].index == 4


def test_other_messages_are_counted_not_reported() -> None:
    """Requests, responses and other notifications are counted as ignored."""
    folded = Reassembler.fold(
        [
            b'{"jsonrpc":"2.0","method":"ping","params":null}',
            b'{"jsonrpc":"2.0","id":1,"result":{}}',
            b'{"jsonrpc":"2.0","id":2,"method":"tool.call","params":{}}',
        ]
    )
    assert (folded.ignored, folded.anomalies, folded.records) == (3, (), 3)
    assert "3 other messages ignored" in folded.summary()


def test_text_and_content_frames_are_notes_not_anomalies() -> None:
    """Plain text and content progress are kept verbatim beside the delta streams."""
    folded = Reassembler.fold(
        [
            line({"text": "compiling"}, kind="text"),
            line([{"type": "text", "text": "x"}], kind="content"),
        ]
    )
    assert folded.anomalies == ()
    assert only(folded, kind="text").notes == ({"text": "compiling"},)
    assert only(folded, kind="text").text is None
    assert only(folded, kind="content").notes == ([{"type": "text", "text": "x"}],)


def test_decoded_frames_and_notifications_fold_like_lines() -> None:
    """A frame, a typed notification and a line are the same record."""
    payload = PartialResultPayload(delta="hé", total_bytes=3)
    frame = ToolCallProgressFrame(tool_call_id="c1", kind=KIND, body=payload)
    notification = JsonRpcNotification(seq=1, method=METHOD_TOOL_CALL_PROGRESS, params=frame)
    raw = json_codec.encode(notification)
    as_dict = JsonRpcNotification(
        seq=1, method=METHOD_TOOL_CALL_PROGRESS, params=json.loads(raw)["params"]
    )
    by_line = Reassembler.fold([raw])
    assert Reassembler.fold([notification]) == by_line
    assert Reassembler.fold([as_dict]) == by_line
    by_frame = Reassembler()
    by_frame.absorb_frame(frame, seq=1)
    assert by_frame == by_line


def test_notification_with_bad_params_is_undecodable_but_its_seq_counts() -> None:
    """params that are not a frame are reported; the seq still feeds hole detection."""
    folded = Reassembler.fold(
        [
            JsonRpcNotification(seq=1, method=METHOD_TOOL_CALL_PROGRESS, params={"kind": 1}),
            JsonRpcNotification(method="ping", params=None),
            line(body("a", 1), seq=2),
        ]
    )
    assert [a.kind for a in folded.anomalies] == ["undecodable"]
    assert "progress params are not a frame" in folded.anomalies[0].detail
    assert folded.ignored == 1


# -- appended, render, report ----------------------------------------------------------


def test_appended_prints_the_text_and_markers_of_the_render() -> None:
    """Printing each frame's append puts the same text and markers where the
    render does; a printed count is the bound known then, and the final count
    lies within it."""
    lines = [
        line(body("ab", 2)),
        line(body("cd", 20, gap=True)),
        line(body("e", 20)),
        line(body("f", 21, truncated=True)),
    ]
    reassembler = Reassembler()
    printed = "".join(reassembler.appended(one).render("<{lost}>") for one in lines)
    assert printed == "ab<13-16>cdef"
    assert only(reassembler).render("<{lost}>") == "ab<15>cdef"
    last = Reassembler.fold(lines[:3]).appended(lines[3])
    assert (last.text, last.truncated, last.gap) == ("f", True, None)


def test_appended_of_a_gap_frame_gives_the_bound_known_at_that_frame() -> None:
    """A line printer sees the gap with the wire's formula: total minus previous
    total minus the delta's UTF-8 length, as an upper bound."""
    reassembler = Reassembler.fold([line(body("ab", 2))])
    added = reassembler.appended(line(body("cd", 20, gap=True)))
    assert added.gap is not None
    assert added.gap.lost_bytes == 20 - 2 - 2
    assert added.text == "cd"
    assert added.key == StreamKey("c1", KIND)


def test_appended_reports_anomalies_of_that_record() -> None:
    """An undecodable record appends nothing and says why."""
    added = Reassembler().appended(b"nope")
    assert added.key is None
    assert [a.kind for a in added.anomalies] == ["undecodable"]
    frame = ToolCallProgressFrame(tool_call_id="c1", kind=KIND, body=body("a", 1))
    noted = Reassembler().appended(frame, seq=4)
    assert noted.text == "a"


def test_render_uses_the_configured_marker() -> None:
    """The marker is a template or a function of the gap."""
    state = only(
        Reassembler.fold([line(body("ab", 2)), line(body("z", 10, gap=True)), line(body("y", 11))])
    )
    assert state.render() == "ab" + DEFAULT_GAP_MARKER.format(lost="7") + "zy"
    assert state.render("|") == "ab|zy"
    assert state.render(lambda gap: f"<{gap.lost_bytes}>") == "ab<7>zy"


def test_summary_is_one_line_with_every_fact() -> None:
    """Bytes, frames, total, gaps, truncation and anomalies, on one line."""
    folded = Reassembler.fold(
        [
            line(body("ab", 2), seq=1),
            line(body("z", 10, gap=True), seq=2),
            line(body("y", 11, truncated=True), seq=4),
        ]
    )
    summary = only(folded).report().summary()
    assert summary == (
        "c1/bash_output_chunk: 4 bytes in 3 frames (total 11), 1 gap (7 bytes lost), "
        "truncated at the output limit"
    )
    assert "\n" not in summary
    assert "seq_gap" in folded.summary()
    empty = only(Reassembler.fold([line({"bad": 1})])).report().summary()
    assert empty == (
        "c1/bash_output_chunk: 0 bytes in 1 frame (no total yet), no gaps, "
        "1 anomaly (payload_invalid)"
    )


def test_report_counts_lost_and_undelivered_bytes() -> None:
    """The report sums the gaps and says what the total says is missing."""
    report = only(
        Reassembler.fold([line(body("ab", 2)), line(body("z", 10, gap=True)), line(body("y", 11))])
    ).report()
    assert (report.lost_bytes, report.lost_bytes_min, report.undelivered_bytes) == (7, 7, 7)
    assert not report.complete
    assert report.gaps == (Gap(offset=2, index=1, total_bytes=10, upper=7, lower=7, held=0),)


def test_streams_view_is_read_only_and_ordered() -> None:
    """Streams come back in first-seen order and cannot be replaced."""
    folded = Reassembler.fold([line(body("a", 1), call="b"), line(body("a", 1), call="a")])
    assert list(folded.streams) == [StreamKey("b", KIND), StreamKey("a", KIND)]
    assert len(folded.streams) == 2
    assert not hasattr(folded.streams, "__setitem__")
    assert [report.key.tool_call_id for report in folded.reports()] == ["b", "a"]
