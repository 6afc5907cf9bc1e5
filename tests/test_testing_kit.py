"""Tests for the testing kit: ``check_stream``, ``collect``, ``fuzz_streaming_tool``
and the frame strategies; the kit catches broken tools and passes the SDK's own."""

from __future__ import annotations

import asyncio
import codecs
import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import kigi_tool_runtime.testing as kit
from kigi_tool_protocol import (
    CustomProgress,
    DecodeError,
    PartialResultPayload,
    StreamingSpec,
    TextProgress,
    ToolCallParams,
    ToolCallProgressFrame,
    ToolCapabilities,
    ToolErrorWire,
    ToolProgress,
    json_codec,
)
from kigi_tool_protocol._codec import convert
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES
from kigi_tool_protocol._progress import ContentProgress
from kigi_tool_runtime import (
    CallProgress,
    Client,
    DeltaStreamer,
    OutputStream,
    ShellArgs,
    ShellOutcome,
    ShellTool,
    TailBuffer,
    Tool,
    ToolContext,
    ToolError,
    ToolErrorKind,
    ToolEvent,
    ToolResult,
)
from kigi_tool_runtime._consumer._loss import MAX_HELD_BYTES
from kigi_tool_runtime._tools._shell import DEFAULT_TAIL_CAPACITY
from kigi_tool_runtime.testing import (
    CheckedStream,
    Collected,
    StreamCheckError,
    _check,
    _collect,
    _frame_strategies,
    _fuzz,
    _wire_strategies,
    byte_sources,
    caps,
    check_stream,
    collect,
    collect_async,
    fuzz_streaming_tool,
    python_writer_argv,
    schedules,
    utf8_text_sources,
    wire_values,
)
from kigi_tool_runtime.testing._check import EXCERPT_CHARS, LostSpan
from kigi_tool_runtime.testing._consumer_strategies import ProducerRun, producer_runs
from kigi_tool_runtime.testing._frame_strategies import (
    MALFORMED_PAYLOADS,
    malformed_payloads,
    progress_frames,
    tool_call_frames,
)
from kigi_tool_runtime.testing._fuzz import WRITER_ARG_BYTES, WRITER_TICK_S
from kigi_tool_runtime.testing._strategies import ScheduleStep, tail_sizes
from kigi_tool_runtime.testing._wire_strategies import WIRE_STRATEGIES, json_values

ROOT = Path(__file__).resolve().parents[1]

# -- tools to run the kit against -----------------------------------------------

#: The cap of the emitting tools below: small, so frames split often.
EMIT_CAP = 8
EMIT_SPEC = StreamingSpec(subkind="emit_chunk", max_delta_bytes=EMIT_CAP)


class EmitArgs(msgspec.Struct, frozen=True):
    """Bytes to emit: a write of bytes, or ``None`` for a tick."""

    steps: list[bytes | None]


def emit_args(source: bytes, steps: list[ScheduleStep]) -> EmitArgs:
    return EmitArgs(steps=list(steps))


def emit(payload: PartialResultPayload) -> CustomProgress:
    return CustomProgress(subkind=EMIT_SPEC.subkind, payload=payload)


class EmitTool(Tool[EmitArgs]):
    """A correct streaming tool: an OutputStream drained on every tick and
    finished at the end."""

    id = "emit"
    args_type = EmitArgs
    capabilities = ToolCapabilities(streaming=EMIT_SPEC)

    def __init__(self, capacity: int = 1 << 20) -> None:
        self.capacity = capacity

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(EMIT_SPEC, capacity=self.capacity)
        for step in args.steps:
            if step is None:
                for frame in stream.drain():
                    yield frame
            else:
                stream.write(step)
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=stream.total)


class PerChunkDecodeTool(EmitTool):
    """Broken: decodes each write on its own, so a character split between
    writes becomes U+FFFD. Its cap is huge so that is its only fault."""

    id = "per_chunk"
    capabilities = ToolCapabilities(
        streaming=StreamingSpec(subkind="emit_chunk", max_delta_bytes=2**32 - 1)
    )

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        total = 0
        for step in args.steps:
            if step:
                total += len(step)
                delta = step.decode("utf-8", "replace")
                yield emit(PartialResultPayload(delta=delta, total_bytes=total))
        yield ToolResult(value=total)


class NoFinishTool(EmitTool):
    """Broken: drains on ticks but never finishes, so the backlog at exit (and
    a held trailing character) is stranded."""

    id = "no_finish"

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(EMIT_SPEC, capacity=self.capacity)
        for step in args.steps:
            if step is None:
                for frame in stream.drain():
                    yield frame
            else:
                stream.write(step)
        yield ToolResult(value=stream.total)


class OverCapTool(EmitTool):
    """Broken: declares a cap of 8 but cuts frames at 64 bytes."""

    id = "over_cap"

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(StreamingSpec(subkind="emit_chunk", max_delta_bytes=64), capacity=64)
        for step in args.steps:
            if step is not None:
                stream.write(step)
        for frame in stream.finish():
            yield frame
        yield ToolResult(value=stream.total)


class HiddenGapTool(EmitTool):
    """Broken: a small tail that overflows, and gap frames passed on with
    ``gap=false``, so the loss is hidden."""

    id = "hidden_gap"

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(EMIT_SPEC, capacity=EMIT_CAP)
        for step in args.steps:
            if step is None:
                for frame in stream.drain():
                    yield hide_gap(frame)
            else:
                stream.write(step)
        for frame in stream.finish():
            yield hide_gap(frame)
        yield ToolResult(value=stream.total)


def hide_gap(frame: CustomProgress) -> CustomProgress:
    payload = frame.payload
    assert isinstance(payload, PartialResultPayload)
    return emit(msgspec.structs.replace(payload, gap=False))


class QuietTool(Tool[EmitArgs]):
    """Not a streaming tool at all."""

    id = "quiet"
    args_type = EmitArgs

    async def run(self, ctx: ToolContext, args: EmitArgs) -> int:
        return len(args.steps)


class FailingTool(EmitTool):
    """Streams one frame, then fails."""

    id = "failing"

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        yield emit(PartialResultPayload(delta="a", total_bytes=1))
        raise ToolError.execution("disk on fire")


class ChattyTool(EmitTool):
    """Yields two more frames after its terminal."""

    id = "chatty"

    async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
        yield TextProgress(text="starting")
        yield emit(PartialResultPayload(delta="ab", total_bytes=2))
        yield ToolResult(value=2)
        yield emit(PartialResultPayload(delta="c", total_bytes=3))
        yield emit(PartialResultPayload(delta="d", total_bytes=4))


#: Settings for the runs that must find a broken tool's fault: enough examples
#: that the search always succeeds, derandomized so it does every time, no
#: database (the failures are expected), and one bug reported.
FIND_BUG = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def stream_core(
    source: bytes,
    steps: list[ScheduleStep],
    cap: int | None,
    capacity: int,
    limit: int | None = None,
) -> tuple[list[CustomProgress], TailBuffer]:
    """The streaming core driven directly: drain on every tick, finish at the end."""
    buffer = TailBuffer(capacity, limit)
    streamer = DeltaStreamer(StreamingSpec(subkind="core", max_delta_bytes=cap))
    frames: list[CustomProgress] = []
    for step in steps:
        if step is None:
            frames += streamer.drain_buffer(buffer)
        else:
            buffer.write(step)
    frames += streamer.finish_buffer(buffer)
    return frames, buffer


def frame(delta: str, total: int, *, gap: bool = False, truncated: bool = False) -> dict[str, Any]:
    return {"delta": delta, "total_bytes": total, "gap": gap, "truncated": truncated}


def fails(match: str, frames: list[Any], source: bytes, **kw: Any) -> StreamCheckError:
    with pytest.raises(StreamCheckError, match=match) as caught:
        check_stream(frames, source, **kw)
    return caught.value


# -- the kit passes the SDK's own streaming -------------------------------------


@given(
    source=st.one_of(byte_sources(), utf8_text_sources()),
    cap=caps(),
    capacity=st.one_of(st.integers(4, 40), tail_sizes()),
    limit=st.one_of(st.none(), st.integers(0, 4000)),
    known=st.booleans(),
    data=st.data(),
)
def test_core_passes_the_kit(
    source: bytes,
    cap: int | None,
    capacity: int,
    limit: int | None,
    known: bool,
    data: st.DataObject,
) -> None:
    """TailBuffer and DeltaStreamer keep every invariant over any source, cap, tail,
    limit and schedule (gaps placed with or without knowing the tail), say
    ``truncated`` exactly when the limit refused a byte, and a lossless stream is
    exactly the lossy decode, but for a character the limit cut in half: that
    is left unsent, never a U+FFFD the source did not have."""
    steps = data.draw(schedules(source))
    frames, buffer = stream_core(source, steps, cap, capacity, limit)
    tail = capacity if known else None
    checked = check_stream(
        frames, source, cap=cap, tail_capacity=tail, total=buffer.total, truncated=buffer.truncated
    )
    assert checked.truncated == buffer.truncated
    assert checked.frames == len(frames)
    assert checked.total_bytes == (buffer.total if frames else 0)
    if not checked.lost:
        # The start of a character the limit cut in half stays unsent.
        whole, _ = codecs.utf_8_decode(source[: buffer.total], "replace", not buffer._cut_character)
        assert checked.text == whole


@given(run=producer_runs())
def test_producer_runs_pass_the_kit(run: ProducerRun) -> None:
    """Every consumer-side producer run is a valid stream, and the kit counts the
    same lost bytes the run recorded for valid text."""
    checked = check_stream(run.frames, run.source, cap=run.cap, tail_capacity=run.capacity)
    if all(loss is not None for loss in run.losses):
        assert checked.lost_bytes == sum(loss or 0 for loss in run.losses)


def test_emit_tool_passes_with_gaps_at_a_small_tail() -> None:
    """A correct tool whose tail overflows passes, and the lost bytes are counted."""
    source = b"".join(bytes([65 + i % 26]) for i in range(100))
    steps: list[ScheduleStep] = [source[:30], None, source[30:90], None, source[90:]]
    got = collect(EmitTool(capacity=EMIT_CAP), EmitArgs(steps=steps))
    checked = check_stream(got.frames, source, cap=EMIT_CAP, tail_capacity=EMIT_CAP)
    # Each write overflows the 8-byte tail: only its last 8 bytes survive.
    assert checked.lost == (LostSpan(0, 0, 22), LostSpan(1, 30, 82), LostSpan(2, 90, 92))
    assert checked.lost_bytes == 76
    assert checked.text == (source[22:30] + source[82:90] + source[92:]).decode()


# A correct in-process streaming tool passes the fuzzer over any bytes.
test_emit_tool_fuzzed = fuzz_streaming_tool(EmitTool(), emit_args)

# A correct tool with a tail of one frame passes too, gaps and all.
test_emit_tool_with_small_tail_fuzzed = fuzz_streaming_tool(
    EmitTool(capacity=EMIT_CAP), emit_args, tail_capacity=EMIT_CAP
)


def _shell_result(source: bytes, got: Collected, checked: CheckedStream) -> None:
    outcome = got.result
    assert isinstance(outcome, ShellOutcome)
    assert (outcome.exit_code, outcome.total_bytes) == (0, len(source))
    assert checked.text == source.decode("utf-8", "replace")


# The shell tool streams what a real child writes in flushed pieces, losslessly.
test_shell_tool_fuzzed = fuzz_streaming_tool(
    ShellTool(tick=0.01),
    lambda source, steps: ShellArgs(command=python_writer_argv(steps)),
    tail_capacity=DEFAULT_TAIL_CAPACITY,
    lossless=True,
    max_examples=12,
    check_result=_shell_result,
)

# With a 5-byte cap and a 300-byte limit the shell tool still keeps every rule.
test_shell_tool_with_small_cap_and_limit_fuzzed = fuzz_streaming_tool(
    ShellTool(tick=0.01, max_delta_bytes=5, limit=300),
    lambda source, steps: ShellArgs(command=python_writer_argv(steps)),
    tail_capacity=DEFAULT_TAIL_CAPACITY,
    limit=300,
    lossless=True,
    max_examples=8,
)


#: Sources sent through a real server and client: 1-4-byte characters, invalid
#: and truncated sequences (one at the very end), and more than two full frames.
WIRE_SOURCES = (
    "grüße ✓ 😀 ".encode() * 50,
    b"ok \xe2\x82 bad \xff\xfe \xed\xa0\x80 tail \xf0\x9f\x98",
    b"x" * 40_000,
)
#: Pieces each wire source is written in (cut at odd offsets, so mid-character).
WIRE_PIECES = 9
SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]


def test_frames_over_the_wire_pass_the_kit() -> None:
    """The shell tool's frames, served over JSON-RPC and decoded by the client,
    keep every rule and reassemble to the lossy decode of what the child wrote."""

    async def body() -> list[CheckedStream]:
        checked = []
        async with await Client.spawn(SERVE) as client:
            for source in WIRE_SOURCES:
                cuts = [len(source) * i // WIRE_PIECES + i % 2 for i in range(WIRE_PIECES + 1)]
                steps: list[ScheduleStep] = []
                for start, end in itertools.pairwise([0, *cuts[1:-1], len(source)]):
                    steps += [source[start:end], None]
                call = client.call("bash", ShellArgs(command=python_writer_argv(steps)))
                frames = [item.frame async for item in call if isinstance(item, CallProgress)]
                checked.append(
                    check_stream(
                        frames,
                        source,
                        subkind="bash_output_chunk",
                        tail_capacity=DEFAULT_TAIL_CAPACITY,
                        lossless=True,
                    )
                )
        return checked

    results = asyncio.run(asyncio.wait_for(body(), timeout=120))
    assert [r.text for r in results] == [s.decode("utf-8", "replace") for s in WIRE_SOURCES]
    assert results[2].frames >= 3


# -- the kit catches broken tools -----------------------------------------------


def test_catches_per_chunk_decoding() -> None:
    """A tool that decodes writes separately fails on a character split between
    writes, naming the frame and the U+FFFD it made."""
    steps: list[ScheduleStep] = [b"caf\xc3", b"\xa9 ok"]
    got = collect(PerChunkDecodeTool(), EmitArgs(steps=steps))
    error = fails(
        r"^frame 0: U\+FFFD at character 3 \(source byte 3\) where the source has 'é'",
        list(got.frames),
        b"caf\xc3\xa9 ok",
    )
    assert error.frame == 0
    assert "split between chunks" in str(error)
    with pytest.raises(StreamCheckError, match=r"^frame \d+: U\+FFFD at character \d+"):
        fuzz_streaming_tool(
            PerChunkDecodeTool(),
            emit_args,
            sources=utf8_text_sources(),
            hypothesis_settings=FIND_BUG,
        )()


def test_catches_a_stranded_backlog() -> None:
    """A tool that never finishes strands its backlog: the last frame is named
    with the bytes never delivered."""
    source = b"0123456789abcdef!"
    got = collect(NoFinishTool(), EmitArgs(steps=[source[:16], None, source[16:]]))
    fails(
        r"^frame 1: the stream ends after this frame at source byte 16 of 17: 1 bytes"
        r" were neither delivered nor reported as lost",
        list(got.frames),
        source,
        cap=EMIT_CAP,
    )
    with pytest.raises(
        StreamCheckError,
        match=r"^(frame \d+: the stream ends after this frame|stream: no partial-result frames)",
    ):
        fuzz_streaming_tool(NoFinishTool(), emit_args, hypothesis_settings=FIND_BUG)()


def test_catches_frames_over_the_cap() -> None:
    """A tool whose frames exceed its declared cap fails on its first long frame."""
    source = b"x" * 20
    got = collect(OverCapTool(), EmitArgs(steps=[source]))
    fails(
        r"^frame 0: consumes 20 source bytes, over the cap of 8, and is 20 characters",
        list(got.frames),
        source,
        cap=EMIT_CAP,
    )
    with pytest.raises(StreamCheckError, match=r"^frame \d+: consumes \d+ source bytes, over"):
        fuzz_streaming_tool(OverCapTool(), emit_args, hypothesis_settings=FIND_BUG)()


def test_catches_a_hidden_gap() -> None:
    """A tool that skips bytes without ``gap=true`` fails on the frame after the
    loss, which says how many bytes were skipped."""
    source = bytes(range(65, 91))  # A..Z
    got = collect(HiddenGapTool(), EmitArgs(steps=[source[:4], None, source[4:], None]))
    fails(
        r"^frame 1: not a gap frame, but its delta is the source at byte 18, not at 4:"
        r" 14 bytes were skipped without gap=true",
        list(got.frames),
        source,
        cap=EMIT_CAP,
    )
    with pytest.raises(
        StreamCheckError,
        match=r"^frame \d+: (not a gap frame, but|the stream ends after this frame|delta differs)",
    ):
        fuzz_streaming_tool(
            HiddenGapTool(), emit_args, sources=utf8_text_sources(), hypothesis_settings=FIND_BUG
        )()


# -- check_stream, rule by rule -------------------------------------------------


def test_accepts_every_frame_shape() -> None:
    """CustomProgress, dict payloads, ToolCallProgressFrames and bare payloads
    are judged alike; text and content progress is skipped."""
    payload = PartialResultPayload(delta="hé", total_bytes=3)
    shapes: list[Any] = [
        emit(payload),
        CustomProgress(subkind="emit_chunk", payload=frame("hé", 3)),
        ToolCallProgressFrame(tool_call_id="c", kind="emit_chunk", body=payload),
        ToolCallProgressFrame(tool_call_id="c", kind="emit_chunk", body=frame("hé", 3)),
        payload,
        frame("hé", 3),
    ]
    for shape in shapes:
        checked = check_stream([TextProgress(text="x"), shape], "hé".encode())
        assert checked == CheckedStream("hé", 1, 3, (), False)
    others = [
        ContentProgress(blocks=[]),
        ToolCallProgressFrame(tool_call_id="c", kind="text", body={"text": "x"}),
        ToolCallProgressFrame(tool_call_id="c", kind="content", body=[]),
    ]
    assert check_stream([*others, shapes[0]], "hé".encode()).frames == 1


def test_transport_drops_are_named() -> None:
    """A fault after a frame that says the server dropped frames names that
    frame's dropped_count as the likely cause."""
    frames = [
        ToolCallProgressFrame(tool_call_id="c", kind="k", body=frame("ab", 2)),
        ToolCallProgressFrame(tool_call_id="c", kind="k", body=frame("ef", 6), dropped_count=1),
    ]
    error = fails(
        r"^frame 1: .*; frame 1 has dropped_count 1: the transport dropped frames before it",
        frames,
        b"abcdef",
    )
    assert error.frame == 1
    assert "  frame: delta='ef'" in error.detail
    # A fault before the drop is reported as it is.
    frames[0] = ToolCallProgressFrame(tool_call_id="c", kind="k", body=frame("xb", 2))
    error = fails(r"^frame 0: delta differs", frames, b"abcdef")
    assert "dropped_count" not in str(error)


def test_subkind_selects_frames() -> None:
    """With a subkind, frames of other subkinds are not judged."""
    frames = [
        CustomProgress(subkind="other", payload={"anything": True}),
        ToolCallProgressFrame(tool_call_id="c", kind="other", body=None),
        emit(PartialResultPayload(delta="ok", total_bytes=2)),
    ]
    assert check_stream(frames, b"ok", subkind="emit_chunk").text == "ok"
    fails(r"^frame 0: payload does not decode as a PartialResultPayload", frames, b"ok")


@given(bad=malformed_payloads())
def test_rejects_malformed_payloads(bad: tuple[Any, str]) -> None:
    """A payload the strict decode rejects is named, with the decode's reason."""
    body, _ = bad
    error = fails(
        r"^frame 1: payload does not decode as a PartialResultPayload: ",
        [frame("a", 1), ToolCallProgressFrame(tool_call_id="c", kind="k", body=body)],
        b"ab",
    )
    assert error.frame == 1


def test_rejects_frames_of_other_types() -> None:
    """Something that cannot carry a partial result is named."""
    fails(r"^frame 0: a int is not a partial-result frame", [7], b"")
    fails(
        r"^frame 0: payload does not decode as a PartialResultPayload: Expected `object`",
        [CustomProgress(subkind="s", payload=[1])],
        b"",
    )


def test_empty_source_and_no_frames() -> None:
    """No frames for an empty source is a valid stream; for a non-empty one it is not."""
    assert check_stream([], b"") == CheckedStream("", 0, 0, (), False)
    error = fails(
        r"^stream: no partial-result frames for a source of 3 bytes: none of them was"
        r" delivered or reported as lost",
        [],
        b"abc",
    )
    assert error.frame is None
    assert check_stream([], b"abc", complete=False).frames == 0


def test_incomplete_streams_are_prefixes() -> None:
    """With ``complete=False`` a stream that stops early passes; it still may not
    skip or invent bytes."""
    assert check_stream([frame("ab", 2)], b"abcd", complete=False).text == "ab"
    fails(r"^frame 0: delta differs", [frame("ax", 2)], b"abcd", complete=False)


def test_lossy_text_is_the_replace_decode() -> None:
    """Invalid bytes stream as one U+FFFD per maximal subpart, in any frame split."""
    source = b"a\xe2\x82b\xff\xf0\x9f\x98\x80\xed\xa0\x80z"
    expected = source.decode("utf-8", "replace")
    for cut in range(len(expected) + 1):
        head, tail = expected[:cut], expected[cut:]
        # The head is a frame of its own write: at the total its bytes reach.
        reach = max(
            k for k in range(len(source) + 1) if source[:k].decode("utf-8", "replace") == head
        )
        frames = [frame(head, reach)] if head else []
        frames += [frame(tail, len(source))] if tail else []
        assert check_stream(frames, source, cap=len(source)).text == expected
    # Two U+FFFD for one maximal subpart is a different text.
    fails(
        r"^frame 0: U\+FFFD at character 2 \(source byte 3\) where the source has 'b'",
        [frame("a\ufffd\ufffdb", 4)],
        b"a\xe2\x82b",
    )


def test_long_lossy_deltas_are_compared_whole() -> None:
    """A lossy delta is probed by its first characters, then compared whole: a
    difference past the probe is found and placed exactly."""
    source = b"\xff" * 20 + b"ab" + b"\xff" * 20
    assert (
        check_stream([frame("\ufffd" * 20 + "ab" + "\ufffd" * 20, 42)], source, cap=42).frames == 1
    )
    fails(
        r"^frame 0: delta differs from the source at character 20 \(source byte 20\):"
        r" expected 'ab",
        [frame("\ufffd" * 20 + "xb" + "\ufffd" * 20, 42)],
        source,
        cap=42,
    )
    fails(
        r"^frame 0: delta differs from the source at character 3 \(source byte 3\)",
        [frame("\ufffd" * 3 + "a" + "\ufffd" * 38, 42)],
        source,
        cap=42,
    )


def test_trailing_incomplete_character_flushes_only_at_the_end() -> None:
    """A frame may end in U+FFFD for an incomplete character only when the
    source really ends there; before that it must be held."""
    assert check_stream([frame("a\ufffd", 3)], b"a\xe2\x82").text == "a\ufffd"
    fails(
        r"^frame 0: U\+FFFD at character 1 \(source byte 1\) where the source has '€'",
        [frame("a\ufffd", 3), frame("\ufffd", 4)],
        b"a\xe2\x82\xac",
    )


def test_valid_text_never_gains_replacement_characters() -> None:
    """A literal U+FFFD in the source streams as itself; one it lacks is named."""
    source = "x\ufffdy".encode()
    assert check_stream([frame("x\ufffdy", len(source))], source).text == "x\ufffdy"
    fails(
        r"^frame 0: U\+FFFD at character 1 \(source byte 1\) where the source has 'é'",
        [frame("x\ufffd", 3)],
        "xé".encode(),
    )


def test_cap_allows_one_long_character() -> None:
    """A frame over the cap passes only when it is one character; cap 0 means one
    character per frame."""
    source = "😀é".encode()
    frames = [frame("😀", 6), frame("é", 6)]
    assert check_stream(frames, source, cap=0).frames == 2
    assert check_stream(frames, source, cap=1).frames == 2
    fails(
        r"^frame 0: consumes 6 source bytes, over the cap of 5, and is 2 characters",
        [frame("😀é", 6)],
        source,
        cap=5,
    )
    assert check_stream([frame("😀é", 6)], source, cap=6).frames == 1
    # The default cap is 16 KiB.
    big = b"z" * (DEFAULT_MAX_DELTA_BYTES + 1)
    fails(r"over the cap of 16384", [frame(big.decode(), len(big))], big)


def test_empty_frames_only_for_gaps() -> None:
    """An empty delta without ``gap`` is named."""
    fails(
        r"^frame 1: empty delta in a frame that is not a gap frame",
        [frame("a", 1), frame("", 1)],
        b"a",
    )


def test_the_truncation_notice_ends_a_truncated_stream() -> None:
    """An empty, truncated, non-gap last frame at the same total as the one before
    (0 when alone) is the truncation notice: accepted, and it satisfies
    ``truncated=True``; the SDK's core makes exactly it."""
    source = b"abcdef"
    notice = frame("", 4, truncated=True)
    checked = check_stream(
        [frame("ab", 2), frame("cd", 4), notice], source, total=4, truncated=True
    )
    assert (checked.text, checked.frames, checked.total_bytes) == ("abcd", 3, 4)
    assert checked.truncated
    alone = check_stream([frame("", 0, truncated=True)], source, total=0, truncated=True)
    assert (alone.text, alone.frames, alone.truncated) == ("", 1, True)
    after_gap = [frame("ab", 2), frame("f", 6, gap=True), frame("", 6, truncated=True)]
    assert check_stream(after_gap, source + b"gh", total=6, truncated=True).lost_bytes == 3
    frames, buffer = stream_core(source, [source[:4], None, source[4:]], 2, 8, limit=4)
    assert check_stream(frames, source, cap=2, total=4, truncated=True).frames == len(frames)
    assert buffer.truncated


def test_an_empty_frame_that_is_not_the_notice_is_named() -> None:
    """An empty non-gap frame anywhere but at the end, or at the end without being
    the notice (not truncated, a moved total, truncated said before, alone at a
    total past 0), is named with the reason."""
    source = b"abcdef"
    fails(
        r"^frame 1: empty delta in a frame that is not a gap frame \(rule 2",
        [frame("ab", 2), frame("", 4, truncated=True), frame("cd", 4, truncated=True)],
        source,
        total=4,
    )
    fails(
        r"^frame 1: empty delta in a frame that is not a gap frame, and not a truncation"
        r" notice: its total_bytes 4 is not the 2 of the frame before it",
        [frame("ab", 2), frame("", 4, truncated=True)],
        source,
        total=4,
    )
    fails(
        r"^frame 1: empty delta .* not a truncation notice: an earlier frame already said",
        [frame("ab", 2, truncated=True), frame("", 2, truncated=True)],
        source,
        total=2,
    )
    fails(
        r"^frame 0: empty delta .* notice: its total_bytes 2 is not 0, yet no frame came before",
        [frame("", 2, truncated=True)],
        source,
        total=2,
    )
    fails(
        r"^frame 1: says truncated, but all 2 bytes",
        [frame("ab", 2), frame("", 2, truncated=True)],
        b"ab",
    )


def test_required_truncation_needs_a_frame_to_say_it() -> None:
    """``truncated=True`` with no frame at all is named: the notice can always say it."""
    fails(
        r"^stream: no frame says truncated, but only 0 of the source's 6 bytes",
        [],
        b"abcdef",
        total=0,
        truncated=True,
    )


def test_total_bytes_rules() -> None:
    """total_bytes never decreases, never exceeds the source, and bytes cannot be
    surfaced before they were counted."""
    fails(r"^frame 1: total_bytes went down from 3 to 2", [frame("a", 3), frame("b", 2)], b"abc")
    fails(r"^frame 0: total_bytes 4 is more than the 3 bytes", [frame("abc", 4)], b"abc")
    fails(
        r"^frame 0: its delta needs source bytes up to 2, past its total_bytes 1",
        [frame("ab", 1)],
        b"ab",
    )
    assert check_stream([frame("a", 2), frame("b", 2)], b"ab", cap=1).total_bytes == 2


def test_truncation_rules() -> None:
    """truncated is cumulative, set only when bytes were refused, freezes the
    count, and is required when the caller says so."""
    source = b"abcdef"
    assert check_stream([frame("ab", 2), frame("cd", 4, truncated=True)], source, total=4).truncated
    assert not check_stream([frame("abcd", 4)], source, total=4).truncated
    fails(
        r"^frame 0: says truncated, but all 6 bytes", [frame("abcdef", 6, truncated=True)], source
    )
    fails(
        r"^frame 1: truncated went back to false",
        [frame("ab", 4, truncated=True), frame("cd", 4)],
        source,
        total=4,
    )
    fails(
        r"^frame 1: total_bytes grew from 2 to 4 after the stream said truncated",
        [frame("ab", 2, truncated=True), frame("cd", 4, truncated=True)],
        source,
        total=4,
    )
    fails(
        r"^frame 0: the last frame does not say truncated",
        [frame("abcd", 4)],
        source,
        total=4,
        truncated=True,
    )
    fails(
        r"^frame 0: says truncated",
        [frame("ab", 2, truncated=True)],
        source,
        total=2,
        truncated=False,
    )


def test_gap_rules() -> None:
    """A gap frame's text is the source after a loss of at least one byte; a gap
    in a lossless stream, or a gap a known tail could not have made, is named."""
    source = b"0123456789"
    checked = check_stream([frame("01", 2), frame("789", 10, gap=True)], source)
    assert checked.lost == (LostSpan(1, 2, 7),)
    fails(
        r"^frame 1: gap=true, but the stream continues exactly at byte 2: nothing was lost",
        [frame("01", 2), frame("23456789", 10, gap=True)],
        source,
        cap=100,
    )
    fails(
        r"^frame 1: gap frame whose text is not the source between byte 3 and 10",
        [frame("01", 2), frame("xy", 10, gap=True)],
        source,
    )
    fails(
        r"^frame 1: gap frame in a stream that must be lossless",
        [frame("01", 2), frame("789", 10, gap=True)],
        source,
        lossless=True,
    )
    # With a known tail of 3 bytes the survivors start at byte 7 exactly.
    assert (
        check_stream(
            [frame("01", 2), frame("789", 10, gap=True)], source, tail_capacity=3
        ).lost_bytes
        == 5
    )
    fails(
        r"where the tail of 4 bytes starts \(byte 6\)",
        [frame("01", 2), frame("789", 10, gap=True)],
        source,
        tail_capacity=4,
    )
    # Nor may the survivors start before the tail does (more than it can hold).
    fails(
        r"^frame 1: gap frame whose text is not the source where the tail of 3 bytes starts",
        [frame("01", 2), frame("56789", 10, gap=True)],
        source,
        tail_capacity=3,
    )
    fails(
        r"^frame 1: gap frame, but a tail of 9 bytes at total_bytes 10 still holds byte 2",
        [frame("01", 2), frame("789", 10, gap=True)],
        source,
        tail_capacity=9,
    )


def test_gap_survivors_skip_orphans() -> None:
    """A gap tail's leading continuation bytes (at most 3) are skipped, never
    decoded; an empty gap frame reports a loss with nothing decodable yet."""
    euro = "€".encode()  # e2 82 ac
    source = b"ab" + euro * 2
    frames, _ = stream_core(source, [source[:2], None, source[2:]], None, 4)
    # The 4-byte tail starts with the first euro's last byte: skipped.
    assert [f.payload for f in frames] == [
        PartialResultPayload(delta="ab", total_bytes=2),
        PartialResultPayload(delta="€", total_bytes=8, gap=True),
    ]
    assert check_stream(frames, source, tail_capacity=4).lost == (LostSpan(1, 2, 5),)
    fails(
        r"^frame 1: gap frame whose text is not the source where the tail of 4 bytes starts",
        [frame("ab", 2), frame("\ufffd€", 8, gap=True)],
        source,
        tail_capacity=4,
    )
    # Two orphans, then an incomplete euro: an empty gap frame, then the euro.
    source = b"ab" + euro * 3
    frames, _ = stream_core(source, [source[:2], None, source[2:-1], None, source[-1:]], None, 4)
    assert [f.payload.delta for f in frames] == ["ab", "", "€"]
    assert check_stream(frames, source, tail_capacity=4).lost == (LostSpan(1, 2, 8),)
    assert check_stream(frames, source).lost == (LostSpan(1, 2, 8),)
    # Four continuation bytes: three are orphans, the fourth decodes to U+FFFD.
    junk = b"abx" + b"\x80" * (MAX_HELD_BYTES + 1) + b"z"
    frames, _ = stream_core(junk, [junk[:2], None, junk[2:]], None, 5)
    assert frames[1].payload == PartialResultPayload(delta="\ufffdz", total_bytes=8, gap=True)
    assert check_stream(frames, junk, tail_capacity=5).lost == (LostSpan(1, 2, 6),)
    assert check_stream(frames, junk).lost == (LostSpan(1, 2, 6),)
    fails(
        r"^frame 1: gap frame whose text",
        [frame("ab", 2), frame("\ufffd\ufffdz", 8, gap=True)],
        junk,
        tail_capacity=5,
    )
    fails(
        r"^frame 1: gap frame whose text",
        [frame("ab", 2), frame("\ufffd\ufffdz", 8, gap=True)],
        junk,
    )


def test_gap_followed_by_more_frames() -> None:
    """Frames after a gap continue from its survivors; the last run must reach the end."""
    source = b"abcdefghijklmnop"
    frames = [
        frame("ab", 2),
        frame("jk", 12, gap=True),
        frame("l", 12),
        frame("mn", 16),
        frame("op", 16),
    ]
    checked = check_stream(frames, source, cap=2)
    assert checked.lost == (LostSpan(1, 2, 9),)
    fails(
        r"^frame 3: the stream ends after this frame at source byte 14 of 16",
        frames[:4],
        source,
        cap=2,
    )
    fails(
        r"^frame 2: delta differs from the source at character 0",
        [frame("ab", 2), frame("jk", 12, gap=True), frame("x", 12)],
        source,
        cap=2,
        complete=False,
    )


def test_messages_clip_excerpts() -> None:
    """Excerpts in a message are clipped to a readable length."""
    source = b"a" * 100
    error = fails(r"^frame 0: delta differs", [frame("a" * 50 + "b" * 50, 100)], source, cap=200)
    excerpt = "'" + "b" * EXCERPT_CHARS + "'..."
    assert excerpt in str(error)
    assert "b" * (EXCERPT_CHARS + 1) not in str(error)


def test_bad_arguments() -> None:
    """A total outside the source, a negative cap or a tail below one byte is a
    ValueError naming the argument."""
    with pytest.raises(
        ValueError, match=r"total must be within 0\.\.2 \(the source's length\), got 3"
    ):
        check_stream([], b"ab", total=3)
    with pytest.raises(ValueError, match=r"cap must be >= 0 or None, got -1"):
        check_stream([], b"ab", cap=-1)
    with pytest.raises(ValueError, match=r"tail_capacity must be >= 1 or None, got 0"):
        check_stream([], b"ab", tail_capacity=0)


def test_error_is_an_assertion_error() -> None:
    """StreamCheckError is an AssertionError carrying the frame and the reason."""
    error = fails(r"^frame 0:", [frame("x", 1)], b"y")
    assert isinstance(error, AssertionError)
    assert error.frame == 0
    assert error.reason.startswith("delta differs")


# -- collect ----------------------------------------------------------------------


def test_collect_returns_frames_terminal_and_after_terminal_count() -> None:
    """collect keeps every progress item in order, the terminal, and the count
    of items dropped after it."""
    got = collect(ChattyTool(), EmitArgs(steps=[]), call_id="c-9")
    assert got.frames[0] == TextProgress(text="starting")
    assert got.payloads == [PartialResultPayload(delta="ab", total_bytes=2)]
    assert (got.text, got.result, got.dropped_after_terminal) == ("ab", 2, 2)


def test_collect_without_progress() -> None:
    """wants_progress=False reaches the tool: no frames, the result still comes."""
    got = collect(EmitTool(), EmitArgs(steps=[b"abc", None]), wants_progress=False)
    assert got.frames == ()
    assert got.result == 3


def test_collect_failure_and_result() -> None:
    """A failed call's terminal is the error; asking for its result says why."""
    got = collect(FailingTool(), {"steps": []})
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.EXECUTION
    with pytest.raises(AssertionError, match=r"the tool call failed \(execution\): disk on fire"):
        _ = got.result


def test_collect_hands_each_frame_to_on_frame() -> None:
    """on_frame (plain or async) sees every frame in order as it arrives, and
    keep=False keeps none of them while the terminal still comes."""
    seen: list[ToolProgress] = []
    kept = collect(ChattyTool(), EmitArgs(steps=[]), on_frame=seen.append)
    assert seen == list(kept.frames)
    awaited: list[ToolProgress] = []

    async def slow_consumer(frame: ToolProgress) -> None:
        await asyncio.sleep(0)
        awaited.append(frame)

    dropped = collect(ChattyTool(), EmitArgs(steps=[]), on_frame=slow_consumer, keep=False)
    assert awaited == seen
    assert (dropped.frames, dropped.payloads, dropped.result) == ((), [], 2)


def test_collect_async_inside_a_loop() -> None:
    """collect_async runs inside an event loop, where collect cannot."""

    async def main() -> Collected:
        with pytest.raises(RuntimeError, match=r"await collect_async\(\) there"):
            collect(EmitTool(), EmitArgs(steps=[]))
        return await collect_async(EmitTool(), json_codec.encode({"steps": [b"hi"]}))

    got = asyncio.run(main())
    assert got.text == "hi"


def test_collect_honours_timeout() -> None:
    """A timeout ends the call with a timeout terminal."""

    class Slow(EmitTool):
        id = "slow"

        async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
            await asyncio.sleep(30)
            yield ToolResult(value=0)

    got = collect(Slow(), EmitArgs(steps=[]), timeout_ms=50)
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.TIMEOUT


# -- fuzz_streaming_tool and the writer -----------------------------------------


def test_fuzz_rejects_a_tool_that_does_not_stream() -> None:
    """Fuzzing a tool without a streaming spec is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"tool 'quiet' does not stream"):
        fuzz_streaming_tool(QuietTool(), emit_args)


def test_fuzz_reports_a_failed_call() -> None:
    """A tool call that ends in an error fails the fuzz test with the error."""
    test = fuzz_streaming_tool(FailingTool(), emit_args, hypothesis_settings=FIND_BUG)
    with pytest.raises(AssertionError, match=r"tool 'failing' failed \(execution\): disk on fire"):
        test()


def test_fuzz_reports_items_after_the_terminal() -> None:
    """A tool that keeps yielding after its terminal fails the fuzz test."""

    class Late(EmitTool):
        id = "late"

        async def execute(self, ctx: ToolContext, args: EmitArgs) -> AsyncIterator[ToolEvent]:
            async for item in EmitTool.execute(self, ctx, args):
                yield item
            yield TextProgress(text="one more")

    test = fuzz_streaming_tool(Late(), emit_args, hypothesis_settings=FIND_BUG)
    with pytest.raises(AssertionError, match=r"tool 'late' yielded 1 items after its terminal"):
        test()


def test_fuzz_rejects_a_negative_limit() -> None:
    """A negative limit is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"limit must be >= 0 or None, got -1"):
        fuzz_streaming_tool(EmitTool(), emit_args, limit=-1)


def test_fuzz_rejects_a_tail_capacity_below_one_when_built() -> None:
    """A tail capacity below 1 is a ValueError when the test is made, not a
    failure of every example it runs."""
    with pytest.raises(ValueError, match=r"tail_capacity must be >= 1 or None, got 0"):
        fuzz_streaming_tool(EmitTool(), emit_args, tail_capacity=0)


def test_fuzz_test_is_named_for_the_tool() -> None:
    """The returned test carries a name and a docstring for pytest's report."""
    test = fuzz_streaming_tool(EmitTool(), emit_args)
    assert test.__name__ == "test_fuzz_emit"
    assert test.__doc__ == (
        "Tool 'emit' keeps the streaming contract over drawn sources and schedules."
    )


def test_fuzz_settings() -> None:
    """The test has no deadline and runs max_examples; given settings are used whole."""

    def settings_of(test: object) -> settings:
        # Where Hypothesis keeps a test's settings.
        found = getattr(test, "_hypothesis_internal_use_settings")  # noqa: B009
        assert isinstance(found, settings)
        return found

    default = settings_of(fuzz_streaming_tool(EmitTool(), emit_args))
    assert default.deadline is None
    assert settings.default is not None
    assert default.max_examples == settings.default.max_examples
    few = settings_of(fuzz_streaming_tool(EmitTool(), emit_args, max_examples=3))
    assert (few.deadline, few.max_examples) == (None, 3)
    assert (
        settings_of(fuzz_streaming_tool(EmitTool(), emit_args, hypothesis_settings=FIND_BUG))
        is FIND_BUG
    )


def test_python_writer_splits_long_writes_and_merges_ticks() -> None:
    """A write longer than one argument holds is spread over several and still
    written once; runs of ticks pause once."""
    big = bytes(range(256)) * (WRITER_ARG_BYTES // 256 * 2 + 3)
    argv = python_writer_argv([b"", None, None, big, None, b"\x00end"])
    marks = [arg[0] for arg in argv[3:]]
    assert marks == ["w", "t", "a", "a", "w", "t", "w"]
    assert all(len(arg) <= WRITER_ARG_BYTES * 4 // 3 + 1 for arg in argv[3:])
    out = subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout
    assert out == big + b"\x00end"
    assert f"time.sleep({WRITER_TICK_S!r})" in argv[2]
    with pytest.raises(ValueError, match=r"tick_s must be >= 0, got -1"):
        python_writer_argv([], tick_s=-1)


# -- strategies -------------------------------------------------------------------


@given(progress=progress_frames(), call=tool_call_frames())
def test_frame_strategies_make_wire_values(
    progress: CustomProgress, call: ToolCallProgressFrame[Any]
) -> None:
    """progress_frames and tool_call_frames make frames that round-trip the wire."""
    assert isinstance(progress.payload, PartialResultPayload)
    assert (
        json_codec.decode(json_codec.encode(call), ToolCallProgressFrame[PartialResultPayload])
        == call
    )
    assert call.tool_call_id


@given(bad=malformed_payloads())
def test_malformed_payloads_are_rejected_at_their_path(bad: tuple[Any, str]) -> None:
    """Every malformed payload fails the strict decode at the path it names."""
    body, path = bad
    with pytest.raises(DecodeError) as caught:
        convert(body, PartialResultPayload)
    assert caught.value.path == path


def test_malformed_payload_table_is_rejected() -> None:
    """Each listed malformed payload fails the strict decode at its path."""
    for body, path in MALFORMED_PAYLOADS:
        with pytest.raises(DecodeError) as caught:
            convert(body, PartialResultPayload)
        assert caught.value.path == path, body


def test_wire_values_looks_up_a_wire_type() -> None:
    """wire_values takes the decode type of WIRE_STRATEGIES (a class or a union)
    and refuses anything else, naming the known types."""
    assert wire_values(ToolErrorWire) is WIRE_STRATEGIES["ToolErrorWire"][1]
    assert wire_values(ToolCallParams) is WIRE_STRATEGIES["ToolCallParams"][1]
    with pytest.raises(ValueError, match=r"<class 'int'> is not a wire type; known: StreamingSpec"):
        wire_values(int)


@pytest.mark.parametrize("variant", get_args(ToolErrorWire), ids=lambda v: v.__name__)
def test_wire_values_draw_every_variant_of_a_union(variant: type[Any]) -> None:
    """Every ToolErrorWire variant is drawn, so a property over the union covers each."""
    drawn = find(
        wire_values(ToolErrorWire),
        lambda wire: isinstance(wire, variant),
        # Stops at the first hit (cheap); no shrinking, which is slow on regex ids.
        settings=settings(phases=[Phase.generate], database=None, max_examples=1000),
    )
    assert json_codec.decode(json_codec.encode(drawn), ToolErrorWire) == drawn


@given(value=json_values())
def test_json_values_are_strict_json(value: Any) -> None:
    """json_values makes values strict JSON carries (no NaN or infinity) and
    that come back from a JSON round trip unchanged."""
    text = json.dumps(value, allow_nan=False)
    assert json.loads(text) == value


# -- the package ------------------------------------------------------------------


def test_runtime_does_not_import_hypothesis() -> None:
    """Importing the runtime loads neither Hypothesis nor the testing kit."""
    code = (
        "import sys, kigi_tool_runtime, kigi_tool_protocol\n"
        "assert 'hypothesis' not in sys.modules, 'hypothesis'\n"
        "assert 'kigi_tool_runtime.testing' not in sys.modules, 'testing'\n"
        "import kigi_tool_runtime.testing\n"
        "assert 'hypothesis' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


def test_all_is_complete() -> None:
    """The testing package exports every public name of its modules, and only those."""
    exported = set(kit.__all__)
    assert exported == {name for name in dir(kit) if not name.startswith("_")}
    for module in (_check, _collect, _frame_strategies, _fuzz, _wire_strategies):
        assert set(module.__all__) <= exported, module.__name__
    order = sorted(exported, key=lambda name: (not name.isupper(), not name[0].isupper(), name))
    assert list(kit.__all__) == order


def test_a_limit_inside_a_character_leaves_it_unsent() -> None:
    """The limit cuts ✓ in half: the stream stops before it, says truncated,
    and has no U+FFFD; bytes that nothing completes are flushed as U+FFFD."""
    source = "a✓😀 hello".encode()
    frames, buffer = stream_core(source, [source], None, 64, 3)
    assert buffer._cut_character
    assert [f.payload.delta for f in frames] == ["a"]
    checked = check_stream(frames, source, total=3, truncated=True)
    assert (checked.text, checked.truncated) == ("a", True)
    invalid = b"a\xe2\x9cZ"
    frames, buffer = stream_core(invalid, [invalid], None, 64, 3)
    assert not buffer._cut_character
    checked = check_stream(frames, invalid, total=3, truncated=True)
    assert checked.text == "a\ufffd"


def test_a_lone_surrogate_in_a_delta_is_refused() -> None:
    """No JSON encoder can send a lone surrogate, and no source decodes to one."""
    fails(
        r"^frame 1: its delta holds a lone surrogate U\+D800 at character 1",
        [frame("ab", 2), frame("c\ud800", 4)],
        b"abcd",
    )


def test_a_frame_shorter_than_the_pending_bytes_allow_is_refused() -> None:
    """Eleven one-byte frames at one total under a 16 KiB cap: the producer
    takes the longest prefix, so the first is refused; at a cap of 1 they pass."""
    frames = [frame(c, 11) for c in "abcdefghijk"]
    fails(
        r"^frame 0: consumes 1 source bytes where 11 were pending within the cap of 16384",
        frames,
        b"abcdefghijk",
    )
    assert check_stream(frames, b"abcdefghijk", cap=1).frames == 11
    # A trailing incomplete character may stay pending.
    assert check_stream([frame("a", 2), frame("é", 3)], "aé".encode()).text == "aé"


def test_lost_spans_say_when_they_are_only_the_earliest_fit() -> None:
    """Without the tail's size a gap in the middle is placed where a start
    fits and says it is approximate; a known tail or the end of the stream
    pins it."""
    source = b"abcabcabcXYZ"
    frames = [frame("ab", 2), frame("abc", 9, gap=True), frame("XYZ", 12)]
    later = [*frames, frame("Q", 20, gap=True)]
    free = check_stream(later, source + b"1234567Q", cap=3)
    assert free.lost == (LostSpan(1, 2, 6, exact=False), LostSpan(3, 12, 19))
    assert not free.lost_exact
    pinned = check_stream(frames, source, cap=3, tail_capacity=3)
    assert pinned.lost == (LostSpan(1, 2, 6),)
    assert pinned.lost_exact
    end = check_stream(frames[:2], b"abcabcabc", cap=3)
    assert end.lost == (LostSpan(1, 2, 6),)
    assert end.lost_exact


def test_a_broken_stream_is_judged_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gap whose survivors fit nowhere in a source that repeats itself (and
    is not valid UTF-8, so each start is decoded): the search gives up after
    MAX_FAILED_STARTS starts instead of trying each one (source length times
    delta length)."""
    source = b"\xff" + b"a" * 100_000
    frames = [frame("\ufffd", 1), frame("a" * 16384, 60_000, gap=True), frame("b", 60_001)]
    tried = 0
    place = _check._Checker.place

    def counting(self: Any, *args: Any) -> Any:
        nonlocal tried
        tried += 1
        return place(self, *args)

    monkeypatch.setattr(_check._Checker, "place", counting)
    with pytest.raises(StreamCheckError, match=r"^frame 2: delta differs"):
        check_stream(frames, source, complete=False)
    assert tried <= _check.MAX_FAILED_STARTS + 3
