"""``TailBuffer``: the newest bytes of a source, with exact accounting.

Invariants:

Rule 1. Every byte offered to :meth:`TailBuffer.write` is either accepted
        (counted in ``total``) or dropped at the hard ``limit`` (counted in
        ``dropped``): ``written == total + dropped``, always.
Rule 2. The buffer retains ``min(total, capacity)`` bytes: the newest accepted
        bytes, oldest first, newest last, exactly as written (never re-encoded).
Rule 3. ``total`` never decreases and never exceeds ``limit``; ``truncated`` is
        true exactly when a byte has been dropped.
Rule 4. A write costs amortized O(len(data)), however large the capacity; a
        write longer than the capacity touches only its last ``capacity`` bytes.
Rule 5. A view handed out by :meth:`TailBuffer.tail` never blocks a write: the
        storage is never resized in place (a ``bytearray`` with an exported view
        cannot be), only overwritten or replaced by a fresh object.

Storage: one ``bytearray`` of up to twice the capacity, filled front to back.
When the next write does not fit, the newest bytes still needed move to the
front (at full size the source and destination ranges never overlap), so each
retained byte is moved at most once per ``capacity`` bytes written.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ("INITIAL_STORAGE_BYTES", "MIN_TAIL_CAPACITY", "TailBuffer", "TailStats")

#: The smallest capacity a tail may have: the longest UTF-8 character is 4 bytes,
#: so a tail of at least 4 bytes always holds the whole newest character, and a
#: character split across writes can always be completed from it.
MIN_TAIL_CAPACITY: Final = 4

#: Storage allocated up front, at most; it grows geometrically up to twice the
#: capacity as bytes arrive, so a large capacity costs memory only once used.
INITIAL_STORAGE_BYTES: Final = 64 * 1024

Data = bytes | bytearray | memoryview


class TailStats(NamedTuple):
    """Counters of a :class:`TailBuffer`: bytes retained now, bytes dropped at the
    limit, and bytes accepted in all (``total``)."""

    retained: int
    dropped: int
    total: int


class TailBuffer:
    """Keep the newest ``capacity`` bytes of a byte source and count every byte.

    ``limit`` (optional) is a hard cap on the bytes accepted: bytes past it are
    refused and counted as dropped, and ``truncated`` becomes true (content was
    lost and will never be delivered).

    Raises:
        ValueError: ``capacity`` is below :data:`MIN_TAIL_CAPACITY`, or ``limit``
            is negative.
        TypeError: ``capacity`` or ``limit`` is not an ``int``.
    """

    __slots__ = ("_buf", "_capacity", "_dropped", "_end", "_limit", "_start", "_total", "_view")

    def __init__(self, capacity: int, limit: int | None = None) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity < MIN_TAIL_CAPACITY:
            raise ValueError(
                f"capacity {capacity} is below {MIN_TAIL_CAPACITY}:"
                " a tail must hold one whole UTF-8 character"
            )
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool):
                raise TypeError(f"limit must be an int or None, not {type(limit).__name__}")
            if limit < 0:
                raise ValueError(f"limit must be >= 0 or None, got {limit}")
        self._capacity = capacity
        self._limit = limit
        self._buf = bytearray(min(2 * capacity, INITIAL_STORAGE_BYTES))
        self._view = memoryview(self._buf).toreadonly()
        self._start = 0
        self._end = 0
        self._total = 0
        self._dropped = 0

    @property
    def capacity(self) -> int:
        """The most bytes retained."""
        return self._capacity

    @property
    def limit(self) -> int | None:
        """The most bytes accepted in all, or ``None`` for no limit."""
        return self._limit

    @property
    def total(self) -> int:
        """Bytes accepted so far (monotonic; bytes dropped at the limit are not
        counted here)."""
        return self._total

    @property
    def truncated(self) -> bool:
        """True once any byte was dropped at the limit."""
        return self._dropped > 0

    def statistics(self) -> TailStats:
        """The buffer's counters: retained, dropped, total."""
        return TailStats(self._end - self._start, self._dropped, self._total)

    def tail(self) -> memoryview:
        """A read-only, zero-copy view of the retained bytes, newest last.

        The view is valid until the next :meth:`write`, which may overwrite the
        bytes under it (holding it never makes a write fail). Copy it with
        ``bytes(view)`` to keep it longer.
        """
        return self._view[self._start : self._end]

    def write(self, data: Data) -> int:
        """Append ``data``; return how many of its bytes were accepted.

        Fewer than ``len(data)`` are accepted only past the ``limit``; the rest
        are dropped and counted.

        Raises:
            TypeError: ``data`` is not a bytes-like object.
        """
        if type(data) is bytes:
            size = len(data)
        else:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"data must be bytes, bytearray or memoryview, not {type(data).__name__}"
                )
            view = memoryview(data)
            if view.obj is self._buf:
                # A view of this very storage would be overwritten while copied.
                data = bytes(view)
            elif view.format != "B" or view.ndim != 1:
                data = view.cast("B")
            size = memoryview(data).nbytes
        limit = self._limit
        if limit is not None and self._total + size > limit:
            accepted = max(limit - self._total, 0)
            self._dropped += size - accepted
            data = memoryview(data)[:accepted]
            size = accepted
        if not size:
            return 0
        self._total += size
        capacity = self._capacity
        if size >= capacity:
            # Only the last `capacity` bytes can survive: copy just those.
            self._reserve(capacity, 0)
            self._buf[:capacity] = memoryview(data)[size - capacity :]
            self._start = 0
            self._end = capacity
            return size
        end = self._end
        if end + size > len(self._buf):
            end = self._reserve(size, min(end - self._start, capacity - size))
        self._buf[end : end + size] = data
        end += size
        self._end = end
        if end - self._start > capacity:
            self._start = end - capacity
        return size

    def _reserve(self, size: int, keep: int) -> int:
        """Make room for ``size`` more bytes after the newest ``keep`` retained
        bytes, moved to the front; return where the new bytes go."""
        buf = self._buf
        end = self._end
        if len(buf) < 2 * self._capacity and keep + size > len(buf) // 2:
            # Grow by replacing the storage: views of the old object stay valid.
            grown = bytearray(min(2 * self._capacity, max(2 * len(buf), 2 * (keep + size))))
            grown[:keep] = self._view[end - keep : end]
            self._buf = grown
            self._view = memoryview(grown).toreadonly()
        elif keep:
            # Full-size storage: the source (beyond `capacity`) and destination
            # (below `capacity - size`) ranges are disjoint.
            buf[:keep] = self._view[end - keep : end]
        self._start = 0
        self._end = keep
        return keep
