"""Bounded line framing for JSON-lines transports.

Invariants:

- A line is the bytes before a ``\\n`` (a trailing ``\\r`` is kept; JSON ignores it).
- No line longer than ``max_line_bytes`` is ever held whole. Once the bytes
  buffered without a newline pass the limit, the splitter stops keeping them
  and only counts them until the next newline; then it reports an
  :class:`OversizedLine` carrying the full length. Memory is bounded by
  ``max_line_bytes`` plus one read chunk.
- End of input with a partial line pending yields that partial line (or an
  :class:`OversizedLine`) once; nothing is dropped silently.

:class:`LineSplitter` is sans-IO; :func:`read_lines` pumps an asyncio
``StreamReader`` through it in fixed-size chunks, so it works whatever the
reader's own ``limit`` is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final, NamedTuple

__all__ = ("READ_CHUNK_BYTES", "LineSplitter", "OversizedLine", "read_lines")

#: Bytes asked of the stream per read. Large enough that a 16 KiB-delta frame
#: arrives in one or two reads, small enough that discarding an oversized line
#: never holds more than this beyond the limit.
READ_CHUNK_BYTES: Final = 64 * 1024


class OversizedLine(NamedTuple):
    """A line longer than the limit, discarded unread; ``size`` is its length in
    bytes without the newline (so far, when input ended inside it)."""

    size: int
    limit: int


class LineSplitter:
    """Split a byte stream into lines of at most ``max_line_bytes`` bytes.

    Raises:
        ValueError: ``max_line_bytes`` is less than 1.
    """

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
        self._limit = max_line_bytes
        self._buf = bytearray()
        # Bytes of the current line already discarded (> 0: we are skipping it).
        self._skipped = 0
        self._scan_from = 0

    @property
    def max_line_bytes(self) -> int:
        """The longest line this splitter returns whole."""
        return self._limit

    @property
    def buffered(self) -> int:
        """Bytes held for the line in progress (never more than the limit + one feed)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | OversizedLine]:
        """Append ``data`` and return every line it completes, in order."""
        out: list[bytes | OversizedLine] = []
        view = memoryview(data)
        if self._skipped:
            nl = bytes(view).find(b"\n") if len(view) else -1
            if nl < 0:
                self._skipped += len(view)
                return out
            out.append(OversizedLine(self._skipped + nl, self._limit))
            self._skipped = 0
            view = view[nl + 1 :]
        buf = self._buf
        buf += view
        start = 0
        scan = self._scan_from
        while True:
            nl = buf.find(b"\n", scan)
            if nl < 0:
                break
            length = nl - start
            if length > self._limit:
                out.append(OversizedLine(length, self._limit))
            else:
                out.append(bytes(buf[start:nl]))
            start = scan = nl + 1
        pending = len(buf) - start
        if pending > self._limit:
            # Too long already: forget the bytes, keep counting to the newline.
            self._skipped = pending
            buf.clear()
            self._scan_from = 0
        else:
            if start:
                del buf[:start]
            self._scan_from = len(buf)
        return out

    def end(self) -> bytes | OversizedLine | None:
        """Input ended: the unterminated last line, if any, and reset."""
        if self._skipped:
            size, self._skipped = self._skipped, 0
            return OversizedLine(size, self._limit)
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        self._scan_from = 0
        return line


async def read_lines(
    reader: asyncio.StreamReader, max_line_bytes: int
) -> AsyncIterator[bytes | OversizedLine]:
    """Yield the lines of ``reader`` (without newlines) until end of input.

    Lines longer than ``max_line_bytes`` come back as :class:`OversizedLine`
    and are never held whole.

    Raises:
        ValueError: ``max_line_bytes`` is less than 1.
    """
    splitter = LineSplitter(max_line_bytes)
    while True:
        chunk = await reader.read(READ_CHUNK_BYTES)
        if not chunk:
            last = splitter.end()
            if last is not None:
                yield last
            return
        for line in splitter.feed(chunk):
            yield line
