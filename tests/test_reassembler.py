"""Reassembler: exact reassembly, bounded gaps, every anomaly reported, and the
fold contract ``fold(a).absorb(fold(b)) == fold(a + b)``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcNotification,
    PartialResultPayload,
    StreamingSpec,
    ToolCallProgressFrame,
    json_codec,
)
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS
from kigi_tool_runtime import DeltaStreamer, Gap, Reassembler, TailBuffer
from kigi_tool_runtime._consumer._loss import (
    DEFAULT_GAP_MARKER,
    MAX_ANOMALIES_KEPT,
    MAX_HELD_BYTES,
    StreamKey,
)
from kigi_tool_runtime._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES, SeqScope
from kigi_tool_runtime._text import MAX_DETAIL_CHARS
from kigi_tool_runtime._wire._split import OversizedLine
from kigi_tool_runtime.testing import (
    byte_sources,
    caps,
    damaged_frame_logs,
    frame_logs,
    schedules,
    utf8_text_sources,
)
from kigi_tool_runtime.testing._consumer_strategies import FrameLog, producer_runs, progress_line
from kigi_tool_runtime.testing._strategies import ScheduleStep, output_limits

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


SCOPES = pytest.mark.parametrize("scope", ["call", "connection"])


def per_call(lines: list[bytes] | tuple[bytes, ...]) -> list[bytes]:
    """``lines`` renumbered as this project's server numbers them: each call's
    ``seq`` counts 0, 1, 2, ... on its own."""
    counters: dict[str, int] = {}
    renumbered = []
    for one in lines:
        params = json.loads(one)["params"]
        call = params["tool_call_id"]
        seq = counters.get(call, 0)
        counters[call] = seq + 1
        renumbered.append(progress_line(call, params["kind"], params["body"], seq))
    return renumbered


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
    assert state is not None
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
    # A printer's bounds, taken at each gap frame as it lands, hold the truth too.
    live = Reassembler()
    for index, line in enumerate(lines):
        added = live.appended(line)
        truth = run.losses[index]
        if added.gap is not None and truth is not None:
            assert added.gap.lost_bytes_min <= truth <= added.gap.lost_bytes


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
    assert state.text is not None
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


def limited_lines(
    steps: list[ScheduleStep], cap: int | None, capacity: int, limit: int | None
) -> tuple[list[bytes], TailBuffer]:
    """The lines of a stream through a TailBuffer with ``limit``, drained on each
    tick and finished at the end (so a truncation ends with its notice)."""
    buffer = TailBuffer(capacity, limit)
    streamer = DeltaStreamer(StreamingSpec(subkind=KIND, max_delta_bytes=cap))
    lines: list[bytes] = []
    for step in steps:
        if step is None:
            lines += [line(frame.payload) for frame in streamer.drain_buffer(buffer)]
        else:
            buffer.write(step)
    lines += [line(frame.payload) for frame in streamer.finish_buffer(buffer)]
    return lines, buffer


@pytest.mark.parametrize("limit", [0, 6])
def test_a_truncation_notice_makes_the_stream_truncated_without_anomaly(limit: int) -> None:
    """Output that stops exactly at the limit (or a limit of 0) ends with the
    truncation notice: the stream and its report say truncated, the text is
    what was accepted, and the empty frame is no anomaly, in whole and split folds."""
    lines, buffer = limited_lines([b"hello "[:limit], None, b"world"], 3, 16, limit)
    assert buffer.truncated
    assert json.loads(lines[-1])["params"]["body"] == body("", limit, truncated=True)
    folded = Reassembler.fold(lines)
    state = only(folded)
    assert folded.anomalies == ()
    assert state.text == "hello "[:limit]
    assert state.truncated
    assert state.total_bytes == limit
    report = state.report()
    assert report.truncated
    assert not report.complete
    assert report.summary().endswith("truncated at the output limit")
    for cut in range(len(lines) + 1):
        split = Reassembler.fold(lines[:cut]).absorb(Reassembler.fold(lines[cut:]))
        assert split == folded
    appended = Reassembler.fold(lines[:-1]).appended(lines[-1])
    assert (appended.text, appended.gap, appended.truncated, appended.anomalies) == (
        "",
        None,
        True,
        (),
    )
    assert appended.render() == ""


@given(
    source=byte_sources(),
    cap=caps(),
    capacity=st.integers(4, 24),
    data=st.data(),
)
def test_a_folded_stream_is_truncated_iff_the_limit_refused_a_byte(
    source: bytes, cap: int | None, capacity: int, data: st.DataObject
) -> None:
    """With any limit and schedule, the fold says truncated exactly when the buffer
    refused a byte, reports no anomaly, and keeps the fold contract at every split."""
    steps = data.draw(schedules(source))
    limit = data.draw(output_limits(steps), label="limit")
    lines, buffer = limited_lines(steps, cap, capacity, limit)
    whole = Reassembler.fold(lines)
    state = whole.stream("c1", KIND)
    assert whole.anomalies == ()
    assert (state is not None and state.report().truncated) == buffer.truncated
    for cut in split_points(len(lines)):
        assert Reassembler.fold(lines[:cut]).absorb(Reassembler.fold(lines[cut:])) == whole


# -- the fold contract -----------------------------------------------------------


@SCOPES
@given(log=frame_logs())
def test_fold_contract_holds_at_every_split(scope: SeqScope, log: FrameLog) -> None:
    """Folding the two sides of any split and absorbing equals folding the whole,
    in either seq scope (a connection-numbered log read per call is full of
    per-call holes, each found across the split too)."""
    records = decoded(list(log.lines))
    whole = Reassembler.fold(records, seq_scope=scope)
    for cut in split_points(len(records)):
        left = Reassembler.fold(records[:cut], seq_scope=scope)
        assert left.absorb(Reassembler.fold(records[cut:], seq_scope=scope)) == whole
    assert Reassembler.fold(log.lines, seq_scope=scope) == whole


@SCOPES
@given(damaged=damaged_frame_logs(), data=st.data())
def test_fold_contract_holds_on_damaged_logs(
    scope: SeqScope, damaged: tuple[list[bytes], str], data: Any
) -> None:
    """Duplicates, holes, regressions and garbage straddling a split are found
    all the same, from raw lines, at any two split points, in either seq scope."""
    lines, _ = damaged
    whole = Reassembler.fold(lines, seq_scope=scope)
    first = data.draw(st.integers(0, len(lines)))
    second = data.draw(st.integers(first, len(lines)))
    parts = [lines[:first], lines[first:second], lines[second:]]

    def fold(part: list[bytes]) -> Reassembler:
        return Reassembler.fold(part, seq_scope=scope)

    assert fold(parts[0]).absorb(fold(parts[1]).absorb(fold(parts[2]))) == whole
    assert fold(parts[0]).absorb(fold(parts[1])).absorb(fold(parts[2])) == whole
    assert whole.records == len(lines)


@SCOPES
@given(log=frame_logs(), data=st.data())
def test_fold_contract_holds_on_per_call_numbered_logs(
    scope: SeqScope, log: FrameLog, data: Any
) -> None:
    """Interleaved calls numbered per call, as the server writes them, with one
    line dropped, repeated or swapped: the fold contract holds at any split,
    and "call" scope finds exactly the damage while an intact log is clean."""
    lines = per_call(log.lines)
    damages = ["none", "drop", "duplicate", "swap"] if lines else ["none"]
    damage = data.draw(st.sampled_from(damages))
    at = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    calls = [json.loads(one)["params"]["tool_call_id"] for one in lines]
    # A dropped frame is a hole when a later frame of its call arrives: a seq
    # jump, or a first seq above 0 (each call counts from 0).
    hole = bool(lines) and calls[at] in calls[at + 1 :]
    if damage == "drop":
        del lines[at]
    elif damage == "duplicate":
        lines.insert(at, lines[at])
    elif damage == "swap" and at + 1 < len(lines):
        lines[at], lines[at + 1] = lines[at + 1], lines[at]
    whole = Reassembler.fold(lines, seq_scope=scope)
    for _ in range(3):
        cut = data.draw(st.integers(0, len(lines)))
        left = Reassembler.fold(lines[:cut], seq_scope=scope)
        assert left.absorb(Reassembler.fold(lines[cut:], seq_scope=scope)) == whole
    if scope == "call":
        seq_faults = [a for a in whole.anomalies if a.kind.startswith("seq_")]
        if damage == "none":
            assert whole.anomalies == ()
        elif damage == "duplicate":
            assert [a.kind for a in seq_faults] == ["seq_repeated"]
        elif damage == "drop":
            assert [a.kind for a in seq_faults] == (["seq_gap"] if hole else [])


def test_cross_boundary_checks_are_found_after_a_split() -> None:
    """A seq hole and a total regression right at the split are still reported."""
    lines = [line(body("abc", 3), seq=0), line(body("d", 2), seq=5)]
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
    """Folds made with different known calls or seq scopes cannot be combined."""
    refusal = "different known_calls, max_record_bytes, seq_scope or keep_text"
    with pytest.raises(ValueError, match=refusal):
        Reassembler(known_calls={"a"}).absorb(Reassembler())
    with pytest.raises(ValueError, match=refusal):
        Reassembler(seq_scope="connection").absorb(Reassembler())


def test_an_unknown_seq_scope_is_refused() -> None:
    """seq_scope is "call" or "connection"; anything else names itself in the error."""
    with pytest.raises(ValueError, match="seq_scope must be 'call' or 'connection', got 'hub'"):
        Reassembler(seq_scope="hub")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got 'stream'"):
        Reassembler.fold([], seq_scope="stream")  # type: ignore[arg-type]


def test_seq_scope_defaults_to_call_and_spawns_alike() -> None:
    """The default is the server's numbering; a spawned fold keeps the scope."""
    assert Reassembler().seq_scope == "call"
    hub = Reassembler(seq_scope="connection")
    assert hub.spawn().seq_scope == "connection"
    assert hub != Reassembler()


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


@pytest.mark.parametrize(
    ("delta", "total", "least"),
    [("hello", 2, 5), ("\u00e9\u00e9", 3, 4), ("\U0001f600", 3, 4), ("ab\ufffd", 2, 3)],
)
def test_a_delta_longer_than_its_total_is_reported(delta: str, total: int, least: int) -> None:
    """A frame carrying more source bytes than its total_bytes counts is a
    total_overrun (U+FFFD counted as one byte): as the first frame, after an
    empty one, and on the steady path (after frames that only appended)."""
    steady = [line(body("a", 1)), line(body("b", 2))]
    for records in (
        [line(body(delta, total))],
        [line(body("", 0)), line(body(delta, total))],
        [*steady, line(body(delta, total))],
    ):
        folded = Reassembler.fold(records)
        (anomaly,) = folded.anomalies
        assert anomaly.kind == "total_overrun"
        assert anomaly.index == len(records) - 1
        assert anomaly.key == StreamKey("c1", KIND)
        assert f"at least {least} source bytes but total_bytes is {total}" in anomaly.detail
        assert "total_overrun" in folded.summary()


def test_a_delta_that_fits_its_total_is_not_an_overrun() -> None:
    """Exactly total_bytes worth of delta, four-byte characters and U+FFFD
    standing for single bytes are all consistent."""
    ok = [body("abc", 3), body("\U0001f600", 7), body("\ufffd\ufffd", 9), body("x", 9, gap=True)]
    assert Reassembler.fold([line(one) for one in ok]).anomalies == ()


def test_an_overrun_after_a_regression_is_reported_in_whole_and_split_folds() -> None:
    """Both checks of one record land in the same order whether the fold is
    whole or split just before it."""
    records = [line(body("abcdef", 10)), line(body("0123456789", 4))]
    whole = Reassembler.fold(records)
    assert [a.kind for a in whole.anomalies] == ["total_regressed", "total_overrun"]
    split = Reassembler.fold(records[:1]).absorb(Reassembler.fold(records[1:]))
    assert split == whole


def test_a_resumed_fold_absorbed_from_the_start_judges_a_new_streams_first_run() -> None:
    """A fold that resumes mid-connection (``from_start=False``, as a follower
    reconnecting at an offset) cannot judge its streams' first runs; absorbed
    into a fold from the start where the stream is new, that run is the
    stream's first, and a repeated frame in it is a ``total_overrun`` as the
    whole fold says."""
    records = [
        line(body("x", 1), seq=0, call="c0"),
        line(body("\u0080", 2), seq=0),
        line(body("\u0080", 2), seq=0),
        line(body("y", 3), seq=1),
    ]
    whole = Reassembler.fold(records)
    assert [a.kind for a in whole.anomalies] == ["seq_repeated", "total_overrun"]
    resumed = Reassembler.fold(records[1:], from_start=False)
    assert Reassembler.fold(records[:1]).absorb(resumed) == whole


@pytest.mark.parametrize(
    ("scope", "counter"), [("call", "seq of call 'c1'"), ("connection", "seq")]
)
def test_seq_hole_is_reported_with_the_count_lost(scope: SeqScope, counter: str) -> None:
    """Envelope seq 1 then 4: two frames were lost in transport; in "call"
    scope the message names the call whose counter jumped."""
    folded = Reassembler.fold(
        [line(body("a", 1), seq=1), line(body("b", 2), seq=4)], seq_scope=scope, from_start=False
    )
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "seq_gap"
    assert anomaly.detail == f"{counter} jumped from 1 to 4: 2 frame(s) lost in transport"
    assert anomaly.key is None


def test_connection_scope_is_one_counter_across_streams() -> None:
    """In "connection" scope seq counts the connection, so frames of two calls
    interleave without holes."""
    lines = [
        line(body("a", 1), seq=7, call="x"),
        line(body("b", 1), seq=8, call="y"),
        line(body("c", 2), seq=9, call="x"),
    ]
    assert Reassembler.fold(lines, seq_scope="connection", from_start=False).anomalies == ()


# Two calls interleaved, each numbered from 0 as the server numbers them.
INTERLEAVED = [
    line(body("a", 1), seq=0, call="x"),
    line(body("p", 1), seq=0, call="y"),
    line(body("b", 2), seq=1, call="x"),
    line(body("q", 2), seq=1, call="y"),
    line(body("c", 3), seq=2, call="x"),
]


def test_call_scope_takes_interleaved_per_call_seqs_without_anomaly() -> None:
    """Each call counts from 0 on its own: interleaving them is no hole, no
    repeat, no reordering, whole or split anywhere."""
    whole = Reassembler.fold(INTERLEAVED)
    assert whole.anomalies == ()
    assert (only(whole, "x").text, only(whole, "y").text) == ("abc", "pq")
    for cut in range(len(INTERLEAVED) + 1):
        split = Reassembler.fold(INTERLEAVED[:cut]).absorb(Reassembler.fold(INTERLEAVED[cut:]))
        assert split == whole


def test_connection_scope_reports_per_call_seqs_as_repeats() -> None:
    """The same log read as one connection counter: 0, 0, 1, 1, 2 repeats twice."""
    folded = Reassembler.fold(INTERLEAVED, seq_scope="connection")
    assert [(a.kind, a.index, a.detail) for a in folded.anomalies] == [
        ("seq_repeated", 1, "seq 0 arrived twice in a row; absorbed again"),
        ("seq_repeated", 3, "seq 1 arrived twice in a row; absorbed again"),
    ]


def test_call_scope_finds_a_hole_with_another_calls_frames_between() -> None:
    """x's seq goes 0 then 2 with y's frames in between: one frame of x was lost,
    found whole and at every split; "connection" scope reads the same log as
    a repeat at each call's first frame and sees x's 2 after y's 1 as in order."""
    lines = [
        line(body("a", 1), seq=0, call="x"),
        line(body("p", 1), seq=0, call="y"),
        line(body("q", 2), seq=1, call="y"),
        line(body("c", 3), seq=2, call="x"),
        line(body("r", 3), seq=2, call="y"),
    ]
    whole = Reassembler.fold(lines)
    (anomaly,) = whole.anomalies
    assert (anomaly.kind, anomaly.index) == ("seq_gap", 3)
    assert anomaly.detail == "seq of call 'x' jumped from 0 to 2: 1 frame(s) lost in transport"
    for cut in range(len(lines) + 1):
        assert Reassembler.fold(lines[:cut]).absorb(Reassembler.fold(lines[cut:])) == whole
    hub = Reassembler.fold(lines, seq_scope="connection")
    assert [(a.kind, a.index) for a in hub.anomalies] == [
        ("seq_repeated", 1),
        ("seq_repeated", 4),
    ]


def test_call_scope_shares_one_counter_across_a_calls_subkinds() -> None:
    """The server numbers a call, not a stream: two subkinds of one call share
    its counter, so a repeat across them is found."""
    clean = [line(body("a", 1), seq=0), line({"text": "note"}, seq=1, kind="text")]
    assert Reassembler.fold(clean).anomalies == ()
    repeated = [line(body("a", 1), seq=0), line({"text": "note"}, seq=0, kind="text")]
    assert [a.kind for a in Reassembler.fold(repeated).anomalies] == ["seq_repeated"]


def test_duplicated_frames_are_reported_and_visible_in_the_text() -> None:
    """A repeated seq is reported; its delta is absorbed again, and the report says so."""
    frame = line(body("ab", 2), seq=0)
    folded = Reassembler.fold([frame, frame])
    (anomaly,) = folded.anomalies
    assert anomaly.kind == "seq_repeated"
    assert "absorbed again" in anomaly.detail
    assert only(folded).text == "abab"
    assert "1 anomaly (seq_repeated)" in folded.summary()


@pytest.mark.parametrize(
    ("scope", "counter"), [("call", "seq of call 'c1'"), ("connection", "seq")]
)
def test_reordered_frames_are_reported(scope: SeqScope, counter: str) -> None:
    """seq going back is a reordering (or a replay)."""
    folded = Reassembler.fold(
        [line(body("a", 1), seq=5), line(body("b", 2), seq=4)], seq_scope=scope, from_start=False
    )
    assert [a.kind for a in folded.anomalies] == ["seq_reordered"]
    assert folded.anomalies[0].detail == f"{counter} went back from 5 to 4"


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


PINGS: list[Any] = [
    line(body("a", 1), seq=0),
    b'{"jsonrpc":"2.0","seq":1,"method":"ping","params":null}',
    line(body("b", 2), seq=2),
    JsonRpcNotification(seq=3, method="ping", params=None),
    line(body("c", 3), seq=5),
]


def test_connection_scope_counts_the_seq_of_other_notifications() -> None:
    """In "connection" scope seq numbers every notification, so a ping in
    between is no hole, and a missing one is."""
    folded = Reassembler.fold(PINGS, seq_scope="connection")
    assert [a.kind for a in folded.anomalies] == ["seq_gap"]
    assert folded.anomalies[0].index == 4


def test_call_scope_ignores_the_seq_of_other_notifications() -> None:
    """In "call" scope a ping names no call, so its seq counts for none: the
    call's own 0, 2, 5 holes are reported, the pings' 1 and 3 change nothing."""
    folded = Reassembler.fold(PINGS)
    assert [(a.kind, a.index) for a in folded.anomalies] == [("seq_gap", 2), ("seq_gap", 4)]
    assert folded.ignored == 2
    without_pings = Reassembler.fold([PINGS[0], PINGS[2], PINGS[4]])
    assert [a.detail for a in without_pings.anomalies] == [a.detail for a in folded.anomalies]


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


def test_notification_with_bad_params_is_undecodable_and_its_seq_counts_per_scope() -> None:
    """params that are not a frame are reported. In "connection" scope their seq
    still feeds hole detection; in "call" scope they name no call, so the
    call's next frame shows the one it lost."""
    bad_params: list[Any] = [
        line(body("a", 1), seq=0),
        JsonRpcNotification(seq=1, method=METHOD_TOOL_CALL_PROGRESS, params={"kind": 1}),
        JsonRpcNotification(method="ping", params=None),
        b'{"jsonrpc":"2.0","seq":2,"method":"tool_call_progress","params":{"kind":1}}',
        line(body("b", 2), seq=3),
    ]
    hub = Reassembler.fold(bad_params, seq_scope="connection")
    assert [(a.kind, a.index) for a in hub.anomalies] == [("undecodable", 1), ("undecodable", 3)]
    assert "progress params are not a frame" in hub.anomalies[0].detail
    assert hub.ignored == 1
    server = Reassembler.fold(bad_params)
    assert [(a.kind, a.index) for a in server.anomalies] == [
        ("undecodable", 1),
        ("undecodable", 3),
        ("seq_gap", 4),
    ]
    assert server.anomalies[-1].detail.startswith("seq of call 'c1' jumped from 0 to 3")


def test_call_scope_counts_the_seq_of_a_frame_with_a_bad_body() -> None:
    """A frame whose body alone is bad still names its call, so its seq counts."""
    bad_body = {"delta": "x", "total_bytes": 2, "offset": 1}
    folded = Reassembler.fold(
        [line(body("a", 1), seq=0), line(bad_body, seq=1), line(body("b", 3), seq=2)]
    )
    assert [a.kind for a in folded.anomalies] == ["payload_invalid"]


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
    added = [reassembler.appended(one) for one in lines]
    printed = "".join(one.render("<{lost}>") for one in added)
    assert printed == "ab<1-16>cdef"
    # Settled once the gap's run has ended, the marker says what the fold says.
    settled = "".join(reassembler.settled(one).render("<{lost}>") for one in added)
    assert settled == "ab<15>cdef"
    assert reassembler.settled(added[0]) is added[0]
    # While the run may go on, settling narrows only the upper bound.
    open_run = Reassembler()
    gap_frame = [open_run.appended(one) for one in lines[:3]][1]
    assert open_run.settled(gap_frame).render("<{lost}>") == "<1-15>cd"
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


def test_appended_takes_a_decoded_notification_with_or_without_a_seq() -> None:
    """A notification carries its own seq: passing one beside it neither breaks
    the fold nor overrides the envelope, and the answer matches its line's."""
    lines = [line(body("a", 1), seq=0), line(body("b", 2), seq=2)]
    notes = decoded(lines)
    by_line, by_note = Reassembler(), Reassembler()
    for one, note in zip(lines, notes, strict=True):
        assert by_note.appended(note, 5) == by_line.appended(one)
    assert by_note == by_line
    assert [a.kind for a in by_note.anomalies] == ["seq_gap"]


def test_appended_lists_only_that_records_anomalies() -> None:
    """Anomalies of earlier records of the same stream are not repeated."""
    folded = Reassembler()
    kinds = [
        [a.kind for a in folded.appended(one).anomalies]
        for one in (line(body("a", 5)), line(body("b", 3)), line(body("c", 4)), line(body("d", 2)))
    ]
    assert kinds == [[], ["total_regressed"], [], ["total_regressed"]]


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


# -- bounded: details, anomalies, streams ------------------------------------------


def test_an_anomaly_quotes_only_an_excerpt_of_a_huge_value() -> None:
    """A 1 MB unknown key, a 1 MB method and a 1 MB call id: each detail is an
    excerpt of at most a few hundred characters that still says where."""
    huge = "k" * 1_000_000
    records = [
        line({"delta": "a", "total_bytes": 1, huge: 1}),
        json.dumps({"jsonrpc": "2.0", "method": 7, "params": huge}).encode(),
        line(body("a", 1), seq=3, call=huge),
    ]
    folded = Reassembler.fold(records, known_calls=["c1"])
    assert len(folded.anomalies) == 4
    for anomaly in folded.anomalies:
        assert len(anomaly.detail) <= MAX_DETAIL_CHARS + 40, anomaly.kind
    (invalid,) = [a for a in folded.anomalies if a.kind == "payload_invalid"]
    assert invalid.detail.startswith("body of a 'bash_output_chunk' frame is not a valid")
    assert invalid.detail.endswith("`$.params.body`")
    assert "characters ...]" in invalid.detail


def test_anomalies_past_the_bound_are_counted_and_each_still_printed() -> None:
    """A flood of bad records keeps the first MAX_ANOMALIES_KEPT anomalies and
    counts the rest, whole and split; `appended` still answers each one."""
    flood = [b" "] * (MAX_ANOMALIES_KEPT + 5)
    whole = Reassembler.fold(flood)
    assert len(whole.anomalies) == MAX_ANOMALIES_KEPT
    assert whole.anomalies_not_kept == 5
    assert f"{MAX_ANOMALIES_KEPT + 5} anomalies (5 not kept)" in whole.summary()
    for cut in (0, 3, MAX_ANOMALIES_KEPT, len(flood)):
        split = Reassembler.fold(flood[:cut]).absorb(Reassembler.fold(flood[cut:]))
        assert split == whole
    live = Reassembler()
    said = sum(len(live.appended(record).anomalies) for record in flood)
    assert said == len(flood)
    assert len(live._anomalies) <= MAX_ANOMALIES_KEPT + 1
    bad_bodies = [line({"delta": 1, "total_bytes": 1})] * (MAX_ANOMALIES_KEPT + 2)
    report = only(Reassembler.fold(bad_bodies)).report()
    assert (len(report.anomalies), report.anomalies_not_kept) == (MAX_ANOMALIES_KEPT, 2)


def test_the_tracked_streams_are_bounded_and_each_eviction_reported() -> None:
    """Past max_streams the stream seen first stops being tracked: its summary
    is reported where that happened, and the seq counters are bounded too."""
    records = [line(body("ab", 2), seq=0, call=f"call-{n}") for n in range(5)]
    folded = Reassembler.fold(records, max_streams=2)
    assert [key.tool_call_id for key in folded.streams] == ["call-3", "call-4"]
    evicted = [a for a in folded.anomalies if a.kind == "streams_evicted"]
    assert [(a.index, a.key) for a in evicted] == [
        (2, StreamKey("call-0", KIND)),
        (3, StreamKey("call-1", KIND)),
        (4, StreamKey("call-2", KIND)),
    ]
    assert "call-0/bash_output_chunk: 2 bytes in 1 frame" in evicted[0].detail
    assert len(folded._seqs) == 2
    with pytest.raises(ValueError, match="max_streams must be at least 1"):
        Reassembler(max_streams=0)


def test_absorb_record_refuses_what_is_no_record_before_counting_it() -> None:
    """A dict (a decoded JSON object) is no record: TypeError, nothing counted."""
    folded = Reassembler()
    with pytest.raises(TypeError, match="not dict"):
        folded.absorb_record({"jsonrpc": "2.0"})  # type: ignore[arg-type]
    assert folded == Reassembler()
    assert folded.records == 0


@pytest.mark.parametrize(
    "deltas",
    [
        # A frame repeated in a run at one total (a wire without seq).
        [("hello wo", 27), ("rld \u00e9", 27), ("rld \u00e9", 27), ("\u2713\U0001f600 ", 27)],
        # The same, in a run that a later total then ends.
        [("abcd", 6), ("ef", 6), ("ef", 6), ("gh", 8)],
        # On the steady path: a run after the first one.
        [("ab", 2), ("cd", 4), ("cd", 4), ("ef", 6)],
    ],
)
def test_frames_delivering_more_than_their_total_are_an_overrun(
    deltas: list[tuple[str, int]],
) -> None:
    """Frames at one total_bytes that together deliver more source bytes than
    it counts (each under it alone) are a total_overrun, never a complete
    stream: in whole and split folds alike."""
    records = [line(body(delta, total)) for delta, total in deltas]
    whole = Reassembler.fold(records)
    (report,) = whole.reports(ended=True)
    assert not report.complete
    assert "total_overrun" in report.summary()
    for cut in range(len(records) + 1):
        split = Reassembler.fold(records[:cut]).absorb(Reassembler.fold(records[cut:]))
        assert split == whole


def test_frames_that_fill_their_total_exactly_are_no_overrun() -> None:
    """Deltas summing to exactly each run's total, U+FFFD as one byte each."""
    records = [
        line(body(delta, total))
        for delta, total in [("ab", 6), ("cd", 6), ("ef", 6), ("\ufffd\ufffd", 8), ("g", 9)]
    ]
    (report,) = Reassembler.fold(records).reports(ended=True)
    assert report.complete, report.summary()


@pytest.mark.parametrize("what", [{"jsonrpc": "2.0"}, None, 123, [b"{}"]])
def test_absorb_line_refuses_what_is_no_line_before_counting_it(what: Any) -> None:
    """absorb_line of something that is no line at all: TypeError, nothing counted."""
    folded = Reassembler()
    with pytest.raises(TypeError):
        folded.absorb_line(what)
    assert folded == Reassembler()
    assert folded.records == 0


def test_a_record_limit_above_the_ceiling_holds_for_the_frame_too() -> None:
    """Under a record limit above the default ceiling, a text note longer than the
    ceiling is kept as a note: its frame is decoded under its line's limit."""
    note = {"text": "x" * (MAX_FRAME_BYTES_CEILING + 1)}
    record = progress_line("c", "text", note, 0)
    reassembler = Reassembler(max_record_bytes=len(record))
    added = reassembler.appended(record)
    assert added.anomalies == ()
    assert added.note == note
    assert reassembler.anomalies == ()


def test_record_loss_makes_the_stream_incomplete_where_it_was_noticed() -> None:
    """A loss after absorbing (records that never reached their reader) is a
    ``dropped_frames`` anomaly of its stream at the last record absorbed; the
    figures and text stay as folded; before any record it is a ValueError, and
    without a stream it is the connection's."""
    from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
    from kigi_tool_runtime._consumer._loss import StreamKey

    folded = Reassembler()
    with pytest.raises(ValueError, match="nothing can have been lost"):
        folded.record_loss(None, "x")
    for total, delta in ((2, "ab"), (4, "cd")):
        body = PartialResultPayload(delta=delta, total_bytes=total)
        folded.absorb_frame(ToolCallProgressFrame(tool_call_id="c", kind="k", body=body))
    key = StreamKey("c", "k")
    anomaly = folded.record_loss(key, "one item dropped")
    assert (anomaly.kind, anomaly.index, anomaly.key) == ("dropped_frames", 1, key)
    [report] = folded.reports(ended=True)
    assert not report.complete
    assert report.anomalies == (anomaly,)
    assert report.text_bytes == 4
    assert folded.stream("c", "k").text == "abcd"  # type: ignore[union-attr]
    assert folded.record_loss(None, "elsewhere") in folded.anomalies


# -- a loss the transport learned of, with its total ----------------------------


def _frames_of(log: FrameLog) -> list[ToolCallProgressFrame[Any]]:
    """The log's frames, without their envelope ``seq`` (a recorded loss
    carries none, so the fold's checks of ``seq`` stay out of the comparison)."""
    return [
        json_codec.decode(
            one, JsonRpcNotification[ToolCallProgressFrame[PartialResultPayload]]
        ).params
        for one in log.lines
    ]


# A loss in a fold's input: the stream it belongs to and its total.
_Loss = tuple[StreamKey, int]


def _fold_with_losses(items: list[Any]) -> Reassembler:
    folded = Reassembler()
    for item in items:
        if isinstance(item, ToolCallProgressFrame):
            folded.absorb_frame(item)
        else:
            key, total = item
            folded.record_loss(key, "lost in transport", total_bytes=total)
    return folded


# Built once: a log can have thousands of frames, and building a strategy per
# frame made each example (and each shrinking attempt) slow.
_FATES = st.sampled_from(["keep", "keep", "lost", "before"])


def _with_losses(frames: list[ToolCallProgressFrame[Any]], data: Any) -> list[Any]:
    """``frames`` with some lost (recorded at their own total, as a lost tail
    is) and some preceded by a loss at their total (as a discarded range is)."""
    items: list[Any] = []
    for frame in frames:
        key = StreamKey(frame.tool_call_id, frame.kind)
        choice = data.draw(_FATES)
        if choice == "lost":
            items.append((key, frame.body.total_bytes))
            continue
        if choice == "before":
            items.append((key, frame.body.total_bytes))
        items.append(frame)
    return items


@given(log=frame_logs(), data=st.data())
def test_fold_contract_holds_with_recorded_losses_at_every_split(log: FrameLog, data: Any) -> None:
    """Losses recorded with their total (``record_loss(..., total_bytes=)``)
    anywhere among the frames, the first record of a stream or of the
    connection included: folding the two sides of any split and absorbing
    equals folding the whole."""
    items = _with_losses(_frames_of(log), data)
    whole = _fold_with_losses(items)
    assert whole.records == len(items)
    for cut in split_points(len(items)):
        assert _fold_with_losses(items[:cut]).absorb(_fold_with_losses(items[cut:])) == whole


@given(log=frame_logs(), data=st.data())
def test_a_recorded_loss_folds_as_an_empty_gap_frame_that_counts_no_frame(
    log: FrameLog, data: Any
) -> None:
    """A loss at a total folds exactly as a gap frame with no delta at that
    total would (text, gaps, bounds, unseen bytes), except that the stream
    counts no frame for it and reports it as ``dropped_frames``."""
    _assert_losses_fold_as_empty_gap_frames(_with_losses(_frames_of(log), data))


def test_recorded_losses_past_the_anomaly_bound_are_counted_not_kept() -> None:
    """More recorded losses on one stream than :data:`MAX_ANOMALIES_KEPT`: the
    first ``dropped_frames`` anomalies are kept and the rest counted in
    ``anomalies_not_kept``, and every other figure still matches the gap frames
    (a log with one stream of 1500 one-character frames, a loss before each)."""
    count = MAX_ANOMALIES_KEPT + 500
    items: list[Any] = []
    for total in range(1, count + 1):
        frame = ToolCallProgressFrame(
            tool_call_id="call-0",
            kind="chunk_0",
            body=PartialResultPayload(delta="x", total_bytes=total),
        )
        items += [(StreamKey("call-0", "chunk_0"), total), frame]
    folded = _assert_losses_fold_as_empty_gap_frames(items)
    report = only(folded, "call-0", "chunk_0").report(ended=True)
    assert (len(report.anomalies), report.anomalies_not_kept) == (MAX_ANOMALIES_KEPT, 500)
    assert {anomaly.kind for anomaly in report.anomalies} == {"dropped_frames"}


def _assert_losses_fold_as_empty_gap_frames(items: list[Any]) -> Reassembler:
    """Fold ``items`` (frames, and losses as ``(key, total)``) with the losses
    recorded, and with each loss forged as an empty gap frame at its total;
    check the two agree (Rule 7: at most :data:`MAX_ANOMALIES_KEPT` anomalies
    are kept per stream, the rest counted); return the recorded fold."""
    losses = [item for item in items if not isinstance(item, ToolCallProgressFrame)]
    forged = Reassembler.fold(
        [
            item
            if isinstance(item, ToolCallProgressFrame)
            else ToolCallProgressFrame(
                tool_call_id=item[0].tool_call_id,
                kind=item[0].subkind,
                body=PartialResultPayload(delta="", total_bytes=item[1], gap=True),
            )
            for item in items
        ]
    )
    recorded = _fold_with_losses(items)
    assert list(recorded.streams) == list(forged.streams)
    for key, state in recorded.streams.items():
        twin = forged.streams[key]
        lost_here = sum(1 for loss in losses if loss[0] == key)
        assert state.frames == twin.frames - lost_here
        assert state.text == twin.text
        assert state.render() == twin.render()
        for ended in (False, True):
            mine, theirs = state.report(ended=ended), twin.report(ended=ended)
            assert (mine.gaps, mine.lost_range, mine.unseen_bytes, mine.total_bytes) == (
                theirs.gaps,
                theirs.lost_range,
                theirs.unseen_bytes,
                theirs.total_bytes,
            )
        # Every anomaly of the gap frames, plus one dropped_frames per loss, in
        # record order: the first MAX_ANOMALIES_KEPT kept, the rest counted.
        kept, not_kept = list(state.anomalies), mine.anomalies_not_kept
        all_of_them = lost_here + len(theirs.anomalies) + theirs.anomalies_not_kept
        assert len(kept) + not_kept == all_of_them
        assert len(kept) == min(all_of_them, MAX_ANOMALIES_KEPT)
        others = [a for a in kept if a.kind != "dropped_frames"]
        assert others == list(twin.anomalies)[: len(others)]
        if not not_kept:
            assert len(kept) - len(others) == lost_here
            assert others == list(twin.anomalies)
        if lost_here:
            assert not state.report(ended=True).complete
    return recorded


def test_a_loss_before_any_record_starts_the_stream_with_a_gap() -> None:
    """A loss recorded with its total needs no record before it (a follower that
    lost a call's first frames, or all of them): the stream starts with a gap
    of those bytes, counts no frame, and its report is incomplete; a later
    frame at that total is the surviving tail of the gap."""
    key = StreamKey("c", "k")
    folded = Reassembler()
    added = folded.appended_loss(key, "the stream discarded them", total_bytes=3000)
    assert added.key == key
    assert added.text is None
    assert added.gap is not None
    assert added.gap.total_bytes == 3000
    assert "bytes lost" in added.render()
    assert [(a.kind, a.index, a.detail) for a in added.anomalies] == [
        ("dropped_frames", 0, "the stream discarded them")
    ]
    assert folded.records == 1
    [report] = folded.reports(ended=True)
    assert report.frames == 0
    assert report.lost_bytes_min == report.lost_bytes == 3000
    assert not report.complete
    tail = PartialResultPayload(delta="xyz", total_bytes=3003)
    folded.absorb_frame(ToolCallProgressFrame(tool_call_id="c", kind="k", body=tail))
    [report] = folded.reports(ended=True)
    assert (report.frames, report.text_bytes, report.lost_bytes) == (1, 3, 3000)
    assert only(folded, "c", "k").render() == render_marker(report.gaps[0]) + "xyz"


def render_marker(gap: Gap) -> str:
    from kigi_tool_runtime._consumer._loss import render_gap_marker

    return render_gap_marker(DEFAULT_GAP_MARKER, gap)


def test_a_loss_with_a_total_needs_a_stream_and_a_total_of_at_least_0() -> None:
    """A loss with a total belongs to one stream, and a total is never negative;
    a refused loss changes nothing."""
    folded = Reassembler()
    with pytest.raises(ValueError, match="give its key"):
        folded.record_loss(None, "x", total_bytes=3)
    with pytest.raises(ValueError, match="cannot be negative"):
        folded.record_loss(StreamKey("c", "k"), "x", total_bytes=-1)
    with pytest.raises(ValueError, match="cannot be negative"):
        folded.appended_loss(StreamKey("c", "k"), "x", total_bytes=-1)
    assert folded == Reassembler()
    assert folded.records == 0


def test_appended_loss_of_a_known_call_only_is_unknown_elsewhere() -> None:
    """A loss is a stream's first record like any frame: one of a call the
    harness did not make is reported ``unknown_call`` there, once."""
    folded = Reassembler(known_calls=["mine"])
    added = folded.appended_loss(StreamKey("other", "k"), "lost", total_bytes=5)
    assert [a.kind for a in added.anomalies] == ["unknown_call", "dropped_frames"]
