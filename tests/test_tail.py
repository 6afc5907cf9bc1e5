"""Tests for ``TailBuffer``: retention, the hard limit, accounting, zero-copy
views that never block a write, and a stateful model of every byte written."""

from __future__ import annotations

import array
import tracemalloc

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kigi_tool_runtime import TailBuffer
from kigi_tool_runtime._producer._tail import (
    INITIAL_STORAGE_BYTES,
    MIN_TAIL_CAPACITY,
    STORAGE_SLACK_BYTES,
    TailStats,
)
from kigi_tool_runtime.testing._strategies import tail_sizes


def test_capacity_below_minimum_is_rejected() -> None:
    """A capacity below MIN_TAIL_CAPACITY (4) is a ValueError naming the reason."""
    with pytest.raises(ValueError, match="capacity 3 is below 4: a tail must hold one whole"):
        TailBuffer(MIN_TAIL_CAPACITY - 1)


def test_minimum_capacity_holds_a_four_byte_character() -> None:
    """At the minimum capacity the newest 4-byte character is retained whole."""
    buffer = TailBuffer(MIN_TAIL_CAPACITY)
    buffer.write("ab😀".encode())
    assert bytes(buffer.tail()).decode() == "😀"


@pytest.mark.parametrize("capacity", [4.0, "8", True])
def test_capacity_must_be_an_int(capacity: object) -> None:
    """A non-int capacity (bool included) is a TypeError."""
    with pytest.raises(TypeError, match="capacity must be an int"):
        TailBuffer(capacity)  # type: ignore[arg-type]


def test_negative_limit_is_rejected() -> None:
    """A negative limit is a ValueError."""
    with pytest.raises(ValueError, match="limit must be >= 0 or None, got -1"):
        TailBuffer(8, limit=-1)


def test_limit_must_be_an_int() -> None:
    """A non-int limit is a TypeError."""
    with pytest.raises(TypeError, match="limit must be an int or None, not float"):
        TailBuffer(8, limit=1.5)  # type: ignore[arg-type]


def test_write_of_wrong_type_is_rejected() -> None:
    """Writing a str is a TypeError: the buffer holds raw bytes."""
    with pytest.raises(TypeError, match="data must be bytes, bytearray or memoryview, not str"):
        TailBuffer(8).write("text")  # type: ignore[arg-type]


def test_keeps_newest_capacity_bytes_and_counts_total() -> None:
    """Writes append; only the newest capacity bytes stay; total counts all."""
    buffer = TailBuffer(5)
    assert buffer.write(b"abc") == 3
    assert bytes(buffer.tail()) == b"abc"
    assert buffer.write(b"defg") == 4
    assert bytes(buffer.tail()) == b"cdefg"
    assert buffer.total == 7
    assert buffer.statistics() == TailStats(retained=5, dropped=0, total=7)
    assert (buffer.capacity, buffer.limit, buffer.truncated) == (5, None, False)
    assert repr(buffer) == "TailBuffer(capacity=5, limit=None, retained=5, dropped=0, total=7)"


def test_write_larger_than_capacity_keeps_its_last_bytes() -> None:
    """A write longer than the capacity keeps only its last capacity bytes."""
    buffer = TailBuffer(4)
    buffer.write(b"xy")
    assert buffer.write(b"0123456789") == 10
    assert bytes(buffer.tail()) == b"6789"
    assert buffer.total == 12


def test_huge_write_copies_only_what_it_keeps() -> None:
    """A write far larger than the capacity allocates about the capacity, not the write."""
    data = bytes(16 * 1024 * 1024)
    buffer = TailBuffer(1024)
    tracemalloc.start()
    try:
        buffer.write(data)
        buffer.write(memoryview(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert buffer.total == 2 * len(data)
    assert peak < 64 * 1024


def test_limit_refuses_counts_and_truncates() -> None:
    """Bytes past the limit are refused, counted as dropped, and set truncated."""
    buffer = TailBuffer(8, limit=5)
    assert buffer.write(b"abc") == 3
    assert not buffer.truncated
    assert buffer.write(b"defg") == 2
    assert buffer.truncated
    assert buffer.write(b"hij") == 0
    assert bytes(buffer.tail()) == b"abcde"
    assert buffer.statistics() == TailStats(retained=5, dropped=5, total=5)


def test_reaching_the_limit_exactly_is_not_truncation() -> None:
    """A write that ends exactly at the limit drops nothing."""
    buffer = TailBuffer(8, limit=4)
    assert buffer.write(b"abcd") == 4
    assert not buffer.truncated
    assert buffer.write(b"") == 0
    assert not buffer.truncated


def test_limit_zero_drops_everything() -> None:
    """With limit 0 every byte is dropped and counted."""
    buffer = TailBuffer(4, limit=0)
    assert buffer.write(b"abc") == 0
    assert buffer.statistics() == TailStats(retained=0, dropped=3, total=0)
    assert buffer.truncated


def test_tail_is_a_read_only_zero_copy_view() -> None:
    """tail() is a read-only memoryview over the buffer's own storage."""
    buffer = TailBuffer(16)
    buffer.write(b"hello")
    first, second = buffer.tail(), buffer.tail()
    assert first.readonly
    assert first.obj is second.obj
    with pytest.raises(TypeError):
        first[0] = 0


def test_held_views_never_block_writes() -> None:
    """Writes succeed however many old tail views a caller still holds."""
    buffer = TailBuffer(6)
    views = []
    written = b""
    for index in range(200):
        chunk = bytes([65 + index % 26]) * (index % 9)
        views.append(buffer.tail())
        buffer.write(chunk)
        written += chunk
        assert bytes(buffer.tail()) == written[-6:]


def test_a_huge_capacity_allocates_only_the_initial_storage() -> None:
    """Storage starts at INITIAL_STORAGE_BYTES at most: a 1 TiB capacity costs
    memory only as bytes arrive."""
    tracemalloc.start()
    try:
        buffer = TailBuffer(1 << 40)
        buffer.write(b"x" * 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(buffer._buf) == INITIAL_STORAGE_BYTES
    assert peak < 2 * INITIAL_STORAGE_BYTES
    assert bytes(buffer.tail()) == b"x" * 1000
    assert len(TailBuffer(100)._buf) == 200


def test_storage_grows_past_initial_allocation() -> None:
    """A capacity beyond INITIAL_STORAGE_BYTES is honoured as the buffer fills."""
    capacity = 3 * INITIAL_STORAGE_BYTES
    buffer = TailBuffer(capacity)
    held = buffer.tail()
    written = bytearray()
    for index in range(40):
        chunk = bytes([index]) * (INITIAL_STORAGE_BYTES // 3 + index)
        buffer.write(chunk)
        written += chunk
    assert bytes(buffer.tail()) == bytes(written[-capacity:])
    assert len(held) == 0


@pytest.mark.parametrize("capacity", [MIN_TAIL_CAPACITY, 1000, STORAGE_SLACK_BYTES + 3])
def test_storage_stays_within_capacity_plus_slack(capacity: int) -> None:
    """Storage stays within capacity + max(capacity, slack); compaction keeps bytes exact."""
    most = capacity + max(capacity, STORAGE_SLACK_BYTES)
    buffer = TailBuffer(capacity)
    written = bytearray()
    sizes = [1, 3, 4093, capacity // 2, capacity - 1, 77_777]
    for index in range(3 * most // 20_000 + 40):
        chunk = _pattern(index, sizes[index % len(sizes)])
        buffer.write(chunk)
        written += chunk
        del written[: max(0, len(written) - capacity)]
        assert len(buffer._buf) <= most
    assert buffer.total > 2 * most
    assert len(buffer._buf) == most
    assert bytes(buffer.tail()) == bytes(written)


def test_writing_its_own_tail_back_is_safe() -> None:
    """Writing a view of the buffer's own storage appends the right bytes."""
    buffer = TailBuffer(8)
    buffer.write(b"abcdef")
    buffer.write(buffer.tail())
    assert bytes(buffer.tail()) == b"efabcdef"
    buffer.write(buffer.tail()[2:5])
    assert bytes(buffer.tail()) == b"bcdefabc"


@pytest.mark.parametrize(
    "data",
    [bytearray(b"wxyz"), memoryview(b"wxyz"), memoryview(array.array("H", [0x7877, 0x7A79]))],
    ids=["bytearray", "memoryview", "memoryview-of-words"],
)
def test_accepts_any_bytes_like(data: bytearray | memoryview) -> None:
    """bytearray and memoryview writes (any item size) are stored as raw bytes."""
    buffer = TailBuffer(8)
    assert buffer.write(data) == 4
    assert bytes(buffer.tail()) == bytes(data)


def _pattern(seed: int, size: int) -> bytes:
    """``size`` bytes that differ from one seed to the next."""
    block = bytes((seed + index) % 256 for index in range(251))
    return (block * (size // 251 + 1))[:size]


class TailBufferMachine(RuleBasedStateMachine):
    """Every byte written is accounted for, whatever the write sizes and limit."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = TailBuffer(MIN_TAIL_CAPACITY)
        self.written = 0
        self.accepted = bytearray()
        self.held: list[memoryview] = []
        self.seed = 0

    @initialize(
        capacity=st.one_of(st.integers(MIN_TAIL_CAPACITY, 40), tail_sizes()),
        limit=st.one_of(st.none(), st.integers(0, 4000)),
    )
    def create(self, capacity: int, limit: int | None) -> None:
        self.buffer = TailBuffer(capacity, limit)

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        size = len(bytes(data))
        accepted = self.buffer.write(data)
        limit = self.buffer.limit
        expected = size if limit is None else max(0, min(size, limit - len(self.accepted)))
        assert accepted == expected
        self.written += size
        self.accepted += bytes(data)[:accepted]

    @rule(data=st.binary(max_size=64))
    def write_small(self, data: bytes) -> None:
        self._write(data)

    @rule(fraction=st.floats(0, 3))
    def write_relative_to_capacity(self, fraction: float) -> None:
        self.seed += 1
        self._write(_pattern(self.seed, int(self.buffer.capacity * fraction)))

    @rule(data=st.binary(max_size=64), kind=st.sampled_from([bytearray, memoryview]))
    def write_other_bytes_like(self, data: bytes, kind: type[bytearray | memoryview]) -> None:
        self._write(kind(data))

    @rule()
    def hold_a_view(self) -> None:
        self.held.append(self.buffer.tail())

    @invariant()
    def accounting_adds_up(self) -> None:
        stats = self.buffer.statistics()
        assert self.written == stats.total + stats.dropped
        assert stats.total == self.buffer.total == len(self.accepted)
        assert stats.retained == min(stats.total, self.buffer.capacity)
        assert self.buffer.truncated == (stats.dropped > 0)
        limit = self.buffer.limit
        assert limit is None or stats.total <= limit

    @invariant()
    def tail_is_the_newest_accepted_bytes(self) -> None:
        tail = self.buffer.tail()
        assert tail.readonly
        capacity = self.buffer.capacity
        assert bytes(tail) == bytes(self.accepted[-capacity:])


TestTailBufferMachine = TailBufferMachine.TestCase


def test_the_buffer_knows_when_its_limit_cut_a_character_in_half() -> None:
    """The limit lands inside ✓ (split over writes or not): a cut character;
    bytes no refused byte completes are invalid, not cut; a limit between
    characters cuts none."""
    cases = [
        ([b"a\xe2\x9c\x93"], 2, True),
        ([b"a\xe2", b"\x9c\x93"], 2, True),
        ([b"a\xe2\x9c", b"\x93"], 2, True),
        ([b"a\xe2\x9c", b"", b"\x93"], 3, True),
        ([b"a\xe2", b"Z"], 2, False),
        ([b"a\xe2\x9cZ"], 3, False),
        ([b"ab", b"c"], 2, False),
        ([b"a\xe2\x9c"], 2, False),  # too few refused bytes to tell
    ]
    for writes, limit, cut in cases:
        buffer = TailBuffer(16, limit)
        for data in writes:
            buffer.write(data)
        assert buffer._cut_character is cut, (writes, limit)
