"""Bounded line framing for JSON-lines transports: the asyncio half (the
sans-IO :class:`LineSplitter` is in ``_wire/_split.py``).

:func:`read_lines` pumps an asyncio
``StreamReader`` through it in fixed-size chunks, so it works whatever the
reader's own ``limit`` is; :class:`LineReader` is an asyncio protocol that
splits bytes as they arrive, without a stream buffer between (one copy fewer
per byte, for pipes the caller creates), pausing its transport while more
than ``high_water`` bytes of lines wait to be taken.

Each also gives its lines in batches (:func:`read_line_batches`,
:meth:`LineReader.batches`): every line that has arrived, in one list, for a
reader that handles each line without waiting (the stdio client's read loop),
so that it pays one step of an async iterator per read, not one per line.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from ._wire._split import LineSplitter, OversizedLine

__all__ = ()

#: Bytes asked of the stream per read. At least what a stream buffers before it
#: pauses its transport (twice its ``limit``; the client's is 512 KiB), so one
#: read takes the whole buffer instead of copying the rest down after each
#: smaller read. Discarding an oversized line holds at most this much at once.
READ_CHUNK_BYTES: Final = 1024 * 1024


#: Bytes of complete lines a :class:`LineReader` holds before it pauses its
#: transport: a few dozen full frames, so decoding one batch overlaps with the
#: pipe filling, while a consumer that stops leaves the data in the pipe.
LINE_QUEUE_BYTES: Final = 1024 * 1024


async def read_lines(
    reader: asyncio.StreamReader, max_line_bytes: int
) -> AsyncIterator[bytes | OversizedLine]:
    """Yield the lines of ``reader`` (without newlines) until end of input.

    Lines longer than ``max_line_bytes`` come back as :class:`OversizedLine`
    and are never held whole.

    Raises:
        ValueError: ``max_line_bytes`` is less than 1.
    """
    async for lines in read_line_batches(reader, max_line_bytes):
        for line in lines:
            yield line


async def read_line_batches(
    reader: asyncio.StreamReader, max_line_bytes: int
) -> AsyncIterator[list[bytes | OversizedLine]]:
    """:func:`read_lines`'s lines, in order, in lists: the lines each read of
    ``reader`` completed (never an empty list).

    Raises:
        ValueError: ``max_line_bytes`` is less than 1.
    """
    splitter = LineSplitter(max_line_bytes)
    while True:
        chunk = await reader.read(READ_CHUNK_BYTES)
        if not chunk:
            last = splitter.end()
            if last is not None:
                yield [last]
            return
        lines = splitter.feed(chunk)
        if lines:
            yield lines


class LineReader(asyncio.Protocol):
    """An asyncio protocol (for ``connect_read_pipe`` and friends) that splits
    what it receives into lines of at most ``max_line_bytes``; iterate it with
    ``async for`` until end of input. Memory is bounded by ``high_water`` plus
    one received chunk plus ``max_line_bytes``.

    Raises:
        ValueError: ``max_line_bytes`` or ``high_water`` is less than 1.
    """

    def __init__(self, max_line_bytes: int, *, high_water: int = LINE_QUEUE_BYTES) -> None:
        if high_water < 1:
            raise ValueError(f"high_water must be at least 1, got {high_water}")
        self._splitter = LineSplitter(max_line_bytes)
        self._high_water = high_water
        self._lines: deque[bytes | OversizedLine] = deque()
        self._queued = 0
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        lines = self._splitter.feed(data)
        if not lines:
            return
        self._lines.extend(lines)
        self._queued += sum(len(line) if isinstance(line, bytes) else 0 for line in lines)
        if self._queued > self._high_water and not self._paused:
            pause = getattr(self._transport, "pause_reading", None)
            if pause is not None:
                pause()
                self._paused = True
        self._wake()

    def eof_received(self) -> bool | None:
        self._end()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._error is None:
            self._error = exc
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            last = self._splitter.end()
            if last is not None:
                self._lines.append(last)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def __aiter__(self) -> AsyncIterator[bytes | OversizedLine]:
        """The lines, in order, until end of input.

        Raises:
            OSError: reading failed (the transport reported an error).
        """
        lines = self._lines
        while await self._arrived():
            line = lines.popleft()
            if isinstance(line, bytes):
                self._queued -= len(line)
            if self._paused and self._queued <= self._high_water // 2:
                self._resume()
            yield line

    async def batches(self) -> AsyncIterator[list[bytes | OversizedLine]]:
        """The lines, in order, until end of input, in lists: each list every
        line that has arrived and not been taken (never an empty list). Taking a
        list takes its lines: the transport, if paused, reads again, so the
        bound on memory holds for a taker that is done with a list before it
        waits (one that waits while it holds a list holds that much more).

        Raises:
            OSError: reading failed (the transport reported an error).
        """
        lines = self._lines
        while await self._arrived():
            batch = list(lines)
            lines.clear()
            self._queued = 0
            if self._paused:
                self._resume()
            yield batch

    async def _arrived(self) -> bool:
        """Wait until a line is there (True) or the input has ended with none
        left (False).

        Raises:
            OSError: reading failed (the transport reported an error).
        """
        while not self._lines:
            if self._ended:
                if self._error is not None:
                    raise self._error
                return False
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return True

    def _resume(self) -> None:
        """The transport, paused, reads again."""
        resume = getattr(self._transport, "resume_reading", None)
        if resume is not None:
            resume()
        self._paused = False
