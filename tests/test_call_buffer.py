"""A call's bounded buffer of untaken progress items, sans-IO
(``_call/_buffer.py``): over any sequence of frames put, items taken and the
end, the order is kept, at most the bound is held, every dropped item is told
once in the loss report, and the marker of a loss sits on the next item of
its stream with the dropped bytes (Rules 1-4)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import Reassembler
from kigi_tool_runtime._call._buffer import CallBuffer
from kigi_tool_runtime._call._caller import CallProgress
from kigi_tool_runtime._consumer._loss import Gap, StreamKey

CALL = "c1"
STREAMS = ("out", "err")
_RECORD = re.compile(r"untaken progress item of record (\d+) ")


def _reassembler() -> Reassembler:
    return Reassembler(known_calls=[CALL])


def _frame(kind: str, delta: str, total: int, gap: bool) -> ToolCallProgressFrame[Any]:
    body = PartialResultPayload(delta=delta, total_bytes=total, truncated=False, gap=gap)
    return ToolCallProgressFrame(tool_call_id=CALL, kind=kind, body=body)


def _no_text(kind: str) -> ToolCallProgressFrame[Any]:
    """A frame of the stream that carries no text (its body is not a delta)."""
    return ToolCallProgressFrame(tool_call_id=CALL, kind=kind, body={"note": 1})


# One step: ("put", stream, delta, bytes lost before it), ("blank", stream),
# ("take",) or ("end",).
_puts = st.tuples(st.just("put"), st.sampled_from(STREAMS), st.text(max_size=4), st.integers(0, 3))
_steps = st.one_of(
    _puts, _puts, st.tuples(st.just("blank"), st.sampled_from(STREAMS)), st.just(("take",))
)


def _sizes(text: str | None) -> int:
    return len((text or "").encode("utf-8", "surrogatepass"))


@dataclass
class _Put:
    """What the model knows of one frame put: its record, stream and what the
    reassembler alone makes of it."""

    index: int
    key: StreamKey
    text: str | None
    gap: Gap | None
    offset: int  # characters of its stream before it
    dropped: bool = False
    taken: CallProgress | None = field(default=None, repr=False)


def _run(steps: list[tuple[Any, ...]], bound: int, end_at: int | None) -> None:
    buffer = CallBuffer(_reassembler(), bound)
    alone = _reassembler()  # the same frames, no buffer: each frame's own view
    totals = dict.fromkeys(STREAMS, 0)
    chars = dict.fromkeys(STREAMS, 0)
    puts: list[_Put] = []
    held: list[_Put] = []  # the model's buffer
    taken: list[CallProgress | None] = []
    for at, step in enumerate(steps):
        if at == end_at:
            assert buffer.end()
            assert not buffer.end()  # Rule 2: once
        if step[0] in ("put", "blank"):
            kind = step[1]
            if step[0] == "put":
                _, _, delta, lost = step
                totals[kind] += _sizes(delta) + lost
                frame = _frame(kind, delta, totals[kind], lost > 0)
            else:
                frame = _no_text(kind)
            records = buffer.reassembler.records
            accepted = buffer.put(frame, None)
            assert accepted == (not buffer.ended)  # Rule 1
            if not accepted:
                assert buffer.reassembler.records == records  # not absorbed
                continue
            appended = alone.appended(frame, None)
            assert appended.key is not None
            put = _Put(len(puts), appended.key, appended.text, appended.gap, chars[kind])
            chars[kind] += len(appended.text or "")
            puts.append(put)
            if len(held) == bound:
                held.pop(0).dropped = True  # Rule 2: the oldest
            held.append(put)
        else:
            item = buffer.take()
            taken.append(item)
            if item is None:
                assert not held  # nothing held: the end next, once it ended
            else:
                expected = held.pop(0)
                assert item.frame is not None
                expected.taken = item
        assert len(buffer) == len(held) <= bound
    buffer.end()
    while (item := buffer.take()) is not None:
        expected = held.pop(0)
        expected.taken = item
    assert not held

    # Rule 1: the reassembler holds every frame put before the end.
    assert buffer.reassembler.records == len(puts)
    # Rule 2: the order kept; what was not dropped was taken, in put order.
    kept = [put for put in puts if not put.dropped]
    assert all(put.taken is not None for put in kept)
    # Rule 3: each dropped item told once, by its record.
    dropped = [put.index for put in puts if put.dropped]
    assert buffer.frames_dropped == len(dropped)
    told = [
        int(match.group(1))
        for anomaly in buffer.reassembler.anomalies
        if anomaly.kind == "dropped_frames" and (match := _RECORD.search(anomaly.detail))
    ]
    assert sorted(told) == dropped
    for report in buffer.reassembler.reports(ended=True):
        if any(put.dropped and put.key == report.key for put in puts):
            assert not report.complete
    # Rule 4: the marker on the next item of the stream, with the dropped bytes.
    for key in {put.key for put in puts}:
        # A run of losses: the offsets of its first and last dropped item, and
        # the bytes lost so far.
        run: tuple[int, int, int] | None = None
        for put in (p for p in puts if p.key == key):
            own = put.gap.lost_bytes if put.gap is not None else 0
            if put.dropped:
                size = _sizes(put.text)
                if run is not None:
                    run = (run[0], put.offset, run[2] + size + own)
                elif size or put.gap is not None:
                    run = (put.offset, put.offset, size + own)
                continue
            assert put.taken is not None
            gap = put.taken.appended.gap
            if run is None:
                assert gap == put.gap  # no loss before it: its own gap, untouched
            else:
                assert gap is not None
                assert gap.inferred
                # Where in the text the run was lost: where its first dropped
                # item was (each drop folds the loss it carried).
                assert gap.offset == run[0]
                assert gap.lost_bytes == run[2] + own
                assert 1 <= gap.lost_bytes_min <= gap.lost_bytes
                marker = f"[... {gap.describe()} bytes lost ...]"
                assert put.taken.appended.render().startswith(marker)
            assert put.taken.appended.text == put.text
            run = None


@settings(max_examples=300)
@given(
    st.lists(_steps, max_size=40),
    st.integers(1, 5),
    st.one_of(st.none(), st.integers(0, 40)),
)
def test_any_frames_and_takes_keep_order_bound_and_tell_every_loss(
    steps: list[tuple[Any, ...]], bound: int, end_at: int | None
) -> None:
    _run(steps, bound, end_at)


def test_a_consumer_that_takes_nothing_gets_the_newest_items_and_one_marker() -> None:
    """Six frames of one stream into a buffer of two: the two newest are held,
    the first renders the four dropped frames' bytes as one gap before its text."""
    buffer = CallBuffer(_reassembler(), 2)
    total = 0
    for text in ("ab", "cd", "ef", "gh", "ij", "kl"):
        total += len(text)
        assert buffer.put(_frame("out", text, total, False), None)
    assert buffer.frames_dropped == 4
    assert buffer.end()
    first, second, end = buffer.take(), buffer.take(), buffer.take()
    assert first is not None
    assert second is not None
    assert end is None
    assert first.appended.render() == "[... 8 bytes lost ...]ij"
    assert second.appended.render() == "kl"
    gap = first.appended.gap
    assert gap is not None
    # The four dropped items' bytes, at the record of the last, where the
    # first of them was (the text's start).
    assert gap == Gap(0, 3, 8, 8, 8, 0, True)
    [report] = buffer.reassembler.reports(ended=True)
    assert not report.complete
    state = buffer.reassembler.stream(CALL, "out")
    assert state is not None
    assert state.frames == 6


def test_the_end_is_never_dropped_and_nothing_is_put_after_it() -> None:
    buffer = CallBuffer(_reassembler(), 1)
    assert buffer.put(_frame("out", "a", 1, False), None)
    assert len(buffer) == 1
    assert buffer.end()
    assert not buffer.put(_frame("out", "b", 2, False), None)
    assert buffer.frames_dropped == 0
    item = buffer.take()
    assert item is not None
    assert item.appended.text == "a"
    assert buffer.take() is None
    assert buffer.ended


def test_a_refused_line_is_said_in_the_report() -> None:
    buffer = CallBuffer(_reassembler(), 4)
    buffer.refuse(5000, 4096)
    assert len(buffer) == 0
    [anomaly] = buffer.reassembler.anomalies
    assert anomaly.kind == "undecodable"
    assert "line of 5000 bytes exceeds the frame limit of 4096 bytes" in anomaly.detail


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 item, got 0"):
        CallBuffer(_reassembler(), 0)


class BufferMachine(RuleBasedStateMachine):
    """Puts, takes and the end in any order: the buffer never holds more than
    its bound, and ``frames_dropped`` and the loss report agree at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = CallBuffer(_reassembler(), 3)
        self.total = 0
        self.put_count = 0
        self.taken = 0

    @rule(text=st.text(max_size=3))
    def put(self, text: str) -> None:
        self.total += _sizes(text)
        if self.buffer.put(_frame("out", text, self.total, False), None):
            self.put_count += 1

    @rule()
    def take(self) -> None:
        if self.buffer.take() is not None:
            self.taken += 1

    @rule()
    def end(self) -> None:
        self.buffer.end()

    @invariant()
    def bounded_and_accounted(self) -> None:
        buffer = self.buffer
        assert len(buffer) <= buffer.bound
        assert self.put_count == self.taken + len(buffer) + buffer.frames_dropped
        told = [a for a in buffer.reassembler.anomalies if a.kind == "dropped_frames"]
        assert len(told) == buffer.frames_dropped


TestBufferMachine = BufferMachine.TestCase
