"""Live tail of an append-only JSON-lines frame log, resumable from a byte offset.

Invariants:

Rule 1. An offset always sits at the start of a line. A read returns the
        complete lines after it and the offset of the first incomplete one: a
        line the writer is still writing is left for the next read, never
        returned twice and never returned in part. A read ends at the size the
        file had when it began, so a writer appending faster than it reads
        cannot keep it going.
Rule 2. Reading from a saved offset and absorbing the fold of what was read
        equals folding the file whole (the :class:`Reassembler` fold contract),
        so a viewer that reconnects is whole again on its first read.
Rule 3. Memory per read is bounded by the line limit plus one block: a line
        longer than the limit is never held whole; it is reported as an
        :class:`OversizedLine` once its newline has arrived, and skipped.
Rule 4. The log is append-only. A file shorter than the saved offset was
        replaced or truncated, which is reported as an error, not read. A
        :class:`Follower` also remembers which file it read (device and inode)
        and the bytes just before its offset, and reports a log replaced under
        its path (rotated, or rewritten by a rename) or truncated in place and
        rewritten (``copytruncate``) even when the new content is already
        longer than the offset.

Only this module's :meth:`Follower.follow` touches asyncio, to sleep between polls.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO, Final

from .._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES, Appended, Reassembler, SeqScope
from .._wire._split import LineSplitter, OversizedLine

__all__ = ("Follower",)

#: Bytes read from the log per system call. Large enough that a 16 KiB-delta
#: frame takes one or two reads, small enough that skipping an over-long line
#: holds at most this much of it at a time.
READ_BLOCK_BYTES: Final = 64 * 1024

#: Seconds between polls in :meth:`Follower.follow`: the producer's own default
#: tick, so a follower shows each tick's frames about as they are written.
DEFAULT_POLL_INTERVAL: Final = 0.1

# JSON's whitespace (a line of nothing else holds no value: a blank line).
_JSON_SPACE: Final = b" \t\r"


def read_from(
    path: str | os.PathLike[str],
    offset: int = 0,
    *,
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    keep_empty: bool = False,
) -> tuple[list[bytes | OversizedLine], int]:
    """The complete lines of ``path`` after byte ``offset``, and the offset to
    read from next.

    Lines come back without their newline; empty lines, and lines of only
    JSON whitespace, are skipped (kept as ``b""`` with ``keep_empty``, so a
    caller can number lines as an editor does); a line longer than
    ``max_line_bytes`` comes back as an :class:`OversizedLine` (once it is
    complete). An absent file has no lines
    yet. The list holds the whole rest of the file: :func:`iter_lines` reads
    it one line at a time.

    Raises:
        ValueError: ``offset`` is negative, ``max_line_bytes`` is less than 1, or
            the file is shorter than ``offset`` (an append-only log never shrinks).
        OSError: the file exists but cannot be read.
    """
    _check_read(offset, max_line_bytes)
    lines: list[bytes | OversizedLine] = []
    opened = _open(path, offset, None, None)
    if opened is None:
        return lines, offset
    handle, size = opened
    with handle:
        for line, past in _split(handle, offset, max_line_bytes, keep_empty, size - offset):
            offset = past
            if line is not None:
                lines.append(line)
    return lines, offset


def iter_lines(
    path: str | os.PathLike[str],
    offset: int = 0,
    *,
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    keep_empty: bool = False,
) -> Iterator[tuple[bytes | OversizedLine, int]]:
    """Like :func:`read_from`, one line at a time: each complete line after
    ``offset`` with the offset just past it. Memory is bounded by the line
    limit plus one block, whatever the file's size.

    Raises:
        ValueError: ``offset`` is negative, ``max_line_bytes`` is less than 1, or
            the file is shorter than ``offset`` (an append-only log never shrinks).
        OSError: the file exists but cannot be read.
    """
    _check_read(offset, max_line_bytes)
    opened = _open(path, offset, None, None)
    if opened is None:
        return
    handle, size = opened
    with handle:
        for line, past in _split(handle, offset, max_line_bytes, keep_empty, size - offset):
            if line is not None:
                yield line, past


# A file's identity: (device, inode). A log rotated or replaced under the same
# path has another one.
_Identity = tuple[int, int]

#: Bytes just before the saved offset that a :class:`Follower` keeps and
#: compares on every poll: a log truncated in place and rewritten past the
#: offset (``copytruncate`` rotation) keeps its device and inode, and only its
#: content before the offset tells it apart. The end of the last line read
#: (its ``seq`` and ``total_bytes``) is enough to tell.
FINGERPRINT_BYTES: Final = 64


def _check_read(offset: int, max_line_bytes: int) -> None:
    if offset < 0:
        raise ValueError(f"offset must not be negative, got {offset}")
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")


def _open(
    path: str | os.PathLike[str],
    offset: int,
    expected: _Identity | None,
    fingerprint: bytes | None,
) -> tuple[BinaryIO, int] | None:
    """``path`` opened and positioned at ``offset``, after checking it is the
    file read so far, with its size then (a read ends there: a writer
    appending faster than it reads, or a file that never ends, cannot keep it
    going); ``None`` when it does not exist (yet)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(handle.fileno())
        identity = (info.st_dev, info.st_ino)
        if expected is not None and identity != expected:
            raise ValueError(
                f"{os.fspath(path)!r} is not the file read up to offset {offset} (it was"
                " replaced or rotated); follow the new log from offset 0"
            )
        if info.st_size < offset:
            raise ValueError(
                f"{os.fspath(path)!r} is {info.st_size} bytes, shorter than the saved offset"
                f" {offset}; an append-only frame log never shrinks (was it replaced?)"
            )
        if fingerprint:
            handle.seek(offset - len(fingerprint))
            if handle.read(len(fingerprint)) != fingerprint:
                raise ValueError(
                    f"{os.fspath(path)!r} no longer holds, before offset {offset}, the bytes"
                    " read there (it was truncated and rewritten, as copytruncate rotation"
                    " does); follow the new log from offset 0"
                )
        handle.seek(offset)
    except BaseException:
        handle.close()
        raise
    return handle, info.st_size


def _bytes_before(handle: BinaryIO, offset: int) -> bytes:
    """The (up to :data:`FINGERPRINT_BYTES`) bytes before ``offset``."""
    start = max(offset - FINGERPRINT_BYTES, 0)
    handle.seek(start)
    return handle.read(offset - start)


def _split(
    handle: BinaryIO, offset: int, limit: int, keep_empty: bool, size: int
) -> Iterator[tuple[bytes | OversizedLine | None, int]]:
    # Each consumed line with the offset past it; None for a skipped empty line.
    # ``size``: the bytes to read from ``offset``; what follows is the next read's.
    # The project's one splitter cuts the lines; a line still open at the end
    # stays in it, unconsumed, for the next read.
    splitter = LineSplitter(limit)
    read = handle.read
    past = offset
    while True:
        block: bytes = read(min(READ_BLOCK_BYTES, size))
        size -= len(block)
        if not block:
            return
        for line in splitter.feed(block):
            if isinstance(line, OversizedLine):
                past += line.size + 1
                yield line, past
                continue
            past += len(line) + 1
            if line.strip(_JSON_SPACE):
                yield line, past
            else:
                yield (b"" if keep_empty else None), past


class Follower:
    """Follow a frame log: each :meth:`poll` reads what was appended since the
    last one and absorbs it into :attr:`reassembler`.

    Start from ``offset`` (a saved :attr:`offset` after a reconnect) with the
    ``reassembler`` that holds the fold of everything before it, or with a
    fresh one, made with ``seq_scope`` (``"call"``: the log of this project's
    server; ``"connection"``: a hub's) and ``keep_text`` (ignored when
    ``reassembler`` is given). A fresh reassembler reads from the start of the
    log only when ``offset`` is 0: from a later offset, what came before is not
    reported as a missing prefix.

    Raises:
        ValueError: ``offset`` is negative, ``max_line_bytes`` is less than 1,
            or ``seq_scope`` is neither ``"call"`` nor ``"connection"``.
    """

    __slots__ = (
        "_fingerprint",
        "_identity",
        "_limit",
        "_lines",
        "_offset",
        "_path",
        "_reassembler",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        offset: int = 0,
        *,
        reassembler: Reassembler | None = None,
        max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        seq_scope: SeqScope = "call",
        keep_text: bool = True,
    ) -> None:
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
        self._path = path
        self._offset = offset
        self._limit = max_line_bytes
        self._identity: _Identity | None = None  # the file read, once one was
        self._lines = 0  # complete lines read, blank ones included
        # The bytes just before the offset (Rule 4), once they were read.
        self._fingerprint: bytes | None = None
        self._reassembler = (
            reassembler
            if reassembler is not None
            else Reassembler(
                max_record_bytes=max_line_bytes,
                seq_scope=seq_scope,
                keep_text=keep_text,
                from_start=offset == 0,
            )
        )

    @property
    def offset(self) -> int:
        """Where the next read starts: save it to resume after a reconnect."""
        return self._offset

    @property
    def lines_read(self) -> int:
        """Complete lines read since :attr:`offset` was first set, blank lines
        included: the next line's number, counted as an editor counts them from
        where reading began, is this plus one."""
        return self._lines

    @property
    def reassembler(self) -> Reassembler:
        """The fold of everything read so far."""
        return self._reassembler

    def poll(self) -> Reassembler:
        """Read what was appended, absorb it, and return the fold of just that.

        Raises:
            ValueError: the log shrank below :attr:`offset`, or another file
                took its path, or it was truncated and rewritten (Rule 4).
            OSError: the log cannot be read.
        """
        fresh = self._reassembler.spawn()
        absorb = fresh.absorb_record
        for _, line in self._new_lines():
            absorb(line)
        self._reassembler.absorb(fresh)
        return fresh

    def poll_appended(self) -> list[Appended]:
        """Read what was appended and answer, record by record, what each added
        (for printers that print as frames land).

        Raises:
            ValueError: the log shrank below :attr:`offset`, or another file
                took its path, or it was truncated and rewritten (Rule 4).
            OSError: the log cannot be read.
        """
        return [item for _, item in self.poll_numbered()]

    def poll_numbered(self) -> list[tuple[int, Appended]]:
        """:meth:`poll_appended`, each record with its line number counted from
        where reading began (blank lines count, as in an editor).

        Raises:
            ValueError: the log shrank below :attr:`offset`, or another file
                took its path, or it was truncated and rewritten (Rule 4).
            OSError: the log cannot be read.
        """
        settled = self._reassembler.settled
        return [(number, settled(item)) for number, item in list(self.iter_numbered())]

    def iter_appended(self) -> Iterator[Appended]:
        """Like :meth:`poll_appended`, one record at a time, so a printer holds
        one record whatever was appended; :attr:`offset` moves past each
        record as it is absorbed.

        Raises:
            ValueError: the log shrank below :attr:`offset`, or another file
                took its path, or it was truncated and rewritten (Rule 4).
            OSError: the log cannot be read.
        """
        for _, item in self.iter_numbered():
            yield item

    def iter_numbered(self) -> Iterator[tuple[int, Appended]]:
        """:meth:`iter_appended`, each record with its line number (as
        :meth:`poll_numbered` counts them).

        Raises:
            ValueError: the log shrank below :attr:`offset`, or another file
                took its path, or it was truncated and rewritten (Rule 4).
            OSError: the log cannot be read.
        """
        appended = self._reassembler.appended
        for number, line in self._new_lines():
            yield number, appended(line)

    def _new_lines(self) -> Iterator[tuple[int, bytes | OversizedLine]]:
        # Each record with its line number; blank lines count but are no record.
        opened = _open(self._path, self._offset, self._identity, self._fingerprint)
        if opened is None:
            return
        handle, size = opened
        with handle:
            info = os.fstat(handle.fileno())
            self._identity = (info.st_dev, info.st_ino)
            if self._fingerprint is None and self._offset:
                self._fingerprint = _bytes_before(handle, self._offset)
            try:
                for line, past in _split(
                    handle, self._offset, self._limit, False, size - self._offset
                ):
                    self._offset = past
                    self._lines += 1
                    if line is not None:
                        yield self._lines, line
            finally:
                if self._offset:
                    self._fingerprint = _bytes_before(handle, self._offset)

    def watch(
        self, interval: float = DEFAULT_POLL_INTERVAL, *, once: bool = False, batch: int = 64
    ) -> Iterator[list[tuple[int, Appended]]]:
        """Poll every ``interval`` seconds (sleeping in between) and yield what
        each poll appends, numbered as :meth:`iter_numbered` numbers it, in
        lists of at most ``batch`` records, so a large log never sits in memory
        whole. With ``once``, stop after the first poll (the log read to its
        current end). The synchronous twin of :meth:`follow`, for a thread or a
        command line; ``kigi-stream follow`` is this loop.

        Raises:
            ValueError: ``interval`` is not positive, ``batch`` is below 1, or
                the log shrank or was replaced.
            OSError: the log cannot be read.
        """
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        while True:
            records = self.iter_numbered()
            settled = self._reassembler.settled
            while chunk := list(itertools.islice(records, batch)):
                yield [(number, settled(item)) for number, item in chunk]
            if once:
                return
            time.sleep(interval)

    async def follow(self, interval: float = DEFAULT_POLL_INTERVAL) -> AsyncIterator[Reassembler]:
        """Poll every ``interval`` seconds, yielding each non-empty fold of new
        records, until the caller stops iterating.

        Raises:
            ValueError: ``interval`` is not positive, or the log shrank or was
                replaced.
            OSError: the log cannot be read.
        """
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        while True:
            fresh = self.poll()
            if fresh.records:
                yield fresh
            await asyncio.sleep(interval)
