"""Bounded line framing: the sans-IO splitter and the asyncio pump."""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import termios

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime._lines import (
    LINE_QUEUE_BYTES,
    READ_CHUNK_BYTES,
    LineReader,
    read_line_batches,
    read_lines,
)
from kigi_tool_runtime._wire._split import LineSplitter, OversizedLine


def _reference(data: bytes, limit: int) -> list[bytes | OversizedLine]:
    parts = data.split(b"\n")
    last = parts.pop()
    out: list[bytes | OversizedLine] = [
        p if len(p) <= limit else OversizedLine(len(p), limit, p[: min(1024, limit)]) for p in parts
    ]
    if last:
        over = OversizedLine(len(last), limit, last[: min(1024, limit)])
        out.append(last if len(last) <= limit else over)
    return out


def _split_all(data: bytes, cuts: list[int], limit: int) -> list[bytes | OversizedLine]:
    splitter = LineSplitter(limit)
    out: list[bytes | OversizedLine] = []
    prev = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        out += splitter.feed(data[prev:cut])
        assert splitter.buffered <= limit
        prev = cut
    end = splitter.end()
    if end is not None:
        out.append(end)
    return out


@given(
    st.binary(max_size=200).map(lambda b: b.replace(b"x", b"\n")),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    st.integers(min_value=1, max_value=20),
)
def test_any_cut_gives_the_reference_lines(data: bytes, cuts: list[int], limit: int) -> None:
    """Cutting the input anywhere yields the same lines as splitting it whole."""
    assert _split_all(data, cuts, limit) == _reference(data, limit)


def test_every_single_byte_feed_matches() -> None:
    """Byte-at-a-time feeding yields exactly the whole-input lines, oversized ones included."""
    data = b'{"a":1}\n' + b"z" * 30 + b"\n\nshort\ntrailing"
    splitter = LineSplitter(10)
    out: list[bytes | OversizedLine] = []
    for i in range(len(data)):
        out += splitter.feed(data[i : i + 1])
    end = splitter.end()
    assert end == b"trailing"
    assert out == [b'{"a":1}', OversizedLine(30, 10, data.split(b"\n")[1][:10]), b"", b"short"]


def test_line_of_exactly_the_limit_passes_one_more_is_rejected() -> None:
    """The limit is inclusive: a line of ``limit`` bytes is returned, ``limit + 1`` is not."""
    splitter = LineSplitter(4)
    assert splitter.feed(b"abcd\nabcde\n") == [b"abcd", OversizedLine(5, 4, b"abcd")]


def test_oversized_line_is_not_held() -> None:
    """While skipping an oversized line the buffer stays empty however much arrives."""
    splitter = LineSplitter(8)
    for _ in range(1000):
        assert splitter.feed(b"y" * 1000) == []
        assert splitter.buffered == 0
    assert splitter.feed(b"tail\nok\n") == [OversizedLine(1_000_004, 8, b"y" * 8), b"ok"]


def test_end_inside_oversized_line_reports_it() -> None:
    """Input ending inside an oversized line reports the bytes seen, then nothing more."""
    splitter = LineSplitter(3)
    assert splitter.feed(b"abcdefg") == []
    assert splitter.end() == OversizedLine(7, 3, b"abc")
    assert splitter.end() is None


def test_bad_limit_is_rejected() -> None:
    """A limit below one byte is a ValueError naming the value."""
    with pytest.raises(ValueError, match="max_line_bytes must be at least 1, got 0"):
        LineSplitter(0)


def test_read_lines_over_a_stream_reader() -> None:
    """The asyncio pump yields the same lines, in chunks larger than the reader's own limit."""

    async def main() -> list[bytes | OversizedLine]:
        reader = asyncio.StreamReader(limit=16)
        big = b"q" * (3 * READ_CHUNK_BYTES)
        reader.feed_data(b"one\n" + big + b"\n" + b"m" * 100 + b"\ntwo")
        reader.feed_eof()
        return [line async for line in read_lines(reader, 200)]

    out = asyncio.run(main())
    assert out == [b"one", OversizedLine(3 * READ_CHUNK_BYTES, 200, b"q" * 200), b"m" * 100, b"two"]


def test_line_reader_over_a_real_pipe() -> None:
    """The protocol yields the pipe's lines, an oversized one as such, and a last
    unterminated line at end of input."""

    async def main() -> list[bytes | OversizedLine]:
        read_fd, write_fd = os.pipe()
        reader = LineReader(8)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: reader, open(read_fd, "rb", 0))  # noqa: SIM115
        try:
            os.write(write_fd, b"one\n" + b"z" * 50 + b"\ntw")
            os.write(write_fd, b"o\nend")
            os.close(write_fd)
            return [line async for line in reader]
        finally:
            transport.close()

    assert asyncio.run(main()) == [b"one", OversizedLine(50, 8, b"z" * 8), b"two", b"end"]


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe whose read end is ``fd`` (``FIONREAD``)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_line_reader_pauses_its_transport_past_high_water() -> None:
    """Past ``high_water`` bytes of untaken lines the transport stops reading (what
    is written next stays in the pipe); taking the lines resumes it. Seen in the
    pipe itself, not through ``transport.is_reading()``, which the pipe transport
    of some Python 3.11 releases does not implement (3.11.2 raises
    ``NotImplementedError``)."""

    async def main() -> tuple[int, int, list[bytes | OversizedLine]]:
        read_fd, write_fd = os.pipe()
        reader = LineReader(100, high_water=10)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: reader, open(read_fd, "rb", 0))  # noqa: SIM115
        try:
            os.write(write_fd, b"abcdef\n" * 20)
            lines = aiter(reader)
            taken = [await anext(lines)]  # the chunk has arrived whole by now
            os.write(write_fd, b"more\n")
            await asyncio.sleep(0.05)  # a reading transport would take it meanwhile
            while_paused = _unread(read_fd)
            taken += [await anext(lines) for _ in range(19)]
            taken.append(await anext(lines))  # read once reading resumed
            after = _unread(read_fd)
            os.close(write_fd)
            with pytest.raises(StopAsyncIteration):
                await anext(lines)
            return while_paused, after, taken
        finally:
            transport.close()

    while_paused, after, taken = asyncio.run(main())
    assert while_paused == len(b"more\n")
    assert after == 0
    assert taken == [b"abcdef"] * 20 + [b"more"]


def test_line_reader_rejects_a_bad_high_water() -> None:
    """A high-water mark below one byte is a ValueError naming the value."""
    with pytest.raises(ValueError, match="high_water must be at least 1, got 0"):
        LineReader(8, high_water=0)
    assert LINE_QUEUE_BYTES >= 16 * 1024


@given(
    st.binary(max_size=200).map(lambda b: b.replace(b"x", b"\n")),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    st.integers(min_value=1, max_value=20),
)
def test_batches_give_the_reference_lines_never_an_empty_list(
    data: bytes, cuts: list[int], limit: int
) -> None:
    """However the input arrives, a LineReader's batches and read_line_batches
    hold the whole-input lines in order, and no batch is empty."""
    pieces = []
    prev = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        pieces.append(data[prev:cut])
        prev = cut

    async def from_reader() -> list[list[bytes | OversizedLine]]:
        reader = LineReader(limit)
        batches = reader.batches()
        out = []
        for piece in pieces:
            reader.data_received(piece)
            if reader._lines:
                out.append(await anext(batches))
        reader.eof_received()
        out += [batch async for batch in batches]
        return out

    async def from_stream() -> list[list[bytes | OversizedLine]]:
        stream = asyncio.StreamReader()
        for piece in pieces:
            stream.feed_data(piece)
        stream.feed_eof()
        return [batch async for batch in read_line_batches(stream, limit)]

    for batches in (asyncio.run(from_reader()), asyncio.run(from_stream())):
        assert all(batches)
        assert [line for batch in batches for line in batch] == _reference(data, limit)


def test_taking_a_batch_resumes_a_paused_transport() -> None:
    """Past ``high_water`` the transport is paused; taking the lines as a batch
    takes them all, and the transport reads again."""

    async def main() -> tuple[int, int, list[list[bytes | OversizedLine]]]:
        read_fd, write_fd = os.pipe()
        reader = LineReader(100, high_water=10)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: reader, open(read_fd, "rb", 0))  # noqa: SIM115
        try:
            os.write(write_fd, b"abcdef\n" * 20)
            while not reader._lines:  # the chunk arrives whole; past high water
                await asyncio.sleep(0.001)
            os.write(write_fd, b"more\n")
            await asyncio.sleep(0.05)  # a reading transport would take it meanwhile
            while_paused = _unread(read_fd)
            batches = reader.batches()
            taken = [await anext(batches)]
            taken.append(await anext(batches))  # read once reading resumed
            after = _unread(read_fd)
            os.close(write_fd)
            with pytest.raises(StopAsyncIteration):
                await anext(batches)
            return while_paused, after, taken
        finally:
            transport.close()

    while_paused, after, taken = asyncio.run(main())
    assert while_paused == len(b"more\n")
    assert after == 0
    assert taken == [[b"abcdef"] * 20, [b"more"]]
