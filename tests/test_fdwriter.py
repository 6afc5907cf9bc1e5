"""FdWriter: queues writes and makes them from a thread, so a blocked reader never
blocks the event loop, over real pipes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from bounded import run_within

from kigi_tool_runtime._cli._fdwriter import FdWriter, OutputStalled

#: Bound on each test body: a hang fails instead of blocking the suite.
TEST_WAIT_S = 60.0

T = TypeVar("T")


def _run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return run_within(body(), TEST_WAIT_S)


def _drain(fd: int, into: bytearray) -> threading.Thread:
    def read() -> None:
        while chunk := os.read(fd, 65536):
            into.extend(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("non_blocking", [False, True])
def test_writes_arrive_whole_and_in_order(non_blocking: bool) -> None:
    """Every byte of every write arrives, in order, through a pipe far smaller
    than the data, blocking or not (a non-blocking one is waited on)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, not non_blocking)
    got = bytearray()
    reader = _drain(read_end, got)
    chunks = [bytes([i % 251]) * (i * 7919 % 300_000 + 1) for i in range(40)]

    async def body() -> None:
        out = FdWriter(write_end)
        for chunk in chunks:
            await out.write(chunk)
        await out.drain()
        out.close()
        assert out.unwritten == 0

    try:
        _run(body)
    finally:
        os.close(write_end)
    reader.join(TEST_WAIT_S)
    os.close(read_end)
    assert bytes(got) == b"".join(chunks)


def test_a_blocked_write_leaves_the_loop_running_and_can_be_given_up() -> None:
    """A write into a pipe nobody reads blocks only the writer's thread: timers
    still fire; at the give-up time it raises OutputStalled, counts what it
    never wrote, and later writes fail at once, counted too."""
    read_end, write_end = os.pipe()
    size = 4 * 1024 * 1024

    async def body() -> None:
        loop = asyncio.get_running_loop()
        out = FdWriter(write_end)
        ticks = []
        for delay in (0.05, 0.1, 0.15):
            loop.call_later(delay, ticks.append, delay)
        out.give_up_at(loop.time() + 0.3)
        out.give_up_at(loop.time() + 60)  # a later time does not move it back
        with pytest.raises(OutputStalled):
            await out.write(b"x" * size)
        assert ticks == [0.05, 0.1, 0.15]
        assert 0 < out.unwritten < size  # the pipe took its share
        before = out.unwritten
        with pytest.raises(OutputStalled):
            await out.write(b"later")
        assert out.unwritten == before + 5
        out.close()

    try:
        _run(body)
    finally:
        os.close(read_end)  # the stuck thread now fails with EPIPE and ends
        os.close(write_end)


def test_a_reader_gone_is_broken_pipe() -> None:
    """Writing after the reader closed its end raises BrokenPipeError, whether
    the write is made at once or by the thread (then from the drain or the next
    write)."""
    read_end, write_end = os.pipe()
    os.close(read_end)

    async def body() -> None:
        out = FdWriter(write_end)

        async def write_all(data: bytes) -> None:
            await out.write(data)
            await out.drain()

        with pytest.raises(BrokenPipeError):
            await write_all(b"nobody hears this")  # made at once: the pipe has room
        with pytest.raises(BrokenPipeError):
            await write_all(b"x" * (4 * 1024 * 1024))  # more than any pipe: the thread's
        with pytest.raises(BrokenPipeError):
            await out.write(b"nor this")
        out.close()

    try:
        _run(body)
    finally:
        with contextlib.suppress(OSError):
            os.close(write_end)


def test_give_up_now_ends_a_waiting_write() -> None:
    """give_up() ends a write that is waiting, from another callback."""
    read_end, write_end = os.pipe()

    async def body() -> None:
        loop = asyncio.get_running_loop()
        out = FdWriter(write_end)
        loop.call_later(0.1, out.give_up)
        with pytest.raises(OutputStalled):
            await out.write(b"y" * (4 * 1024 * 1024))
        out.close()

    try:
        _run(body)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_burst_of_tiny_writes_arrives_whole_and_in_order() -> None:
    """100,000 one-byte writes (what a cap of 0 or 1 makes) are queued and
    written in order; none is lost or repeated."""
    read_end, write_end = os.pipe()
    got = bytearray()
    reader = _drain(read_end, got)
    text = bytes(i % 251 for i in range(100_000))

    async def body() -> None:
        out = FdWriter(write_end)
        for i in range(len(text)):
            await out.write(text[i : i + 1])
        await out.drain()
        out.close()

    try:
        _run(body)
    finally:
        os.close(write_end)
    reader.join(TEST_WAIT_S)
    os.close(read_end)
    assert bytes(got) == text


def test_a_write_that_cannot_block_is_made_at_once(tmp_path: Path) -> None:
    """To a regular file, and to a pipe with room for it, a write is made before
    write() returns, with no thread; into a full pipe it is queued instead."""
    path = tmp_path / "out"
    read_end, write_end = os.pipe()

    async def body() -> None:
        with path.open("wb") as handle:
            to_file = FdWriter(handle.fileno())
            await to_file.write(b"at once")
            assert path.read_bytes() == b"at once"
            to_file.close()
        to_pipe = FdWriter(write_end)
        await to_pipe.write(b"room")
        assert os.read(read_end, 100) == b"room"
        assert to_pipe._thread is None  # none was needed
        await to_pipe.write(b"y" * (512 * 1024))  # more than the pipe holds: queued
        assert to_pipe._thread is not None
        to_pipe.give_up()
        to_pipe.close()

    try:
        _run(body)
    finally:
        os.close(read_end)
        os.close(write_end)
