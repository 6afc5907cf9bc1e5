"""Tests for ``stream_chunk``: the normative contract, the conformance vectors,
the six deliberate fixes, argument checks and cuts at every byte index."""

from __future__ import annotations

import array
import json
import math
import tracemalloc
from typing import Any

import pytest
from conftest import CONFORMANCE
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    CustomProgress,
    DecodeError,
    PartialResultPayload,
    StreamingSpec,
    json_codec,
)
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES
from kigi_tool_runtime import Chunk, stream_chunk
from kigi_tool_runtime._consumer._loss import MAX_HELD_BYTES
from kigi_tool_runtime.testing import byte_sources, caps, utf8_text_sources

Tail = bytes | bytearray | memoryview


def spec_with(cap: int | None) -> StreamingSpec:
    return StreamingSpec(subkind="test_chunk", max_delta_bytes=cap)


def payload_of(progress: CustomProgress | None) -> PartialResultPayload:
    assert progress is not None, "expected a progress frame"
    assert isinstance(progress, CustomProgress)
    assert progress.subkind == "test_chunk"
    assert isinstance(progress.payload, PartialResultPayload)
    return progress.payload


def run(
    spec: StreamingSpec, tail: Tail, total: int, last: int, truncated: bool = False
) -> tuple[PartialResultPayload, int]:
    progress, last = stream_chunk(spec, tail, total, last, truncated)
    return payload_of(progress), last


def drain_calls(
    spec: StreamingSpec, tail: Tail, total: int, last: int, *, final: bool = False
) -> tuple[list[tuple[PartialResultPayload, int]], int]:
    """Call until no frame; each frame with the source bytes it consumed."""
    frames: list[tuple[PartialResultPayload, int]] = []
    while True:
        progress, after = stream_chunk(spec, tail, total, last, final=final)
        if progress is None:
            assert after == last, "no frame never moves the cursor"
            return frames, last
        frames.append((payload_of(progress), after - last))
        last = after


# -- The original unit tests, same expectations ---------------------------------


def test_no_new_bytes_returns_none_and_leaves_last_total() -> None:
    """total <= last_total yields no frame and leaves the cursor where it was."""
    spec = spec_with(None)
    assert stream_chunk(spec, b"abc", 10, 10) == Chunk(None, 10)
    assert stream_chunk(spec, b"abc", 5, 10) == Chunk(None, 10)


def test_emits_suffix_delta_and_advances_last_total() -> None:
    """The new bytes are the tail's suffix; the cursor advances past them."""
    payload, last = run(spec_with(None), b"abcde", 5, 2)
    assert payload == PartialResultPayload(delta="cde", total_bytes=5, truncated=False, gap=False)
    assert last == 5


def test_gap_set_when_new_exceeds_surviving_tail() -> None:
    """More new bytes than the tail holds: the tail is emitted with gap=True."""
    payload, last = run(spec_with(None), b"tail", 100, 0)
    assert payload.delta == "tail"
    assert payload.total_bytes == 100
    assert payload.gap
    assert not payload.truncated, "a per-tick gap must not set cumulative truncated"
    assert last == 100


def test_truncated_is_caller_supplied_and_distinct_from_gap() -> None:
    """truncated is copied verbatim and says nothing about a gap."""
    payload, _ = run(spec_with(None), b"abc", 3, 0, truncated=True)
    assert payload.truncated
    assert not payload.gap


def test_append_multibyte_split_across_ticks_is_held_back_and_reassembled() -> None:
    """A lead byte without its continuation is held, then emitted whole."""
    spec = spec_with(None)
    payload, last = run(spec, b"a\xc3", 2, 0)
    assert (payload.delta, last) == ("a", 1)
    payload, last = run(spec, "aé".encode(), 3, last)
    assert (payload.delta, last) == ("é", 3)


def test_append_over_cap_defers_remainder_to_next_call_without_loss() -> None:
    """A burst larger than the cap is paced out over capped frames, losslessly."""
    frames, last = drain_calls(spec_with(4), b"abcdefghi", 9, 0)
    assert all(len(p.delta) <= 4 for p, _ in frames)
    assert "".join(p.delta for p, _ in frames) == "abcdefghi"
    assert last == 9


def test_append_cap_cut_respects_utf8_boundaries() -> None:
    """A cap that would split a character backs off; the character comes next."""
    tail = "aaaaaaaé".encode()
    spec = spec_with(8)
    payload, last = run(spec, tail, len(tail), 0)
    assert payload.delta == "aaaaaaa"
    payload, last = run(spec, tail, len(tail), last)
    assert payload.delta == "é"


def test_payload_decodes_with_optional_flags_absent() -> None:
    """A payload without truncated and gap decodes with both false."""
    payload = json_codec.decode(b'{"delta":"x","total_bytes":1}', PartialResultPayload)
    assert not payload.truncated
    assert not payload.gap


def test_payload_rejects_unknown_field() -> None:
    """An unknown payload field is a decode error, not silently ignored."""
    raw = b'{"delta":"x","total_bytes":1,"truncated":false,"gap":false,"accumulation":"append"}'
    with pytest.raises(DecodeError, match="accumulation"):
        json_codec.decode(raw, PartialResultPayload)


def test_drains_backlog_in_minimum_ticks() -> None:
    """A backlog drains in exactly ceil(new / cap) calls."""
    frames, last = drain_calls(spec_with(4), b"abcdefghij", 10, 0)
    assert "".join(p.delta for p, _ in frames) == "abcdefghij"
    assert len(frames) == math.ceil(10 / 4)
    assert last == 10


def test_ascii_frames_fill_to_cap() -> None:
    """ASCII frames fill to the cap, with no empty trailing frame."""
    spec = spec_with(4)
    payload, last = run(spec, b"abcdefgh", 8, 0)
    assert payload.delta == "abcd"
    payload, last = run(spec, b"abcdefgh", 8, last)
    assert payload.delta == "efgh"
    assert stream_chunk(spec, b"abcdefgh", 8, last).progress is None


def test_exact_cap_emits_single_frame() -> None:
    """A delta exactly at the cap is one frame, nothing deferred."""
    spec = spec_with(8)
    payload, last = run(spec, b"abcdefgh", 8, 0)
    assert (payload.delta, payload.gap, last) == ("abcdefgh", False, 8)
    assert stream_chunk(spec, b"abcdefgh", 8, last).progress is None


def test_tiny_cap_below_char_still_makes_progress() -> None:
    """A cap smaller than one character still emits that whole character."""
    payload, last = run(spec_with(1), "é".encode(), 2, 0)
    assert (payload.delta, last) == ("é", 2)


def test_utf8_backoff_stays_within_three_bytes_of_cap() -> None:
    """Backing off a split 4-byte character keeps frames within 3 bytes of the cap."""
    data = "😀😀😀😀".encode()
    frames, last = drain_calls(spec_with(7), data, len(data), 0)
    for payload, consumed in frames:
        size = len(payload.delta.encode())
        assert size == consumed
        assert size % 4 == 0
        assert 7 - 3 <= size <= 7
    assert last == len(data)


def test_gap_with_cap_paces_surviving_tail_and_terminates() -> None:
    """A gap drains only the surviving tail, reporting the gap once."""
    frames, last = drain_calls(spec_with(4), b"abcdefgh", 1000, 0)
    assert len(frames) <= 4
    assert [p.gap for p, _ in frames] == [True, False]
    assert "".join(p.delta for p, _ in frames) == "abcdefgh"
    assert last == 1000


# -- Conformance vectors -------------------------------------------------------

VECTORS = CONFORMANCE / "stream_chunk_vectors.jsonl"


def test_conformance_vectors_are_met_exactly() -> None:
    """Every line of stream_chunk_vectors.jsonl gives its expected frame and cursor."""
    lines = VECTORS.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5000
    failures = []
    for number, line in enumerate(lines, start=1):
        vector: dict[str, Any] = json.loads(line)
        spec = StreamingSpec(subkind="vector", max_delta_bytes=vector["cap"])
        progress, last = stream_chunk(
            spec,
            bytes.fromhex(vector["tail"]),
            vector["total"],
            vector["last_total"],
            vector["truncated"],
        )
        frame = None
        if progress is not None:
            assert progress.subkind == "vector"
            frame = json.loads(json_codec.encode(progress.payload))
        got = {"frame": frame, "last_total": last}
        if got != vector["expect"]:
            failures.append(f"line {number}: expected {vector['expect']}, got {got}")
    assert not failures, "\n".join(failures[:20])


# -- The deliberate fixes, each pinned -------------------------------------------


def test_fix_a_split_character_is_held_not_replaced() -> None:
    """Fix A: "a" then a tick with no new byte yields nothing, then "é" whole."""
    spec = spec_with(None)
    payload, last = run(spec, b"a\xc3", 2, 0)
    assert (payload.delta, last) == ("a", 1)
    assert stream_chunk(spec, b"a\xc3", 2, last) == Chunk(None, 1)
    payload, last = run(spec, b"a\xc3\xa9", 3, last)
    assert (payload.delta, last) == ("é", 3)


def test_fix_b_earlier_invalid_byte_does_not_disable_hold_back() -> None:
    """Fix B: an invalid byte before a trailing split character keeps the hold-back."""
    spec = spec_with(None)
    payload, last = run(spec, b"\xffx\xe2\x82", 4, 0)
    assert (payload.delta, last) == ("\ufffdx", 2)
    payload, last = run(spec, b"\xffx\xe2\x82\xac", 5, last)
    assert (payload.delta, last) == ("€", 5)


def test_fix_b_gap_frame_holds_trailing_split_character() -> None:
    """Fix B on a gap: the surviving tail's trailing split character is held."""
    spec = spec_with(None)
    payload, last = run(spec, b"\xff\xfeok\xf0\x9f\x98", 50, 0)
    assert (payload.delta, payload.gap, last) == ("\ufffd\ufffdok", True, 47)
    payload, last = run(spec, b"ok\xf0\x9f\x98\x80", 51, last)
    assert (payload.delta, payload.gap, last) == ("😀", False, 51)


def test_fix_c_rescue_emits_exactly_one_character() -> None:
    """Fix C: a cap below one character emits that one character, not more."""
    spec = spec_with(1)
    payload, last = run(spec, "éab".encode(), 4, 0)
    assert (payload.delta, last) == ("é", 2)
    payload, last = run(spec, "😀é".encode(), 6, 0)
    assert (payload.delta, last) == ("😀", 4)


def test_fix_d_final_flushes_backlog_and_trailing_split_character() -> None:
    """Fix D: final drains a backlog beyond one cap and flushes a split character."""
    spec = spec_with(4)
    source = b"abcdefghij\xc3"
    frames, last = drain_calls(spec, source, len(source), 0)
    assert [p.delta for p, _ in frames] == ["abcd", "efgh", "ij"]
    assert last == 10
    frames, last = drain_calls(spec, source, len(source), last, final=True)
    assert [p.delta for p, _ in frames] == ["\ufffd"]
    assert last == len(source)


def test_fix_e_gap_tail_skips_orphaned_continuation_bytes() -> None:
    """Fix E: a gap tail that starts mid-character skips the orphans, no U+FFFD."""
    spec = spec_with(None)
    payload, last = run(spec, "é".encode()[1:] + b"xyz", 100, 0)
    assert (payload.delta, payload.gap, last) == ("xyz", True, 100)
    payload, last = run(spec, "😀".encode()[1:] + "ü".encode(), 100, 0)
    assert (payload.delta, payload.gap, last) == ("ü", True, 100)


def test_fix_f_gap_with_empty_tail_is_still_reported() -> None:
    """Fix F: a gap with nothing surviving still yields one empty gap frame."""
    spec = spec_with(None)
    payload, last = run(spec, b"", 7, 3)
    assert payload == PartialResultPayload(delta="", total_bytes=7, truncated=False, gap=True)
    assert last == 7
    assert stream_chunk(spec, b"", 7, last) == Chunk(None, 7)


# -- Bounds and edge cases -------------------------------------------------------


def test_orphan_skip_stops_at_max_orphan_bytes() -> None:
    """At most MAX_HELD_BYTES leading continuation bytes are skipped on a gap."""
    tail = b"\x80" * (MAX_HELD_BYTES + 1) + b"z"
    payload, last = run(spec_with(None), tail, 100, 0)
    assert (payload.delta, last) == ("\ufffdz", 100)


def test_orphans_are_skipped_only_on_a_gap() -> None:
    """Without a gap, leading continuation bytes are source bytes: U+FFFD each."""
    payload, last = run(spec_with(None), b"\x80\x80z", 3, 0)
    assert (payload.delta, payload.gap, last) == ("\ufffd\ufffdz", False, 3)


def test_gap_with_only_a_split_character_reports_gap_and_holds() -> None:
    """A gap whose tail is one split character reports the gap, holds the bytes."""
    spec = spec_with(None)
    payload, last = run(spec, b"\xe6", 4, 0)
    assert (payload.delta, payload.gap, last) == ("", True, 3)
    assert stream_chunk(spec, b"\xe6", 4, last) == Chunk(None, 3)


def test_default_cap_is_sixteen_kib() -> None:
    """An unset cap is DEFAULT_MAX_DELTA_BYTES (16 KiB) source bytes per frame."""
    tail = b"x" * (DEFAULT_MAX_DELTA_BYTES + 5)
    payload, last = run(spec_with(None), tail, len(tail), 0)
    assert len(payload.delta) == DEFAULT_MAX_DELTA_BYTES == 16 * 1024
    assert last == DEFAULT_MAX_DELTA_BYTES


def test_cap_zero_emits_one_character_per_frame() -> None:
    """A cap of 0 streams one character per frame."""
    source = "aé€😀".encode()
    frames, last = drain_calls(spec_with(0), source, len(source), 0)
    assert [(p.delta, used) for p, used in frames] == [("a", 1), ("é", 2), ("€", 3), ("😀", 4)]
    assert last == len(source)


def test_truncated_surrogate_is_held_like_a_split_character() -> None:
    """0xED 0xA0 at the end is held, as Python's incremental decoder holds it."""
    spec = spec_with(1)
    assert stream_chunk(spec, b"\xed\xa0", 2, 0) == Chunk(None, 0)
    frames, last = drain_calls(spec, b"\xed\xa0", 2, 0, final=True)
    assert [(p.delta, used) for p, used in frames] == [("\ufffd", 1), ("\ufffd", 1)]
    assert last == 2


FIRST_UNITS_OF_EACH_LEAD = [
    "\u0080\u07ff".encode(),  # the edges of each lead byte's valid second byte
    "\u0800\u0fff".encode(),
    "\ud7ff\ue000".encode(),
    "\U00010000\U0003ffff".encode(),
    "\U00100000\U0010ffff".encode(),
    b"\xc0\x80",  # overlong 2-byte lead
    b"\xc1\xbf",
    b"\xc2a",  # 2-byte lead, then no continuation
    b"\xe0\x80\x80",  # overlong: 0xE0 needs 0xA0-0xBF next
    b"\xe0\x9f\xbf",
    b"\xe1\x80a",
    b"\xed\xa0\x80z",  # a surrogate: 0xED needs 0x80-0x9F next
    b"\xee\xc0",
    b"\xf0\x80\x80\x80",  # overlong: 0xF0 needs 0x90-0xBF next
    b"\xf0\x8f\xbf\xbf",
    b"\xf1\x80\x80a",
    b"\xf4\x90\x80\x80",  # past U+10FFFF: 0xF4 needs 0x80-0x8F next
    b"\xf5\x80\x80\x80",
    b"\xff\xfe",
]


@pytest.mark.parametrize("source", FIRST_UNITS_OF_EACH_LEAD, ids=lambda b: b.hex())
@pytest.mark.parametrize("cap", [0, 1, 2])
def test_cap_below_a_character_emits_one_character_or_maximal_subpart(
    source: bytes, cap: int
) -> None:
    """A cap cut inside the first unit emits that whole character, or one U+FFFD
    per maximal subpart as "replace" decodes it, for every kind of lead byte."""
    frames, last = drain_calls(spec_with(cap), source, len(source), 0, final=True)
    expected = source.decode("utf-8", "replace")
    assert "".join(p.delta for p, _ in frames) == expected
    assert last == len(source)
    for payload, consumed in frames:
        assert consumed <= cap or len(payload.delta) == 1, (payload.delta, consumed)


def test_final_flush_of_long_split_character_is_one_replacement() -> None:
    """final flushes a trailing split 4-byte character as a single U+FFFD."""
    frames, last = drain_calls(spec_with(2), b"\xf0\x9f\x98", 3, 0, final=True)
    assert [(p.delta, used) for p, used in frames] == [("\ufffd", 3)]
    assert last == 3


@pytest.mark.parametrize("tail_type", [bytes, bytearray, memoryview])
def test_tail_may_be_any_bytes_like(tail_type: type[Tail]) -> None:
    """bytes, bytearray and memoryview tails give the same frame."""
    tail = tail_type(b"xx\xc3\xa9\xe2\x82")
    assert stream_chunk(spec_with(None), tail, 6, 2) == stream_chunk(
        spec_with(None), b"xx\xc3\xa9\xe2\x82", 6, 2
    )


def test_memoryview_of_other_format_is_read_as_bytes() -> None:
    """A contiguous memoryview of wider items is read as its raw bytes."""
    words = array.array("H", [0x6261, 0x6463])
    payload, _ = run(spec_with(None), memoryview(words), 4, 0)
    assert payload.delta == bytes(words).decode()


def test_non_contiguous_memoryview_is_rejected() -> None:
    """A strided memoryview tail is a TypeError naming the fix."""
    with pytest.raises(TypeError, match="tail must be a contiguous buffer"):
        stream_chunk(spec_with(None), memoryview(b"abcdef")[::2], 3, 0)


def test_tail_of_wrong_type_is_rejected() -> None:
    """A str tail is a TypeError: tails are raw bytes."""
    with pytest.raises(TypeError, match="tail must be bytes, bytearray or memoryview, not str"):
        stream_chunk(spec_with(None), "abc", 3, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("truncated", [1, 0, None, "yes"], ids=repr)
def test_truncated_that_is_not_a_bool_is_rejected(truncated: Any) -> None:
    """A non-bool ``truncated`` is a TypeError, not a frame whose ``truncated``
    field the strict payload decoder would reject."""
    with pytest.raises(
        TypeError, match=f"truncated must be a bool, not {type(truncated).__name__}"
    ):
        stream_chunk(spec_with(None), b"a", 1, 0, truncated)


@pytest.mark.parametrize(
    ("total", "last_total", "message"),
    [
        (1e10, 0, "total must be an int, not float"),
        (5.0, 0, "total must be an int, not float"),
        (0.5, 1, "total must be an int, not float"),
        (True, 0, "total must be an int, not bool"),
        (3, 0.0, "last_total must be an int, not float"),
    ],
)
def test_counts_that_are_not_ints_are_rejected(total: Any, last_total: Any, message: str) -> None:
    """A float (or bool) count is a TypeError, not a frame whose total_bytes is a
    JSON float the strict decoder rejects, nor a float cursor."""
    with pytest.raises(TypeError, match=message):
        stream_chunk(spec_with(None), b"abcdefghij", total, last_total)


def test_negative_total_is_rejected() -> None:
    """A negative total is a ValueError."""
    with pytest.raises(ValueError, match="total must be >= 0, got -1"):
        stream_chunk(spec_with(None), b"", -1, 0)


def test_negative_last_total_is_rejected() -> None:
    """A negative cursor is a ValueError."""
    with pytest.raises(ValueError, match="last_total must be >= 0, got -2"):
        stream_chunk(spec_with(None), b"ab", 2, -2)


def test_negative_cap_is_rejected() -> None:
    """A negative max_delta_bytes is a ValueError: no spec carries one to stream_chunk."""
    with pytest.raises(ValueError, match="`max_delta_bytes` = -1 is outside the u32 range"):
        stream_chunk(spec_with(-1), b"ab", 2, 0)


def test_total_beyond_u64_is_rejected() -> None:
    """A total the wire's u64 cannot carry is a ValueError, not a frame."""
    with pytest.raises(ValueError, match="outside the u64 range"):
        stream_chunk(spec_with(None), b"a", 2**64, 2**64 - 1)


def test_cursor_past_total_means_no_frame() -> None:
    """last_total > total is not an error: no frame, cursor unchanged."""
    assert stream_chunk(spec_with(None), b"abc", 3, 9) == Chunk(None, 9)


def test_a_call_never_copies_the_tail() -> None:
    """A call allocates for the frame it emits, not for the size of the tail."""
    big = 8 * 1024 * 1024
    tail = bytes(big - 5) + "é€".encode()
    spec = spec_with(None)
    tracemalloc.start()
    try:
        small, _ = stream_chunk(spec, tail, 1000 + big, 995 + big)
        gapped, _ = stream_chunk(spec, memoryview(tail), 10 * big, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert payload_of(small).delta == "é€"
    assert payload_of(gapped).gap
    assert peak < 4 * DEFAULT_MAX_DELTA_BYTES


# -- Cuts at every byte index ----------------------------------------------------

EXAMPLES = [
    "plain ascii",
    "é at the end é",
    "€uro in 3 bytes €",
    "😀 and 𝄞 in 4 bytes 😀",
    "mixed: aé€😀\x00\x1b[0m\ufffd end",
]


@pytest.mark.parametrize("text", EXAMPLES)
@pytest.mark.parametrize("cap", [None, 0, 1, 2, 3, 5])
def test_every_two_way_cut_reassembles(text: str, cap: int | None) -> None:
    """Two ticks cut at every byte index (mid-character too) reassemble exactly."""
    source = text.encode()
    spec = spec_with(cap)
    for cut in range(len(source) + 1):
        first, last = drain_calls(spec, source[:cut], cut, 0)
        second, last = drain_calls(spec, source, len(source), last, final=True)
        out = "".join(p.delta for p, _ in first + second)
        assert out == text, f"cut at {cut}"
        assert last == len(source)


@pytest.mark.parametrize("text", EXAMPLES)
@pytest.mark.parametrize("cap", [None, 0, 1, 4])
def test_byte_at_a_time_reassembles(text: str, cap: int | None) -> None:
    """A source arriving one byte per tick reassembles exactly, no U+FFFD added."""
    source = text.encode()
    spec = spec_with(cap)
    out: list[str] = []
    last = 0
    for end in range(1, len(source) + 1):
        frames, last = drain_calls(spec, source[:end], end, last)
        out.extend(p.delta for p, _ in frames)
    assert "".join(out) == text
    assert last == len(source)


# -- Single-call properties ----------------------------------------------------


@given(source=byte_sources(), cap=caps(), data=st.data())
def test_only_the_pending_bytes_matter(source: bytes, cap: int | None, data: st.DataObject) -> None:
    """Without a gap, bytes before the pending ones never change the answer."""
    pending = data.draw(st.integers(0, len(source)))
    prefix = data.draw(st.binary(max_size=16))
    spec = spec_with(cap)
    total = 1000 + len(source)
    last = total - pending
    assert stream_chunk(spec, prefix + source, total, last) == stream_chunk(
        spec, source, total, last
    )


@given(source=byte_sources(), cap=caps())
def test_frames_respect_cap_or_carry_one_character(source: bytes, cap: int | None) -> None:
    """Each frame consumes at most cap bytes, or is exactly one character."""
    frames, last = drain_calls(spec_with(cap), source, len(source), 0, final=True)
    limit = DEFAULT_MAX_DELTA_BYTES if cap is None else cap
    for payload, consumed in frames:
        assert consumed > 0
        assert consumed <= limit or (len(payload.delta) == 1 and consumed <= 4)
    assert "".join(p.delta for p, _ in frames) == source.decode("utf-8", "replace")
    assert last == len(source)


@given(n=st.integers(1, 3000), cap=st.integers(0, 5000))
def test_ascii_backlog_drains_in_ceil_n_over_cap_calls(n: int, cap: int) -> None:
    """n ASCII bytes drain in exactly ceil(n / cap) calls (n when the cap is 0)."""
    frames, _ = drain_calls(spec_with(cap), b"q" * n, n, 0)
    assert len(frames) == (n if cap == 0 else math.ceil(n / cap))


@given(source=utf8_text_sources(), cap=caps())
def test_valid_text_never_yields_replacement(source: bytes, cap: int | None) -> None:
    """Valid UTF-8 drained with final comes out exactly, with no U+FFFD added."""
    frames, _ = drain_calls(spec_with(cap), source, len(source), 0, final=True)
    out = "".join(p.delta for p, _ in frames)
    assert out == source.decode("utf-8")
    assert out.count("\ufffd") == source.decode().count("\ufffd")
