"""Tests for ``Pacer`` (sans-IO): a simulated driver over an ``OutputStream``,
any schedule of writes and clock steps, every byte emitted once or counted
lost, frames capped, partial frames an interval apart, nothing held longer."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import CustomProgress, StreamingSpec
from kigi_tool_runtime import OutputStream
from kigi_tool_runtime._producer._chunk import MAX_CONTINUATION_BYTES, cap_of
from kigi_tool_runtime._producer._pacer import DEFAULT_PACING_S, Emit, Pace, Pacer
from kigi_tool_runtime.testing import byte_sources, check_stream
from kigi_tool_runtime.testing._strategies import tiny_caps

SPEC = "pacer_chunk"


@dataclass
class Driver:
    """The asyncio driver's rules, run on a simulated clock: poll on every
    write the pacer says wakes it and at every ``next_poll``; record each
    drain with its time and kind."""

    stream: OutputStream
    pacer: Pacer
    next_poll: float = math.inf
    frames: list[CustomProgress] = field(default_factory=list)
    partial_times: list[float] = field(default_factory=list)
    # (time, bytes written by then) and (time, cursor before the poll, total)
    written: list[tuple[float, int]] = field(default_factory=list)
    polls: list[tuple[float, int, int]] = field(default_factory=list)

    def advance(self, until: float) -> None:
        """Run the polls due before ``until`` (a timer firing)."""
        while self.next_poll <= until:
            self.poll(self.next_poll)

    def write(self, now: float, data: bytes) -> None:
        self.advance(now)
        self.stream.write(data)
        self.written.append((now, self.stream.total))
        if self.pacer.wake_on_write(self.next_poll, whole=self.stream.whole_ready):
            self.poll(now)

    def poll(self, now: float) -> None:
        stream = self.stream
        before = stream.total - stream.pending
        pace = self.pacer.poll(now, whole=stream.whole_ready, partial=stream.partial_ready)
        if pace.emit is Emit.ALL:
            self.frames += stream.drain()
            self.partial_times.append(now)
        elif pace.emit is Emit.WHOLE:
            self.frames += stream.drain_whole()
        self.next_poll = pace.next_poll
        self.polls.append((now, before, stream.total))


def schedule_strategy() -> st.SearchStrategy[list[tuple[float, bytes]]]:
    """Writes of any bytes (cut anywhere, characters split) at any clock steps."""
    steps = st.one_of(
        st.just(0.0),
        st.floats(0.0, 0.004),
        st.floats(0.004, 0.03),
        st.floats(0.03, 0.2),
    )
    return st.lists(st.tuples(steps, byte_sources().map(lambda b: b[:64])), max_size=40)


@given(
    schedule=schedule_strategy(),
    cap=tiny_caps(),
    capacity=st.sampled_from([64, 200, 4096]),
    interval=st.sampled_from([0.005, DEFAULT_PACING_S, 0.05]),
    limit=st.one_of(st.none(), st.integers(0, 300)),
)
def test_any_schedule_keeps_every_pacing_promise(
    schedule: list[tuple[float, bytes]],
    cap: int | None,
    capacity: int,
    interval: float,
    limit: int | None,
) -> None:
    """Over any writes and clock steps (and a hard limit or none): every byte
    is emitted exactly once or counted lost, no frame exceeds the cap, partial
    frames are at least the interval apart, and no written byte waits longer
    than the interval (but a character whose rest has not come)."""
    spec = StreamingSpec(subkind=SPEC, max_delta_bytes=cap)
    capacity = max(capacity, cap_of(cap))
    driver = Driver(OutputStream(spec, capacity=capacity, limit=limit), Pacer(interval))
    now = 0.0
    source = bytearray()
    for step, data in schedule:
        now += step
        driver.write(now, data)
        source += data
    driver.advance(now + 10 * interval)
    # Nothing is due any more: the driver sleeps until a write.
    assert driver.next_poll == math.inf
    # Held at the end: at most one incomplete character.
    assert driver.stream.pending <= MAX_CONTINUATION_BYTES
    driver.frames += driver.stream.finish()
    total = len(source) if limit is None else min(len(source), limit)
    check_stream(
        driver.frames,
        bytes(source),
        cap=cap,
        tail_capacity=capacity,
        subkind=SPEC,
        total=total,
        truncated=total < len(source),
    )
    times = driver.partial_times
    for earlier, later in itertools.pairwise(times):
        assert later - earlier >= interval - 1e-12
    # Nothing held longer than the interval: when a poll comes, every byte
    # written more than an interval before it was surfaced already, but an
    # incomplete character (a late poll would find it still pending).
    # (``1e-9``: a poll exactly one interval after a write, ``(t + i) - i``
    # computed in floats, may land a hair past ``t``.)
    for at, cursor, total in driver.polls:
        due = max(
            (count for when, count in driver.written if when < at - interval - 1e-9), default=0
        )
        assert cursor >= min(due, total) - MAX_CONTINUATION_BYTES


@given(
    gaps=st.lists(st.floats(0.0, 0.2), min_size=1, max_size=30),
    interval=st.sampled_from([0.005, DEFAULT_PACING_S, 0.05]),
)
def test_partial_bytes_wait_at_most_the_interval(gaps: list[float], interval: float) -> None:
    """ASCII writes (nothing held) at any times: each write is surfaced within
    the interval, at once when it is the first after a quiet spell."""
    spec = StreamingSpec(subkind=SPEC, max_delta_bytes=64)
    driver = Driver(OutputStream(spec, capacity=4096), Pacer(interval))
    now = 0.0
    for gap in gaps:
        now += gap
        quiet = now - max(driver.partial_times, default=-math.inf) >= interval
        driver.write(now, b"x")
        if quiet:  # the leading edge: visible at the write itself
            assert driver.stream.pending == 0
        now += interval
        driver.advance(now)
        assert driver.stream.pending == 0


def test_a_full_frame_goes_at_once_within_the_interval() -> None:
    """A whole frame goes at the write that completes it, even right after a
    partial frame; the partial rest waits for the interval."""
    spec = StreamingSpec(subkind=SPEC, max_delta_bytes=4)
    driver = Driver(OutputStream(spec, capacity=64), Pacer(0.05))
    driver.write(0.0, b"a")  # leading edge
    assert [f.payload.delta for f in driver.frames] == ["a"]  # type: ignore[union-attr]
    driver.write(0.001, b"bcdef")  # one whole frame, one byte over
    assert [f.payload.delta for f in driver.frames] == ["a", "bcde"]  # type: ignore[union-attr]
    assert driver.next_poll == pytest.approx(0.05)
    driver.advance(0.05)
    assert [f.payload.delta for f in driver.frames][-1] == "f"  # type: ignore[union-attr]
    assert driver.pacer.statistics() == (2, 1, 1)


def test_whole_frames_end_at_the_total_they_carry() -> None:
    """The frames of a whole-only drain carry the total they end at (as every
    drain's do), so a reader of the wire alone knows where each ends."""
    stream = OutputStream(StreamingSpec(subkind=SPEC, max_delta_bytes=3), capacity=64)
    stream.write(b"abcdefgh")
    frames = stream.drain_whole()
    assert [(f.payload.delta, f.payload.total_bytes) for f in frames] == [  # type: ignore[union-attr]
        ("abc", 6),
        ("def", 6),
    ]
    assert stream.partial_ready
    assert not stream.whole_ready
    assert [f.payload.delta for f in stream.drain()] == ["gh"]  # type: ignore[union-attr]


def test_a_held_character_is_neither_whole_nor_partial_ready() -> None:
    """Bytes of a character not yet complete are pending but never ready, so a
    driver never polls in vain for them."""
    stream = OutputStream(StreamingSpec(subkind=SPEC, max_delta_bytes=2), capacity=64)
    stream.write("😀".encode()[:3])
    assert stream.pending == 3
    assert not stream.whole_ready
    assert not stream.partial_ready
    pacer = Pacer(0.01)
    assert pacer.poll(0.0, whole=False, partial=False) == Pace(Emit.NOTHING, math.inf)


def test_the_interval_is_checked() -> None:
    """A pacing interval that is not a positive finite number is refused."""
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="interval"):
            Pacer(bad)
    with pytest.raises(TypeError, match="interval"):
        Pacer("fast")  # type: ignore[arg-type]


def test_a_truncated_source_drains_whole_at_its_final_total() -> None:
    """Once the limit refused bytes the total never grows again: a whole-only
    drain takes everything, so no frame after one that says truncated carries
    a larger total."""
    stream = OutputStream(StreamingSpec(subkind=SPEC, max_delta_bytes=3), capacity=64, limit=5)
    stream.write(b"abcdefg")
    frames = stream.drain_whole() + stream.finish()
    assert [f.payload.delta for f in frames] == ["abc", "de"]  # type: ignore[union-attr]
    assert {f.payload.total_bytes for f in frames} == {5}  # type: ignore[union-attr]
    check_stream(frames, b"abcdefg", cap=3, subkind=SPEC, total=5, truncated=True)
