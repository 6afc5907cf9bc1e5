"""StreamState: one stream's text and figures, kept as a value, counted lazily."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kigi_tool_runtime import Reassembler, StreamState
from kigi_tool_runtime._consumer._loss import MAX_HELD_BYTES
from kigi_tool_runtime._consumer._stream_state import fold_of
from kigi_tool_runtime._wire._split import OversizedLine
from kigi_tool_runtime.testing import utf8_text_sources
from kigi_tool_runtime.testing._consumer_strategies import producer_runs, progress_line

KIND = "bash_output_chunk"


def fold(*bodies: dict[str, object]) -> StreamState:
    state = Reassembler.fold([progress_line("c", KIND, body) for body in bodies]).stream("c", KIND)
    assert state is not None
    return state


def test_steady_frames_are_counted_when_a_figure_is_read() -> None:
    """Frames that only append are measured lazily, and the figures come out right."""
    state = fold(
        {"delta": "é", "total_bytes": 2},
        {"delta": "😀", "total_bytes": 6},
        {"delta": "\ufffdz", "total_bytes": 8},
    )
    assert state.text == "é😀\ufffdz"
    assert state.text_bytes == 2 + 4 + 3 + 1
    assert state.report().undelivered_bytes == 0


def test_a_gap_after_steady_frames_sits_at_the_right_offset() -> None:
    """The cursor is measured before a gap, so its offset and count are exact."""
    state = fold(
        {"delta": "ab", "total_bytes": 2},
        {"delta": "cd", "total_bytes": 4},
        {"delta": "e", "total_bytes": 10, "gap": True},
        {"delta": "f", "total_bytes": 11},
    )
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact) == (4, 5, True)


def test_text_is_joined_once_and_stays_equal() -> None:
    """Reading the text joins the chunks; equality does not depend on that."""
    first = fold({"delta": "a", "total_bytes": 1}, {"delta": "b", "total_bytes": 2})
    second = fold({"delta": "a", "total_bytes": 1}, {"delta": "b", "total_bytes": 2})
    assert first.text == "ab"
    assert first == second
    assert first.text is first.text


def test_state_is_unhashable_and_describes_itself() -> None:
    """A mutable value: not hashable; its repr is its summary."""
    state = fold({"delta": "a", "total_bytes": 1})
    with pytest.raises(TypeError):
        hash(state)
    summary = "c/bash_output_chunk: 1 byte in 1 frame (total 1), no gaps"
    assert repr(state) == f"StreamState({summary!r})"
    assert state.render() == "a"
    assert state.notes == ()


def test_a_held_state_is_a_live_read_only_view() -> None:
    """A state the reassembler handed out reads its fold when asked: it shows
    frames absorbed after it was taken, and its figures cannot be set."""
    reassembler = Reassembler.fold([progress_line("c", KIND, {"delta": "a", "total_bytes": 1})])
    state = reassembler.stream("c", KIND)
    assert state is not None
    reassembler.absorb_line(progress_line("c", KIND, {"delta": "b", "total_bytes": 2}))
    assert (state.frames, state.total_bytes, state.text) == (2, 2, "ab")
    assert state.key == ("c", KIND)
    assert state.first_total == 1
    assert not state.truncated
    for figure in ("key", "frames", "first_total", "total_bytes", "truncated"):
        with pytest.raises(AttributeError):
            setattr(state, figure, None)


@given(producer_runs(), st.data())
def test_a_stream_state_folds_as_its_records_split_anywhere(run: Any, data: Any) -> None:
    """The fold/absorb law on one stream's state: the state of
    ``fold(a).absorb(fold(b))`` equals the state of ``fold(a ++ b)``, and
    absorbing leaves the later fold's state as it was."""
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    cut = data.draw(st.integers(0, len(lines)), label="cut")
    keep_text = data.draw(st.booleans(), label="keep_text")
    key = (run.tool_call_id, run.subkind)
    whole = Reassembler.fold(lines, keep_text=keep_text).stream(*key)
    later_fold = Reassembler.fold(lines[cut:], keep_text=keep_text)
    later = later_fold.stream(*key)
    later_before = None if later is None else later.report()
    split = Reassembler.fold(lines[:cut], keep_text=keep_text).absorb(later_fold)
    assert split.stream(*key) == whole
    if later is not None:
        assert later.report() == later_before


def test_reading_the_text_counts_what_it_joined() -> None:
    """Joining the text counts the chunks it joined (free for ASCII), so no
    chunk is held twice, and later figures still come out right."""
    first = [{"delta": "ab", "total_bytes": 2}, {"delta": "cd", "total_bytes": 4}]
    later = [{"delta": "z", "total_bytes": 20, "gap": True}, {"delta": "y", "total_bytes": 21}]
    reassembler = Reassembler.fold([progress_line("c", KIND, body) for body in first])
    state = reassembler.stream("c", KIND)
    assert state is not None
    assert state.text == "abcd"
    assert state.text_bytes == 4
    for body in later:
        reassembler.absorb_line(progress_line("c", KIND, body))
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact) == (4, 15, True)
    assert state == fold(*first, *later)
    assert state.text == "abcdzy"


# -- every byte total_bytes counts is delivered or said lost ------------------------


def lines_of(*bodies: dict[str, object], seqs: bool = False) -> list[bytes]:
    return [
        progress_line("c", KIND, body, index if seqs else None) for index, body in enumerate(bodies)
    ]


def assert_folds_alike(lines: list[Any], **options: Any) -> Reassembler:
    """The whole fold, checked equal to the fold split at every point."""
    whole = Reassembler.fold(lines, **options)
    for cut in range(len(lines) + 1):
        left = Reassembler.fold(lines[:cut], **options)
        assert left.absorb(Reassembler.fold(lines[cut:], **options)) == whole, cut
    return whole


def test_a_missing_prefix_is_a_located_exact_loss() -> None:
    """The first frames never arrived (seq 7 and 8, totals 1000 and 1004, 19
    bytes of text): the 985 bytes before the first run are an inferred gap at
    offset 0, the first seq above 0 is reported, and the stream is not complete."""
    lines = [
        progress_line("c", KIND, {"delta": "x" * 15, "total_bytes": 1000}, 7),
        progress_line("c", KIND, {"delta": "abcd", "total_bytes": 1004}, 8),
    ]
    whole = assert_folds_alike(lines)
    state = whole.stream("c", KIND)
    assert state is not None
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact, gap.inferred) == (0, 985, True, True)
    report = state.report()
    assert not report.complete
    assert "1 gap (985 bytes lost, 1 inferred from total_bytes)" in report.summary()
    assert state.render().startswith("[... 985 bytes lost ...]xxx")
    (anomaly,) = whole.anomalies
    assert anomaly.kind == "seq_gap"
    assert "starts at 7: frames 0-6 never arrived" in anomaly.detail
    # A fold that resumes mid-stream knows no prefix.
    resumed = Reassembler.fold(lines, from_start=False)
    assert resumed.anomalies == ()
    assert resumed.stream("c", KIND).gaps == ()  # type: ignore[union-attr]


def test_a_dropped_middle_frame_without_seq_is_an_inferred_gap_where_it_was() -> None:
    """A frame lost on a wire without seq: the next run's total proves the
    hole; the loss is exact and placed where the lost frame's run began."""
    bodies = [
        {"delta": "abc", "total_bytes": 3},
        {"delta": "def", "total_bytes": 6},
        {"delta": "ghi", "total_bytes": 9},
        {"delta": "j", "total_bytes": 10},
    ]
    lines = lines_of(*bodies)
    del lines[1]
    whole = assert_folds_alike(lines)
    state = whole.stream("c", KIND)
    assert state is not None
    (gap,) = state.gaps
    assert (gap.offset, gap.index, gap.lost_bytes, gap.exact, gap.inferred) == (3, 2, 3, True, True)
    assert state.render() == "abc[... 3 bytes lost ...]ghij"
    assert not state.report().complete
    appended = Reassembler(keep_text=False)
    rendered = "".join(appended.appended(one).render() for one in lines)
    assert rendered == "abcghi[... 3 bytes lost ...]j"


def test_a_rejected_oversized_frame_is_undecodable_and_its_bytes_lost() -> None:
    """A frame the reader skipped as too long: reported undecodable, and the
    bytes its total accounted for are an inferred gap."""
    lines: list[Any] = lines_of(
        {"delta": "abc", "total_bytes": 3},
        {"delta": "def", "total_bytes": 6},
        {"delta": "ghi", "total_bytes": 9},
        {"delta": "j", "total_bytes": 10},
    )
    lines[1] = OversizedLine(100_000_000, 16)
    whole = assert_folds_alike(lines)
    assert [a.kind for a in whole.anomalies] == ["undecodable"]
    (gap,) = whole.stream("c", KIND).gaps  # type: ignore[union-attr]
    assert (gap.lost_bytes, gap.exact, gap.inferred) == (3, True, True)


def test_a_lost_last_frame_leaves_bytes_unseen() -> None:
    """The last run delivered less than its total (the rest dropped): those
    bytes are unseen, so the stream is not complete."""
    whole = assert_folds_alike(
        lines_of({"delta": "abc", "total_bytes": 3}, {"delta": "d", "total_bytes": 20})
    )
    report = whole.stream("c", KIND).report()  # type: ignore[union-attr]
    assert report.unseen_bytes == 20 - 3 - 1 - 3
    assert not report.complete
    assert "13 bytes counted but not delivered" in report.summary()
    assert "no gaps" not in report.summary()


def test_a_paced_drain_is_no_loss() -> None:
    """Frames that share a total are one drain: while they arrive the cursor
    is short of the total, which is no loss, and a held character is none."""
    whole = assert_folds_alike(
        lines_of(
            {"delta": "ab", "total_bytes": 6},
            {"delta": "cd", "total_bytes": 6},
            {"delta": "e", "total_bytes": 6},
            {"delta": "é", "total_bytes": 9},
            {"delta": "f", "total_bytes": 9},
        )
    )
    state = whole.stream("c", KIND)
    assert state is not None
    assert state.report().complete
    assert state.gaps == ()


def test_frames_after_the_truncation_notice_are_reported_once() -> None:
    """The truncation notice ends the stream: the first frame after it is
    reported (once), whole and at every split."""
    whole = assert_folds_alike(
        lines_of(
            {"delta": "ab", "total_bytes": 2},
            {"delta": "", "total_bytes": 2, "truncated": True},
            {"delta": "cd", "total_bytes": 4},
            {"delta": "e", "total_bytes": 5},
        )
    )
    (anomaly,) = whole.anomalies
    assert (anomaly.kind, anomaly.index) == ("frame_after_end", 2)
    assert "after the stream's truncation notice" in anomaly.detail


def test_without_text_a_stream_keeps_figures_and_losses_only() -> None:
    """keep_text=False: the report equals the one of a fold that keeps text,
    no chunk is kept, and asking for the text says why there is none."""
    lines = lines_of(
        {"delta": "abc", "total_bytes": 3},
        {"delta": "é", "total_bytes": 10, "gap": True},
        {"delta": "xyz" * 100, "total_bytes": 310},
    )
    kept = Reassembler.fold(lines).stream("c", KIND)
    bare = assert_folds_alike(lines, keep_text=False).stream("c", KIND)
    assert kept is not None
    assert bare is not None
    assert bare.report() == kept.report()
    assert fold_of(bare).chunks == []
    assert not bare.keeps_text
    with pytest.raises(ValueError, match="keeps no text"):
        _ = bare.text
    with pytest.raises(ValueError, match="keeps no text"):
        bare.render()
    with pytest.raises(ValueError, match="keep_text"):
        Reassembler().absorb(Reassembler(keep_text=False))


@given(
    run=producer_runs(st.text(st.characters(max_codepoint=127), min_size=12).map(str.encode)),
    data=st.data(),
)
def test_a_lost_frame_of_ascii_output_never_leaves_the_stream_complete(run: Any, data: Any) -> None:
    """Any one frame that carried text, dropped from a real producer's ASCII
    stream: the stream is not complete, and the losses it reports add up to
    exactly what the source lost (ASCII pins every figure)."""
    frames = list(run.frames)
    carrying = [index for index, frame in enumerate(frames) if frame.delta]
    assume(carrying)
    at = data.draw(st.sampled_from(carrying))
    dropped = frames.pop(at)
    # The run the lost bytes fall in is the first that reaches their total:
    # unless a later run follows it, up to 3 of them may be held back still.
    totals = [frame.total_bytes for frame in frames if frame.total_bytes >= dropped.total_bytes]
    assume(totals)
    assume(max(totals) > min(totals) or len(dropped.delta) > MAX_HELD_BYTES)
    lines = [progress_line("c", KIND, frame) for frame in frames]
    state = Reassembler.fold(lines).stream("c", KIND)
    assert state is not None
    report = state.report()
    assert not report.complete
    delivered = sum(len(frame.delta) for frame in frames)
    truth = len(run.source) - delivered
    assert report.lost_bytes_min + report.unseen_bytes <= truth
    assert truth <= report.lost_bytes + report.unseen_bytes + MAX_HELD_BYTES


@given(run=producer_runs(utf8_text_sources()))
def test_an_ended_stream_counts_its_gaps_together_exactly_when_the_wire_allows(
    run: Any,
) -> None:
    """Once a stream has ended, its report's lost count holds the truth (the
    source less what was delivered), and is exact, however
    uncertain each gap is alone (held bytes at a gap's end belong to the next)
    and no delivered U+FFFD leaves it open."""
    lines = [progress_line("c", KIND, frame) for frame in run.frames]
    state = Reassembler.fold(lines).stream("c", KIND)
    assume(state is not None and state.gaps)
    assert state is not None
    report = state.report(ended=True)
    delivered = sum(len(frame.delta.encode()) for frame in run.frames)
    truth = len(run.source) - delivered
    assert report.lost_bytes_min <= truth <= report.lost_bytes
    if "\ufffd" not in "".join(frame.delta for frame in run.frames):
        # No U+FFFD to stand for 1 to 3 bytes: nothing is left to bound.
        assert report.lost_bytes_min == report.lost_bytes == truth
    live = state.report()
    assert live.lost_bytes_min <= truth <= live.lost_bytes


def test_consecutive_ascii_gaps_sum_exactly_once_ended() -> None:
    """Two gap frames in a row, all ASCII: each gap alone is a range (the
    first one's held bytes may belong to the second), their sum is exact."""
    state = fold(
        {"delta": "ab", "total_bytes": 2},
        {"delta": "xy", "total_bytes": 10, "gap": True},
        {"delta": "zw", "total_bytes": 20, "gap": True},
    )
    assert [gap.exact for gap in state.gaps] == [False, False]
    ended = state.report(ended=True)
    assert ended.lost_bytes_min == ended.lost_bytes == 20 - 6
    assert "2 gaps (14 bytes lost)" in ended.summary()
    live = state.report()
    assert (live.lost_bytes_min, live.lost_bytes) == (11, 14)


def test_a_repeated_frame_in_a_later_fold_is_one_overrun_at_every_split() -> None:
    """A frame repeated on the wire (seq and all) makes its run overrun its total;
    a fold that starts inside that run judges it without what came before, and
    absorbing it must not add a second verdict beside the whole fold's one."""
    lines = [
        progress_line("call-0", "chunk_0", {"delta": "\x80", "total_bytes": 2}, 0),
        progress_line("call-0", "chunk_0", {"delta": "\U00010000", "total_bytes": 6}, 1),
        progress_line("call-0", "chunk_0", {"delta": "\U00010000", "total_bytes": 6}, 1),
        progress_line("call-0", "chunk_0", {"delta": "0", "total_bytes": 7}, 2),
    ]
    for scope in ("call", "connection"):
        whole = Reassembler.fold(lines, seq_scope=scope)
        report = whole.stream("call-0", "chunk_0").report()  # type: ignore[union-attr]
        assert [a.kind for a in report.anomalies] == ["total_overrun"]
        for cut in range(len(lines) + 1):
            split = Reassembler.fold(lines[:cut], seq_scope=scope)
            split.absorb(Reassembler.fold(lines[cut:], seq_scope=scope))
            assert split == whole, (scope, cut)
