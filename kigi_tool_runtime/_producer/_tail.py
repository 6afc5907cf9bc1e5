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
Rule 6. The buffer knows when its limit cut a character in half (the accepted
        bytes end with the start of a character the refused bytes complete), so
        the stream can leave that start unsent instead of flushing a U+FFFD the
        source did not have (``DeltaStreamer`` Rule 5).

Storage: one ``bytearray`` of up to ``capacity + max(capacity, 256 KiB)``
bytes, filled front to back. When the next write does not fit, the newest bytes
still needed move to the front (the source and destination ranges never
overlap), so each retained byte moves at most once per slack's worth of writes.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import Final, NamedTuple

__all__ = ("TailBuffer",)

#: The smallest capacity a tail may have: the longest UTF-8 character is 4 bytes,
#: so a tail of at least 4 bytes always holds the whole newest character, and a
#: character split across writes can always be completed from it.
MIN_TAIL_CAPACITY: Final = 4

#: Storage allocated up front, at most; it grows geometrically as bytes arrive,
#: so a large capacity costs memory only once it is used.
INITIAL_STORAGE_BYTES: Final = 64 * 1024

#: Room kept beyond the capacity (at least the capacity itself): full storage is
#: ``capacity + max(capacity, STORAGE_SLACK_BYTES)``. Compaction moves at most
#: ``capacity`` bytes once per slack's worth of writes, so a small tail (64 KiB)
#: compacts every 256 KiB instead of every 64 KiB: a quarter of the copying, for
#: 256 KiB of memory per busy buffer.
STORAGE_SLACK_BYTES: Final = 256 * 1024

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

    __slots__ = (
        "_buf",
        "_capacity",
        "_cut_character",
        "_cut_probe",
        "_dropped",
        "_end",
        "_limit",
        "_start",
        "_total",
        "_view",
        "_writer",
    )

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
        # Writes go through a memoryview: slice assignment on it costs a third
        # of the bytearray's own for a few KiB, and never resizes anything.
        self._writer = memoryview(self._buf)
        self._view = self._writer.toreadonly()
        self._start = 0
        self._end = 0
        self._total = 0
        self._dropped = 0
        # Whether the limit cut a character in half: the accepted bytes end
        # with its start and the first refused bytes would have completed it.
        self._cut_character = False
        # While undecided: the start of that character and the refused bytes
        # seen after it (None once decided, or before the limit is reached).
        self._cut_probe: bytes | None = b""

    def __repr__(self) -> str:
        retained, dropped, total = self.statistics()
        return (
            f"TailBuffer(capacity={self._capacity}, limit={self._limit},"
            f" retained={retained}, dropped={dropped}, total={total})"
        )

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
        data_type = type(data)
        if data_type is bytes or data_type is bytearray:
            size = len(data)
        elif (
            data_type is memoryview
            and data.format == "B"  # type: ignore[union-attr]
            and data.ndim == 1  # type: ignore[union-attr]
            and data.obj is not self._buf  # type: ignore[union-attr]
        ):
            size = data.nbytes  # type: ignore[union-attr]
        else:
            data = self._plain(data)
            size = len(data)
        limit = self._limit
        if limit is not None and self._total + size > limit:
            accepted = max(limit - self._total, 0)
            if self._cut_probe is not None:
                self._judge_cut(data, accepted)
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
            self._writer[:capacity] = memoryview(data)[size - capacity :]
            self._start = 0
            self._end = capacity
            return size
        end = self._end
        if end + size > len(self._buf):
            end = self._reserve(size, min(end - self._start, capacity - size))
        self._writer[end : end + size] = data
        end += size
        self._end = end
        if end - self._start > capacity:
            self._start = end - capacity
        return size

    def _judge_cut(self, data: bytes | bytearray | memoryview, accepted: int) -> None:
        """Decide, from the bytes refused so far, whether the limit cut a
        character in half: the accepted output ends with the start of a
        character that the refused bytes complete (Rule 6)."""
        probe = self._cut_probe
        assert probe is not None
        if not self._dropped:
            # The first refusal: the accepted output's trailing incomplete
            # character, if any, is what the refused bytes may complete.
            before = bytes(self._view[max(self._end - 3, self._start) : self._end])
            before = (before + bytes(data[max(accepted - 3, 0) : accepted]))[-3:]
            _, used = utf_8_decode(before, "replace", False)
            probe = before[used:]
            if not probe:
                self._cut_probe = None
                return
        probe += bytes(data[accepted : accepted + 3])
        lead = probe[0]
        length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        try:
            utf_8_decode(probe[:length], "strict", len(probe) >= length)
        except UnicodeDecodeError:
            self._cut_probe = None  # invalid whatever follows: not a cut character
            return
        if len(probe) >= length:
            self._cut_character = True
            self._cut_probe = None
        else:
            self._cut_probe = probe  # undecided until more refused bytes come

    def _plain(self, data: object) -> bytes | memoryview:
        """``data`` as flat unsigned bytes that no write of ours can overwrite.

        Raises:
            TypeError: ``data`` is not a bytes-like object.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data must be bytes, bytearray or memoryview, not {type(data).__name__}"
            )
        view = memoryview(data)
        if view.obj is self._buf or not view.c_contiguous:
            # A view of this very storage would be overwritten while being copied.
            return view.tobytes()
        return view.cast("B")

    def _reserve(self, size: int, keep: int) -> int:
        """Make room for ``size`` more bytes after the newest ``keep`` retained
        bytes, moved to the front; return where the new bytes go."""
        buf = self._buf
        end = self._end
        most = self._capacity + max(self._capacity, STORAGE_SLACK_BYTES)
        if len(buf) < most:
            # Grow by replacing the storage: views of the old object stay valid.
            grown = bytearray(min(most, max(2 * len(buf), 2 * (keep + size))))
            grown[:keep] = self._view[end - keep : end]
            self._buf = grown
            self._writer = memoryview(grown)
            self._view = self._writer.toreadonly()
        elif keep:
            # Full-size storage: the source range starts past the slack (itself
            # >= capacity) and the destination ends below `capacity - size`.
            self._writer[:keep] = self._view[end - keep : end]
        self._start = 0
        self._end = keep
        return keep


def cut_character(buffer: TailBuffer) -> bool:
    """Whether ``buffer``'s limit cut a character in half: the retained bytes
    end with the start of a character that refused bytes would have completed
    (Rule 6). Package-private: ``_deltas`` reads it to leave that start unsent."""
    return buffer._cut_character
