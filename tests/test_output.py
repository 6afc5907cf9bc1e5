"""Tests for ``OutputStream``: the author helper over a tail and a streamer."""

from __future__ import annotations

import array
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    StreamingSpec,
    ToolCapabilities,
    WireError,
    encode_progress_line,
)
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES
from kigi_tool_runtime import OutputStream, Tool, ToolContext, ToolEvent, ToolResult, run_tool
from kigi_tool_runtime._producer._output import (
    LIMIT_MARKER,
    OMISSION_MARKER,
    Excerpt,
    ProgressLines,
)
from kigi_tool_runtime.testing import byte_sources, caps, schedules
from kigi_tool_runtime.testing._strategies import ScheduleStep, output_limits, tail_sizes

SPEC = StreamingSpec(subkind="emit_test", max_delta_bytes=8)


def payloads(frames: list[CustomProgress]) -> list[PartialResultPayload]:
    out = []
    for frame in frames:
        assert frame.subkind == "emit_test"
        assert isinstance(frame.payload, PartialResultPayload)
        out.append(frame.payload)
    return out


def text(frames: list[CustomProgress]) -> str:
    return "".join(p.delta for p in payloads(frames))


def test_write_drain_finish_streams_every_byte() -> None:
    """Writes drained on ticks and finished at the end reassemble the source."""
    stream = OutputStream(SPEC, capacity=64)
    frames = []
    for piece in (b"hello ", "wörld".encode()[:3], "wörld".encode()[3:], b"!"):
        stream.write(piece)
        frames += stream.drain()
    frames += stream.finish()
    assert text(frames) == "hello wörld!"
    assert stream.pending == 0
    assert stream.total == len("hello wörld!".encode())
    assert all(len(p.delta.encode()) <= 8 for p in payloads(frames))


def test_a_split_character_is_held_until_completed() -> None:
    """A drain never emits half a character; the next write completes it."""
    stream = OutputStream(SPEC, capacity=64)
    stream.write("€".encode()[:2])
    assert stream.drain() == []
    assert stream.pending == 2
    stream.write("€".encode()[2:])
    assert text(stream.drain()) == "€"


def test_finish_flushes_a_trailing_incomplete_character() -> None:
    """At the end, a trailing incomplete character becomes U+FFFD; nothing stays."""
    stream = OutputStream(SPEC, capacity=64)
    stream.write(b"ok\xe2\x82")
    assert text(stream.drain()) == "ok"
    assert text(stream.finish()) == "\ufffd"
    assert stream.pending == 0


def test_frame_ready_means_a_full_frame_is_pending() -> None:
    """``frame_ready`` turns true once a cap's worth of bytes waits."""
    stream = OutputStream(SPEC, capacity=64)
    stream.write(b"1234567")
    assert not stream.frame_ready
    stream.write(b"8")
    assert stream.frame_ready
    stream.drain()
    assert not stream.frame_ready


def test_frame_ready_with_a_cap_of_zero_needs_one_pending_byte() -> None:
    """With a cap of 0 (one character per frame) a frame is ready once a byte waits,
    never while nothing is pending."""
    stream = OutputStream(StreamingSpec(subkind="emit_test", max_delta_bytes=0), capacity=8)
    assert not stream.frame_ready
    stream.write(b"a")
    assert stream.frame_ready
    stream.drain()
    assert not stream.frame_ready


def test_a_slow_drain_reports_a_gap_and_memory_stays_bounded() -> None:
    """Bytes written past the capacity between drains become one gap; the tail and
    the head never hold more than their bounds."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=4)
    for _ in range(1000):
        stream.write(b"abcdefghij")
    frames = payloads(stream.drain())
    assert frames[0].gap
    assert sum(p.gap for p in frames) == 1
    assert stream.buffer.statistics().retained == 16
    assert stream.total == 10_000
    assert stream.excerpt().text.startswith("abcd")


def test_without_progress_nothing_is_emitted_but_everything_counts() -> None:
    """``progress=False``: drain and finish return nothing; totals still count."""
    stream = OutputStream(SPEC, capacity=64, progress=False)
    stream.write(b"x" * 100)
    assert not stream.frame_ready
    assert stream.drain() == []
    assert stream.finish() == []
    assert stream.total == 100


def _lines_of(frames: list[CustomProgress], call_id: str, seq: int, session: str | None) -> bytes:
    return b"".join(
        encode_progress_line(call_id, f.subkind, f.payload, seq=seq + i, session_id=session)
        for i, f in enumerate(frames)
    )


@given(
    source=byte_sources() | st.binary().map(lambda b: bytes(x & 0x7F for x in b)),
    cap=caps(),
    capacity=st.one_of(st.integers(4, 12), tail_sizes()),
    call_id=st.sampled_from(["call-1", 'c"%d\\', "é"]),
    session=st.none() | st.just("s%s"),
    first_seq=st.integers(0, 2**40),
    data=st.data(),
)
def test_drain_lines_writes_the_lines_of_drains_frames(
    source: bytes,
    cap: int | None,
    capacity: int,
    call_id: str,
    session: str | None,
    first_seq: int,
    data: st.DataObject,
) -> None:
    """Over any schedule, cap (0-4 included), tail (gaps) and limit (truncation,
    the notice, a cut character), drain_lines and finish_lines write exactly the
    lines of the frames drain and finish make on a twin stream, numbered on."""
    spec = StreamingSpec(subkind="emit_test", max_delta_bytes=cap)
    steps: list[ScheduleStep] = data.draw(schedules(source))
    limit = data.draw(output_limits(steps), label="limit")
    capacity = max(capacity, DEFAULT_MAX_DELTA_BYTES if cap is None else cap)
    frames_stream = OutputStream(spec, capacity=capacity, limit=limit)
    lines_stream = OutputStream(spec, capacity=capacity, limit=limit)
    seq = first_seq
    for step in steps:
        if step is None:
            frames = frames_stream.drain()
            got = lines_stream.drain_lines(call_id, seq=seq, session_id=session)
        else:
            frames_stream.write(step)
            lines_stream.write(step)
            continue
        assert got == ProgressLines(_lines_of(frames, call_id, seq, session), len(frames))
        assert lines_stream.frame_ready == frames_stream.frame_ready
        seq += got.frames
    frames = frames_stream.finish()
    got = lines_stream.finish_lines(call_id, seq=seq, session_id=session)
    assert got == ProgressLines(_lines_of(frames, call_id, seq, session), len(frames))
    assert lines_stream.pending == frames_stream.pending
    assert lines_stream.finish_lines(call_id, seq=seq + got.frames) == ProgressLines(b"", 0)


def test_drain_lines_refuses_bad_arguments_without_draining() -> None:
    """A bad id or seq is refused and nothing is drained: the next good call
    writes every frame that was due. A stream without progress writes nothing."""
    stream = OutputStream(SPEC, capacity=64)
    stream.write(b"0123456789")
    with pytest.raises(ValueError, match="u64"):
        stream.drain_lines("c", seq=2**64 - 1)  # room for one frame, two are due
    with pytest.raises(TypeError, match="`seq` must be an int"):
        stream.drain_lines("c", seq=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`tool_call_id` must be a str"):
        stream.drain_lines(7, seq=0)  # type: ignore[arg-type]
    with pytest.raises(WireError):
        stream.drain_lines("c\ud800", seq=0)
    assert stream.pending == 10
    with pytest.raises(ValueError, match="u64"):
        stream.finish_lines("c", seq=-1)
    stream.write(b"!")  # not finished by the refused call
    lines = stream.finish_lines("c", seq=0)
    assert lines.frames == 2
    assert lines.data.count(b"\n") == 2
    assert b'"delta":"01234567"' in lines.data
    assert b'"delta":"89!"' in lines.data
    quiet = OutputStream(SPEC, capacity=64, progress=False)
    quiet.write(b"x" * 100)
    assert quiet.drain_lines("c", seq=0) == ProgressLines(b"", 0)
    assert quiet.finish_lines("c", seq=0) == ProgressLines(b"", 0)
    with pytest.raises(RuntimeError, match="after finish"):
        quiet.write(b"x")


@pytest.mark.parametrize("progress", [True, False])
def test_drain_lines_checks_its_arguments_with_no_frame_due(progress: bool) -> None:
    """The arguments are checked on every call, not only when a frame is due: with
    nothing pending, or without progress, a bad id, session id or ``seq`` is still
    refused, and a refused ``finish_lines`` does not finish the stream."""
    stream = OutputStream(SPEC, capacity=64, progress=progress)
    refusals: list[tuple[type[Exception], str, dict[str, Any]]] = [
        (ValueError, "u64", {"seq": 2**64}),
        (ValueError, "u64", {"seq": -1}),
        (TypeError, "`seq` must be an int", {"seq": True}),
        (TypeError, "`tool_call_id` must be a str", {"tool_call_id": 7}),
        (TypeError, "`session_id` must be a str or None", {"session_id": b"s"}),
        (WireError, "cannot encode", {"tool_call_id": "c\ud800"}),
        (WireError, "cannot encode", {"session_id": "s\udfff"}),
    ]
    for error, match, changes in refusals:
        arguments: dict[str, Any] = {"tool_call_id": "c", "seq": 0, **changes}
        with pytest.raises(error, match=match):
            stream.drain_lines(**arguments)
        with pytest.raises(error, match=match):
            stream.finish_lines(**arguments)
    assert stream.write(b"ok") == 2
    assert stream.drain_lines("c", seq=2**64 - 1).frames == int(progress)


def test_the_hard_limit_truncates_the_stream() -> None:
    """Bytes past ``limit`` are refused and every later frame says ``truncated``."""
    stream = OutputStream(SPEC, capacity=64, limit=5)
    assert stream.write(b"abcdefgh") == 5
    frames = payloads(stream.finish())
    assert "".join(p.delta for p in frames) == "abcde"
    assert all(p.truncated for p in frames)
    assert stream.truncated
    excerpt = stream.excerpt()
    assert excerpt == Excerpt("abcde" + LIMIT_MARKER.format(dropped=3), 5, 0, True, 3)


@pytest.mark.parametrize("limit", [0, 5])
def test_a_write_refused_whole_at_the_limit_ends_the_stream_with_a_notice(limit: int) -> None:
    """Output that ends exactly at ``limit`` (or a limit of 0), then a write refused
    whole: finish ends with the truncation notice, once, so the stream says
    ``truncated``; without progress it emits nothing."""
    stream = OutputStream(SPEC, capacity=64, limit=limit)
    assert stream.write(b"abcde"[:limit]) == limit
    frames = payloads(stream.drain())
    assert not any(p.truncated for p in frames)
    assert stream.write(b"fgh") == 0
    assert stream.drain() == []
    frames += payloads(stream.finish())
    assert "".join(p.delta for p in frames) == "abcde"[:limit]
    assert frames[-1] == PartialResultPayload(
        delta="", total_bytes=limit, truncated=True, gap=False
    )
    assert stream.finish() == []
    quiet = OutputStream(SPEC, capacity=64, limit=limit, progress=False)
    quiet.write(b"abcdefgh")
    assert quiet.finish() == []
    assert quiet.truncated


@pytest.mark.parametrize(
    "data",
    [
        memoryview(array.array("H", [0x6261, 0x6463, 0x6665, 0x6867])),
        memoryview(b"a-b-c-d-e-f-g-h-")[::2],
        memoryview(b"abcdefgh").cast("B", (2, 4)),
    ],
    ids=["words", "strided", "two-dimensional"],
)
def test_the_head_counts_bytes_of_any_bytes_like(data: memoryview) -> None:
    """The head keeps exactly ``head_bytes`` bytes of any bytes-like write, not
    ``head_bytes`` items of a wider or strided view."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=3)
    assert stream.write(data) == 8
    assert stream.write(b"ijklmnopqrstuvwxyz") == 18
    assert stream.excerpt() == Excerpt(
        "abc" + OMISSION_MARKER.format(omitted=7) + "klmnopqrstuvwxyz", 26, 7, False
    )


def test_bad_construction_is_refused_with_the_reason() -> None:
    """A tail smaller than one frame, a negative head, limit or cap, or a capacity
    that is not an int, is refused with the reason."""
    with pytest.raises(ValueError, match="capacity 7 is below the spec's max_delta_bytes 8"):
        OutputStream(SPEC, capacity=7)
    with pytest.raises(ValueError, match="head_bytes must be >= 0, got -1"):
        OutputStream(SPEC, capacity=8, head_bytes=-1)
    with pytest.raises(ValueError, match="limit must be >= 0 or None, got -1"):
        OutputStream(SPEC, capacity=8, limit=-1)
    with pytest.raises(ValueError, match=r"`max_delta_bytes` = -1 is outside the u32 range"):
        StreamingSpec(subkind="emit_test", max_delta_bytes=-1)  # no such spec reaches a stream
    with pytest.raises(TypeError, match="capacity must be an int, not float"):
        OutputStream(SPEC, capacity=8.0)  # type: ignore[arg-type]


def test_writing_after_finish_is_refused() -> None:
    """A finished stream takes no more bytes."""
    stream = OutputStream(SPEC, capacity=8)
    stream.finish()
    with pytest.raises(RuntimeError, match="write\\(\\) after finish\\(\\)"):
        stream.write(b"x")


# -- excerpt ---------------------------------------------------------------------------


def test_an_excerpt_that_fits_is_whole() -> None:
    """Output within the budget comes back whole, nothing omitted."""
    stream = OutputStream(SPEC, capacity=8, head_bytes=8)
    stream.write(b"0123456789abcdef")
    assert stream.excerpt(16) == Excerpt("0123456789abcdef", 16, 0, False)


def test_an_excerpt_over_budget_keeps_head_and_tail_around_the_marker() -> None:
    """Over the budget: the first half, the marker with the omitted count, the end."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=8)
    stream.write(b"".join(b"%03d," % i for i in range(100)))
    excerpt = stream.excerpt(16)
    assert excerpt.omitted == 400 - 16
    assert excerpt.text == "000,001," + OMISSION_MARKER.format(omitted=384) + "098,099,"
    assert "[... 384 bytes of output omitted ...]" in excerpt.text


def test_a_negative_excerpt_budget_is_refused() -> None:
    """``excerpt(max_bytes)`` below 0 is a ValueError, not a garbled excerpt."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=4)
    stream.write(b"0123456789" * 4)
    with pytest.raises(ValueError, match="max_bytes must be >= 0 or None, got -1"):
        stream.excerpt(-1)
    assert stream.excerpt(0) == Excerpt(OMISSION_MARKER.format(omitted=40), 40, 40, False)


def test_a_generous_budget_still_marks_bytes_lost_between_head_and_tail() -> None:
    """Bytes that left the tail before the excerpt are marked as omitted even when
    ``max_bytes`` would fit the whole output."""
    stream = OutputStream(SPEC, capacity=8, head_bytes=2)
    stream.write(b"0123456789abcdef")
    assert stream.excerpt(1000) == Excerpt(
        "01" + OMISSION_MARKER.format(omitted=6) + "89abcdef", 16, 6, False
    )


def test_the_head_never_keeps_bytes_refused_at_the_limit() -> None:
    """A head larger than the limit keeps only the accepted bytes."""
    stream = OutputStream(SPEC, capacity=8, limit=3, head_bytes=10)
    assert stream.write(b"abcdef") == 3
    assert stream.excerpt() == Excerpt("abc" + LIMIT_MARKER.format(dropped=3), 3, 0, True, 3)


@pytest.mark.parametrize("budget", range(8, 24))
def test_an_excerpt_head_never_ends_inside_a_four_byte_character(budget: int) -> None:
    """Whatever the budget, the head stops before a 4-byte character it cannot hold
    whole (three of its bytes included), and no U+FFFD appears."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=16)
    stream.write(("😀" * 20).encode())
    excerpt = stream.excerpt(budget)
    head, tail = excerpt.text.split(OMISSION_MARKER.format(omitted=excerpt.omitted))
    assert head == "😀" * (budget // 2 // 4)
    assert tail == "😀" * ((budget - 4 * len(head)) // 4)
    assert "\ufffd" not in excerpt.text


def test_an_excerpt_never_cuts_a_character() -> None:
    """The head is not cut inside a character, nor does the tail start inside one."""
    stream = OutputStream(SPEC, capacity=16, head_bytes=8)
    stream.write(("€" * 40).encode())
    excerpt = stream.excerpt(16)
    head, tail = excerpt.text.split(OMISSION_MARKER.format(omitted=excerpt.omitted))
    assert head == "€€"
    assert tail == "€" * 3
    assert "\ufffd" not in excerpt.text
    assert excerpt.omitted == 120 - 6 - 9


@given(st.data(), byte_sources())
def test_any_bytes_on_any_schedule_reassemble_like_replace(
    data: st.DataObject, source: bytes
) -> None:
    """With room to spare, any bytes written on any write/tick schedule reassemble to
    ``source.decode('utf-8', 'replace')``, and the excerpt equals it too."""
    stream = OutputStream(SPEC, capacity=max(len(source), 8), head_bytes=len(source))
    frames = []
    for step in data.draw(schedules(source)):
        if step is None:
            frames += stream.drain()
        else:
            stream.write(step)
    frames += stream.finish()
    expected = source.decode("utf-8", "replace")
    assert text(frames) == expected
    assert stream.excerpt().text == expected


class LinesArgs(msgspec.Struct):
    count: int


class Lines(Tool[LinesArgs]):
    """A streaming tool as an author writes one: write, drain, finish."""

    id = "lines"
    args_type = LinesArgs
    capabilities = ToolCapabilities(streaming=SPEC)

    async def execute(self, ctx: ToolContext, args: LinesArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(SPEC, capacity=1024, progress=ctx.wants_progress)
        for i in range(args.count):
            stream.write(b"line %d\n" % i)
            for frame in stream.drain():
                yield frame
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=stream.excerpt().text)


@pytest.mark.parametrize("wants_progress", [True, False])
def test_a_tool_streams_with_an_output_stream_in_two_lines(wants_progress: bool) -> None:
    """A tool built on ``OutputStream`` streams its output through ``run_tool``, or
    skips the stream when progress is not wanted, and returns the same result."""
    expected = "".join(f"line {i}\n" for i in range(50))

    async def main() -> list[ToolEvent]:
        ctx = ToolContext("c", wants_progress=wants_progress)
        return [item async for item in run_tool(Lines(), {"count": 50}, ctx=ctx)]

    items = asyncio.run(main())
    assert items[-1] == ToolResult(value=expected)
    progress = [i for i in items[:-1] if isinstance(i, CustomProgress)]
    assert text(progress) == (expected if wants_progress else "")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"capacity": "64"}, "capacity"),
        ({"capacity": 64.0}, "capacity"),
        ({"capacity": 64, "limit": "10"}, "limit"),
        ({"capacity": 64, "head_bytes": "3"}, "head_bytes"),
    ],
)
def test_output_stream_names_an_argument_of_the_wrong_type(
    kwargs: dict[str, object], name: str
) -> None:
    """A wrong-typed argument raises TypeError naming it, not a comparison error."""
    with pytest.raises(TypeError, match=f"^{name} must be an int"):
        OutputStream(StreamingSpec(subkind="x", max_delta_bytes=8), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^spec must be a StreamingSpec"):
        OutputStream({"subkind": "x"}, capacity=64)  # type: ignore[arg-type]
