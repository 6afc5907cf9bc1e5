"""Bounded line framing for JSON-lines transports (sans-IO).

Invariants:

Rule 1. A line is the bytes before a ``\\n`` (a trailing ``\\r`` is kept; JSON
        ignores it).
Rule 2. No line longer than ``max_line_bytes`` is ever held whole. Once the
        bytes buffered without a newline pass the limit, the splitter stops
        keeping them and only counts them until the next newline; then it
        reports an :class:`OversizedLine` carrying the full length. Memory is
        bounded by ``max_line_bytes`` plus one chunk fed.
Rule 3. End of input with a partial line pending yields that partial line (or
        an :class:`OversizedLine`) once; nothing is dropped silently.
Rule 4. An :class:`OversizedLine` keeps the line's first
        :data:`OVERSIZED_HEAD_BYTES` (at most the limit): enough for a reader to
        tell whose line it was (its ``id``, its ``tool_call_id``).

The one line splitter of the project: the stdio server and client, the frame
log follower and the NATS follower all split with it.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ()

#: Bytes of a skipped line kept (Rule 4). A JSON-RPC envelope names its id and
#: call id in its first hundred bytes or so; 1 KiB leaves room for a long
#: session id before them, and is nothing beside the limit.
OVERSIZED_HEAD_BYTES: Final = 1024


class OversizedLine(NamedTuple):
    """A line longer than the limit, discarded unread; ``size`` is its length in
    bytes without the newline (so far, when input ended inside it); ``head``
    its first bytes (Rule 4)."""

    size: int
    limit: int
    head: bytes = b""


class LineSplitter:
    """Split bytes read from a pipe or a file, as they come, into lines of at
    most ``max_line_bytes`` bytes.

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
        self._head = b""  # the first bytes of the line being skipped
        self._head_bytes = min(OVERSIZED_HEAD_BYTES, max_line_bytes)

    @property
    def max_line_bytes(self) -> int:
        """The longest line this splitter returns whole."""
        return self._limit

    @property
    def buffered(self) -> int:
        """Bytes held for the line in progress (never more than the limit)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | OversizedLine]:
        """Take ``data`` and return every line it completes, in order."""
        out: list[bytes | OversizedLine] = []
        chunk = data if isinstance(data, bytes) else bytes(data)
        limit = self._limit
        buf = self._buf
        pos = 0
        if self._skipped or buf:
            # Finish the line in progress first; only the new bytes are scanned.
            nl = chunk.find(b"\n")
            held = self._skipped or len(buf)
            if not self._skipped and held + (len(chunk) if nl < 0 else nl) > limit:
                self._head = bytes(buf[: self._head_bytes])
                if len(self._head) < self._head_bytes:
                    self._head += chunk[: self._head_bytes - len(self._head)]
            if nl < 0:
                if self._skipped or held + len(chunk) > limit:
                    self._skipped = held + len(chunk)  # too long: count, do not keep
                    buf.clear()
                else:
                    buf += chunk
                return out
            length = held + nl
            if self._skipped or length > limit:
                out.append(OversizedLine(length, limit, self._head))
                self._head = b""
            else:
                buf += memoryview(chunk)[:nl]
                out.append(bytes(buf))
            self._skipped = 0
            buf.clear()
            pos = nl + 1
        # Lines wholly inside this chunk are sliced out of it: one copy each.
        find = chunk.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            if nl - pos > limit:
                out.append(OversizedLine(nl - pos, limit, chunk[pos : pos + self._head_bytes]))
            else:
                out.append(chunk[pos:nl])
            pos = nl + 1
        rest = len(chunk) - pos
        if rest > limit:
            self._skipped = rest
            self._head = chunk[pos : pos + self._head_bytes]
        elif rest:
            buf += memoryview(chunk)[pos:]
        return out

    def end(self) -> bytes | OversizedLine | None:
        """Input ended: the unterminated last line, if any, and reset."""
        if self._skipped:
            size, self._skipped = self._skipped, 0
            head, self._head = self._head, b""
            return OversizedLine(size, self._limit, head)
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        return line
