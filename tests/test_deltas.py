"""Tests for ``DeltaStreamer``: the cursor it keeps, drain/finish over tails and
``TailBuffer``s, and the docs/design.md §2 properties over any write/tick schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES
from kigi_tool_runtime import DeltaStreamer, TailBuffer, stream_chunk
from kigi_tool_runtime.testing import byte_sources, caps, schedules, utf8_text_sources
from kigi_tool_runtime.testing._strategies import (
    ScheduleStep,
    output_limits,
    streaming_specs,
    tail_sizes,
)


def spec_with(cap: int | None) -> StreamingSpec:
    return StreamingSpec(subkind="test_chunk", max_delta_bytes=cap)


def payloads(frames: list[CustomProgress]) -> list[PartialResultPayload]:
    out = []
    for frame in frames:
        assert isinstance(frame.payload, PartialResultPayload)
        out.append(frame.payload)
    return out


def text_of(frames: list[CustomProgress]) -> str:
    return "".join(payload.delta for payload in payloads(frames))


# -- The streamer itself ---------------------------------------------------------


def test_new_streamer_starts_at_zero_with_its_spec() -> None:
    """A fresh streamer has its spec and a cursor of 0."""
    spec = spec_with(3)
    streamer = DeltaStreamer(spec)
    assert streamer.spec is spec
    assert streamer.last_total == 0
    assert repr(streamer) == "DeltaStreamer(subkind='test_chunk', last_total=0)"


def test_step_yields_one_frame_and_advances_the_cursor() -> None:
    """step returns at most one frame and keeps the cursor stream_chunk returned."""
    streamer = DeltaStreamer(spec_with(2))
    frame = streamer.step(b"abcde", 5)
    assert frame is not None
    assert payloads([frame])[0].delta == "ab"
    assert streamer.last_total == 2
    assert streamer.step(b"abcde", 2) is None
    assert streamer.last_total == 2


def test_drain_returns_every_frame_until_caught_up() -> None:
    """drain paces a backlog out in capped frames and then returns nothing."""
    streamer = DeltaStreamer(spec_with(3))
    frames = streamer.drain(b"abcdefgh", 8)
    assert [p.delta for p in payloads(frames)] == ["abc", "def", "gh"]
    assert streamer.last_total == 8
    assert streamer.drain(b"abcdefgh", 8) == []


def test_drain_holds_a_split_character_and_finish_flushes_it() -> None:
    """drain holds a trailing split character; finish turns it into U+FFFD."""
    streamer = DeltaStreamer(spec_with(None))
    assert text_of(streamer.drain(b"ok\xf0\x9f", 4)) == "ok"
    assert streamer.last_total == 2
    assert streamer.drain(b"ok\xf0\x9f", 4) == []
    assert text_of(streamer.finish(b"ok\xf0\x9f", 4)) == "\ufffd"
    assert streamer.last_total == 4


def test_finish_drains_a_backlog_larger_than_one_cap() -> None:
    """finish emits the whole backlog, however many caps it spans."""
    streamer = DeltaStreamer(spec_with(4))
    frames = streamer.finish(b"0123456789", 10)
    assert [p.delta for p in payloads(frames)] == ["0123", "4567", "89"]
    assert streamer.last_total == 10


def test_drain_reports_a_gap_once() -> None:
    """A drain across lost bytes reports one gap frame, first."""
    streamer = DeltaStreamer(spec_with(2))
    frames = payloads(streamer.drain(b"wxyz", 50, True))
    assert [(p.delta, p.gap, p.truncated, p.total_bytes) for p in frames] == [
        ("wx", True, True, 50),
        ("yz", False, True, 50),
    ]


def test_buffer_variants_read_tail_total_and_truncated() -> None:
    """drain_buffer and finish_buffer read the buffer's tail, total and truncated."""
    buffer = TailBuffer(8, limit=6)
    buffer.write(b"abcd\xc3\xa9!!")
    streamer = DeltaStreamer(spec_with(None))
    frames = payloads(streamer.drain_buffer(buffer))
    assert [(p.delta, p.total_bytes, p.truncated) for p in frames] == [("abcdé", 6, True)]
    buffer.write(b"more")
    assert streamer.finish_buffer(buffer) == []

    buffer = TailBuffer(8)
    buffer.write(b"ab\xe2\x82")
    streamer = DeltaStreamer(spec_with(None))
    assert text_of(streamer.drain_buffer(buffer)) == "ab"
    assert text_of(streamer.finish_buffer(buffer)) == "\ufffd"
    assert streamer.last_total == 4


def notice(total: int) -> PartialResultPayload:
    return PartialResultPayload(delta="", total_bytes=total, truncated=True, gap=False)


def test_a_write_refused_whole_at_the_limit_is_said_by_a_final_notice() -> None:
    """Output that stops exactly at the limit, then a write refused whole: no
    delta frame can carry ``truncated``, so finish ends with the notice, once."""
    buffer = TailBuffer(16, limit=4)
    streamer = DeltaStreamer(spec_with(None))
    buffer.write(b"abcd")
    assert [(p.delta, p.truncated) for p in payloads(streamer.drain_buffer(buffer))] == [
        ("abcd", False)
    ]
    assert buffer.write(b"efgh") == 0
    assert buffer.truncated
    assert streamer.drain_buffer(buffer) == [], "drain never emits the notice"
    assert payloads(streamer.finish_buffer(buffer)) == [notice(4)]
    assert streamer.finish_buffer(buffer) == [], "the notice is not repeated"
    assert streamer.last_total == 4


def test_a_limit_of_zero_streams_only_the_notice() -> None:
    """``limit=0``: every byte is refused, and the stream is the notice alone."""
    buffer = TailBuffer(8, limit=0)
    buffer.write(b"anything")
    streamer = DeltaStreamer(spec_with(3))
    frames = streamer.finish_buffer(buffer)
    assert [frame.subkind for frame in frames] == ["test_chunk"]
    assert payloads(frames) == [notice(0)]
    assert streamer.finish_buffer(buffer) == []


def test_the_notice_follows_the_drained_frames() -> None:
    """finish drains the backlog first; the notice comes after its last frame."""
    streamer = DeltaStreamer(spec_with(2))
    assert payloads(streamer.drain(b"abc", 3)) == [
        PartialResultPayload(delta="ab", total_bytes=3),
        PartialResultPayload(delta="c", total_bytes=3),
    ]
    frames = payloads(streamer.finish(b"abcde", 5, True))
    assert frames == [
        PartialResultPayload(delta="de", total_bytes=5, truncated=True),
    ], "a delta frame says truncated itself: no notice"
    streamer = DeltaStreamer(spec_with(2))
    streamer.drain(b"abc", 3)
    assert payloads(streamer.finish(b"abc", 3, True)) == [notice(3)]
    assert streamer.finish(b"abc", 3, True) == []


def test_no_notice_when_a_frame_already_said_truncated() -> None:
    """A frame that carried ``truncated`` (from step or drain) makes the notice moot."""
    streamer = DeltaStreamer(spec_with(None))
    assert streamer.step(b"ab", 2, True) is not None
    assert streamer.finish(b"ab", 2, True) == []
    streamer = DeltaStreamer(spec_with(None))
    streamer.drain(b"ab", 2, True)
    assert streamer.finish(b"ab", 2, True) == []


def test_no_notice_without_truncation() -> None:
    """A source that refused nothing never gets the notice, even at total 0."""
    streamer = DeltaStreamer(spec_with(None))
    assert streamer.finish(b"", 0) == []
    buffer = TailBuffer(8, limit=4)
    buffer.write(b"abcd")
    assert [p.delta for p in payloads(DeltaStreamer(spec_with(None)).finish_buffer(buffer))] == [
        "abcd"
    ]


def test_frames_carry_the_spec_subkind() -> None:
    """Every frame is a custom progress with the spec's subkind."""
    frames = DeltaStreamer(StreamingSpec(subkind="bash_output_chunk")).finish(b"hi", 2)
    assert [frame.subkind for frame in frames] == ["bash_output_chunk"]


def test_negative_cap_is_rejected_at_construction() -> None:
    """A spec with a negative cap is refused up front (by the spec itself)."""
    with pytest.raises(ValueError, match="`max_delta_bytes` = -3 is outside the u32 range"):
        DeltaStreamer(spec_with(-3))


def test_step_rejects_bad_arguments() -> None:
    """step checks its arguments like stream_chunk and leaves the cursor alone."""
    streamer = DeltaStreamer(spec_with(None))
    with pytest.raises(ValueError, match="total must be >= 0, got -5"):
        streamer.step(b"", -5)
    with pytest.raises(TypeError, match="tail must be bytes"):
        streamer.step([1, 2], 2)  # type: ignore[arg-type]
    assert streamer.last_total == 0


def test_step_with_final_flushes_a_split_character() -> None:
    """step(final=True) flushes a trailing split character as U+FFFD."""
    streamer = DeltaStreamer(spec_with(None))
    assert streamer.step(b"\xe2\x82", 2) is None
    frame = streamer.step(b"\xe2\x82", 2, final=True)
    assert frame is not None
    assert payloads([frame])[0].delta == "\ufffd"
    assert streamer.last_total == 2


def test_bad_arguments_are_rejected_at_the_call() -> None:
    """A negative or non-int total, a bad tail or a non-bool truncated flag
    raises, and the cursor stays put."""
    streamer = DeltaStreamer(spec_with(None))
    with pytest.raises(ValueError, match="total must be >= 0, got -1"):
        streamer.drain(b"", -1)
    with pytest.raises(TypeError, match="tail must be bytes"):
        streamer.finish("x", 1)  # type: ignore[arg-type]
    for call in (streamer.step, streamer.drain, streamer.finish):
        with pytest.raises(TypeError, match="truncated must be a bool, not int"):
            call(b"a", 1, 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="total must be an int, not float"):
            call(b"abc", 1e10)  # type: ignore[arg-type]
    assert streamer.last_total == 0


# -- Cuts at every byte index, through a TailBuffer ------------------------------

EXAMPLES = [
    "é splits: ééé",
    "€ splits: €€€",
    "😀 splits: 😀😀😀",
    "all: a\x00é€😀\ufffd\U0010ffff z",
]


@pytest.mark.parametrize("text", EXAMPLES)
@pytest.mark.parametrize("cap", [None, 0, 1, 2, 3])
def test_two_writes_cut_at_every_index(text: str, cap: int | None) -> None:
    """Two writes cut at every byte index, drained after each, reassemble exactly."""
    source = text.encode()
    for cut in range(len(source) + 1):
        buffer = TailBuffer(len(source) + 4)
        streamer = DeltaStreamer(spec_with(cap))
        buffer.write(source[:cut])
        frames = streamer.drain_buffer(buffer)
        buffer.write(source[cut:])
        frames += streamer.drain_buffer(buffer)
        frames += streamer.finish_buffer(buffer)
        assert text_of(frames) == text, f"cut at {cut}"
        assert not any(p.gap for p in payloads(frames))


@pytest.mark.parametrize("text", EXAMPLES)
@pytest.mark.parametrize("cap", [None, 0, 1])
def test_byte_at_a_time_through_smallest_tail(text: str, cap: int | None) -> None:
    """One byte per write through a 4-byte tail, drained each time, is lossless."""
    buffer = TailBuffer(4)
    streamer = DeltaStreamer(spec_with(cap))
    frames: list[CustomProgress] = []
    for byte in text.encode():
        buffer.write(bytes([byte]))
        frames += streamer.drain_buffer(buffer)
    frames += streamer.finish_buffer(buffer)
    assert text_of(frames) == text
    assert streamer.last_total == buffer.total


@pytest.mark.parametrize("capacity", [4, 5, 6, 7])
@pytest.mark.parametrize("cap", [0, 1, 3])
def test_four_byte_characters_across_gaps_at_tiny_caps(capacity: int, cap: int) -> None:
    """4-byte characters overflowing a tail of 4-7 bytes, cut at every index, at
    caps below one character: every loss is one gap frame, survivors are whole
    characters (orphans skipped, never U+FFFD), and the cursor ends at the total."""
    text = "😀a𝄞😀😀b😀"
    source = text.encode()
    for cut in range(len(source) + 1):
        buffer = TailBuffer(capacity)
        streamer = DeltaStreamer(spec_with(cap))
        buffer.write(source[:cut])
        frames = streamer.drain_buffer(buffer)
        # The cursor may stop before a held split character, still in the tail.
        first = streamer.last_total
        buffer.write(source[cut:])
        frames += streamer.finish_buffer(buffer)
        out = text_of(frames)
        assert "\ufffd" not in out, f"cut at {cut}"
        assert all(len(p.delta) <= 1 for p in payloads(frames)), f"cut at {cut}"
        losses = (cut > capacity) + (len(source) - first > capacity)
        assert sum(p.gap for p in payloads(frames)) == losses, f"cut at {cut}"
        assert out.endswith(source[-capacity:].decode("utf-8", "ignore")), f"cut at {cut}"
        assert streamer.last_total == len(source)


# -- Properties over write/tick schedules ----------------------------------------


@dataclass
class Drain:
    """One drain: the buffer's total and tail then, the cursor before, and each
    frame with the cursor after it."""

    total: int
    tail: bytes
    before: int
    frames: list[tuple[PartialResultPayload, int]] = field(default_factory=list)


def run_schedule(
    spec: StreamingSpec, capacity: int, steps: list[ScheduleStep]
) -> tuple[list[Drain], TailBuffer, DeltaStreamer]:
    """Write each step into a TailBuffer, drain on each tick, finish at the end.

    Each drain's frames are checked against repeated ``stream_chunk`` calls from
    the same cursor, which also recovers the cursor after every frame.
    """
    buffer = TailBuffer(capacity)
    streamer = DeltaStreamer(spec)
    drains: list[Drain] = []

    def drain(final: bool) -> None:
        record = Drain(buffer.total, bytes(buffer.tail()), streamer.last_total)
        frames = streamer.finish_buffer(buffer) if final else streamer.drain_buffer(buffer)
        cursor = record.before
        for frame in frames:
            expected, cursor = stream_chunk(
                spec, record.tail, record.total, cursor, buffer.truncated, final=final
            )
            assert frame == expected
            record.frames.append((frame.payload, cursor))
        assert stream_chunk(spec, record.tail, record.total, cursor, final=final).progress is None
        assert streamer.last_total == cursor
        drains.append(record)

    for step in steps:
        if step is None:
            drain(False)
        else:
            buffer.write(step)
    drain(True)
    return drains, buffer, streamer


def check_schedule(
    source: bytes, spec: StreamingSpec, drains: list[Drain], *, valid_text: bool
) -> bool:
    """Check every §2 property of a schedule's frames; return whether a gap occurred."""
    cap = DEFAULT_MAX_DELTA_BYTES if spec.max_delta_bytes is None else spec.max_delta_bytes
    last_total_bytes = 0
    # Runs of contiguous source between losses: (start offset, deltas, end offset).
    segments: list[tuple[int, list[str], int]] = []
    seg_start, seg_end = 0, 0
    seg_text: list[str] = []
    for record in drains:
        lost = record.total - record.before > len(record.tail)
        gap_flags = [payload.gap for payload, _ in record.frames]
        assert gap_flags == (
            [True] + [False] * (len(gap_flags) - 1) if lost else [False] * len(gap_flags)
        )
        cursor = record.before
        for payload, after in record.frames:
            assert payload.total_bytes == record.total >= last_total_bytes
            last_total_bytes = payload.total_bytes
            if payload.gap:
                segments.append((seg_start, seg_text, seg_end))
                orphans = 0
                while orphans < 3 and orphans < len(record.tail):
                    if not 0x80 <= record.tail[orphans] <= 0xBF:
                        break
                    orphans += 1
                start = record.total - len(record.tail) + orphans
                assert start > cursor, "a gap frame stands for at least one lost byte"
                seg_start, seg_text = start, []
                emitted = after - start
            else:
                assert payload.delta, "only a gap frame may be empty"
                emitted = after - cursor
            assert emitted <= cap or (len(payload.delta) == 1 and emitted <= 4)
            assert emitted >= 0
            seg_text.append(payload.delta)
            cursor = seg_end = after
        if not record.frames:
            seg_end = max(seg_end, cursor)
    segments.append((seg_start, seg_text, seg_end))
    assert drains[-1].frames == [] or drains[-1].frames[-1][1] == len(source)
    for start, texts, end in segments:
        piece = source[start:end]
        expected = piece.decode("utf-8") if valid_text else piece.decode("utf-8", "replace")
        assert "".join(texts) == expected, f"segment {start}..{end}"
    return len(segments) > 1


@given(source=utf8_text_sources(), spec=streaming_specs(), extra=tail_sizes(), data=st.data())
def test_valid_text_is_lossless_without_a_gap(
    source: bytes, spec: StreamingSpec, extra: int, data: st.DataObject
) -> None:
    """Valid UTF-8 through a tail that never overflows comes out exactly."""
    steps = data.draw(schedules(source))
    drains, buffer, streamer = run_schedule(spec, len(source) + extra, steps)
    out = "".join(p.delta for record in drains for p, _ in record.frames)
    assert out == source.decode("utf-8")
    assert streamer.last_total == buffer.total == len(source)
    assert not check_schedule(source, spec, drains, valid_text=True)


@given(source=byte_sources(), spec=streaming_specs(), extra=tail_sizes(), data=st.data())
def test_arbitrary_bytes_equal_lossy_decode(
    source: bytes, spec: StreamingSpec, extra: int, data: st.DataObject
) -> None:
    """Arbitrary bytes without a gap come out as decode("utf-8", "replace")."""
    steps = data.draw(schedules(source))
    drains, buffer, streamer = run_schedule(spec, len(source) + extra, steps)
    out = "".join(p.delta for record in drains for p, _ in record.frames)
    assert out == source.decode("utf-8", "replace")
    assert streamer.last_total == buffer.total == len(source)
    assert not check_schedule(source, spec, drains, valid_text=False)


@given(
    source=utf8_text_sources(),
    cap=caps(),
    capacity=st.one_of(st.integers(4, 12), tail_sizes()),
    data=st.data(),
)
def test_valid_text_through_any_tail_loses_only_what_gaps_report(
    source: bytes, cap: int | None, capacity: int, data: st.DataObject
) -> None:
    """Through any tail, every loss is one gap frame; text between gaps is exact."""
    spec = spec_with(cap)
    steps = data.draw(schedules(source))
    drains, _, streamer = run_schedule(spec, capacity, steps)
    gapped = check_schedule(source, spec, drains, valid_text=True)
    event("gap" if gapped else "no gap")
    assert streamer.last_total == len(source)
    if not gapped:
        out = "".join(p.delta for record in drains for p, _ in record.frames)
        assert out == source.decode()


@given(
    source=byte_sources(),
    cap=caps(),
    capacity=st.one_of(st.integers(4, 12), tail_sizes()),
    data=st.data(),
)
def test_arbitrary_bytes_through_any_tail_loses_only_what_gaps_report(
    source: bytes, cap: int | None, capacity: int, data: st.DataObject
) -> None:
    """Arbitrary bytes through any tail: each loss is one gap frame, the rest exact."""
    spec = spec_with(cap)
    steps = data.draw(schedules(source))
    drains, _, streamer = run_schedule(spec, capacity, steps)
    event("gap" if check_schedule(source, spec, drains, valid_text=False) else "no gap")
    assert streamer.last_total == len(source)


@given(n=st.integers(1, 5000), cap=st.integers(1, 600), capacity=tail_sizes())
def test_ascii_backlog_drains_in_ceil_n_over_cap_frames(n: int, cap: int, capacity: int) -> None:
    """A backlog of n ASCII bytes in the tail drains in exactly ceil(n / cap) frames."""
    buffer = TailBuffer(max(capacity, n))
    buffer.write(b"k" * n)
    frames = DeltaStreamer(spec_with(cap)).drain_buffer(buffer)
    assert len(frames) == math.ceil(n / cap)
    assert text_of(frames) == "k" * n


@given(
    source=byte_sources(),
    cap=caps(),
    capacity=st.one_of(st.integers(4, 12), tail_sizes()),
    data=st.data(),
)
def test_finish_says_truncated_iff_the_buffer_refused_a_byte(
    source: bytes, cap: int | None, capacity: int, data: st.DataObject
) -> None:
    """With any limit and schedule, after finish the stream says ``truncated``
    exactly when the buffer refused a byte; the notice comes at most once, last,
    at the final total; every other non-gap frame carries a delta."""
    steps = data.draw(schedules(source))
    limit = data.draw(output_limits(steps), label="limit")
    buffer = TailBuffer(capacity, limit)
    streamer = DeltaStreamer(spec_with(cap))
    frames: list[CustomProgress] = []
    for step in steps:
        if step is None:
            frames += streamer.drain_buffer(buffer)
        else:
            buffer.write(step)
    frames += streamer.finish_buffer(buffer)
    frames += streamer.finish_buffer(buffer)
    got = payloads(frames)
    assert any(p.truncated for p in got) == buffer.truncated
    assert buffer.truncated == (limit is not None and len(source) > limit)
    empties = [i for i, p in enumerate(got) if not p.delta and not p.gap]
    assert len(empties) <= 1
    if empties:
        assert empties == [len(got) - 1]
        assert got[-1] == notice(buffer.total)
        assert not any(p.truncated for p in got[:-1])
    event("notice" if empties else "no notice")
