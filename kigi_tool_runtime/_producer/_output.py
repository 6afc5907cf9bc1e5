"""``OutputStream``: the two lines a tool author writes to stream output.

A tool that produces bytes writes them into an :class:`OutputStream` and, on
every tick, yields what :meth:`OutputStream.drain` returns; when the source
ends it yields what :meth:`OutputStream.finish` returns::

    stream = OutputStream(spec, capacity=256 * 1024, progress=ctx.wants_progress)
    stream.write(chunk)
    for frame in stream.drain():
        yield frame
    ...
    for frame in stream.finish():
        yield frame
    excerpt = stream.excerpt()          # head + marker + tail, for the model

A producer that writes the wire itself takes the same frames as their
``tool_call_progress`` lines from :meth:`OutputStream.drain_lines` and
:meth:`OutputStream.finish_lines`, without a frame struct built.

Invariants:

Rule 1. Memory is bounded by ``capacity + head_bytes`` whatever is written: the
        tail keeps the newest bytes, the head keeps the first ``head_bytes`` and
        stops growing; bytes in between are only counted.
Rule 2. Every written byte reaches the stream as a delta, or is reported by a
        gap frame (the tail overflowed before it was drained), or is refused at
        ``limit`` and the stream says ``truncated`` (by the time it is finished:
        a refusal no delta frame carried ends the stream with the truncation
        notice, ``DeltaStreamer`` Rule 4).
Rule 3. The omission marker of :meth:`OutputStream.excerpt` exists only in the
        excerpt; it never enters the stream.

Sans-IO: no clock, no event loop. The caller decides when a tick happens.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import Final, NamedTuple

from kigi_tool_protocol import CustomProgress, StreamingSpec
from kigi_tool_protocol._progress_line import encode_delta_lines

from ._chunk import MAX_CONTINUATION_BYTES, cap_of
from ._deltas import (
    Deltas,
    DeltaStreamer,
    drain_buffer_deltas,
    finish_buffer_deltas,
    mark,
    rewind,
    whole_frames,
    whole_pending,
)
from ._tail import TailBuffer

__all__ = ("OutputStream",)

#: Put between the head and the tail of an excerpt whose middle was left out.
#: Blank lines around it keep it off the lines of the output itself, and it says
#: how much is missing so a reader (or a model) never mistakes it for output.
OMISSION_MARKER: Final = "\n\n[... {omitted} bytes of output omitted ...]\n\n"

#: Appended to an excerpt when bytes were refused at the stream's hard limit:
#: they are gone for good, and the reader is told how many.
LIMIT_MARKER: Final = "\n\n[... {dropped} more bytes of output dropped at the output limit ...]\n"

Data = bytes | bytearray | memoryview


class Excerpt(NamedTuple):
    """What :meth:`OutputStream.excerpt` returns: the text for the reader; the
    bytes the stream accepted (``total``); how many of those the text leaves out
    around :data:`OMISSION_MARKER` (``omitted``, 0 when whole); whether bytes
    were refused at the stream's hard limit (``truncated``) and how many
    (``dropped``, announced by :data:`LIMIT_MARKER` at the end of the text)."""

    text: str
    total: int
    omitted: int
    truncated: bool
    dropped: int = 0


#: What a stream without progress drains: nothing.
_NO_DELTAS: Final = Deltas([], 0, False, False)


class ProgressLines(NamedTuple):
    """What :meth:`OutputStream.drain_lines` returns: the ``tool_call_progress``
    lines (each with its newline) and how many frames they hold, so the next
    call's ``seq`` is ``seq + frames``."""

    data: bytes
    frames: int


def _complete_prefix(data: bytes) -> bytes:
    """``data`` without a trailing incomplete UTF-8 sequence (at most 3 bytes)."""
    for back in range(1, min(MAX_CONTINUATION_BYTES, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:
            # A lead byte: whole if its sequence fits in the bytes after it.
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if need <= back else data[:-back]
    return data


def _complete_suffix(data: bytes) -> bytes:
    """``data`` without leading continuation bytes whose lead byte was cut off."""
    skip = 0
    while skip < min(MAX_CONTINUATION_BYTES, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    return data[skip:]


def _flat_bytes(data: Data) -> memoryview:
    """``data`` as one flat run of bytes, so that slicing it counts bytes (a view
    of wider items, several dimensions or with strides is copied first)."""
    view = memoryview(data)
    if view.nbytes != len(view) or not view.c_contiguous:
        return memoryview(view.tobytes())
    return view


class OutputStream:
    """A :class:`TailBuffer` and a :class:`DeltaStreamer` that belong together,
    plus an optional bounded head for the reader's excerpt.

    ``capacity`` is how many of the newest bytes are kept between drains (a
    slow drain beyond it loses the middle, reported as a gap); ``limit`` is a
    hard cap on bytes accepted (past it the stream is ``truncated``);
    ``head_bytes`` is how many of the first bytes to keep for :meth:`excerpt`;
    ``progress=False`` turns :meth:`drain` and :meth:`finish` into no-ops that
    return no frames (the caller does not want progress) while everything is
    still counted.

    Raises:
        ValueError: ``capacity`` is below the tail minimum or below the spec's
            cap (a frame must fit in the tail), ``head_bytes``, ``limit`` or
            ``spec.max_delta_bytes`` is negative.
        TypeError: ``spec`` is not a :class:`StreamingSpec`, or ``capacity``,
            ``head_bytes`` or ``limit`` is not an ``int`` (named in the message).
    """

    __slots__ = (
        "_cap",
        "_drained_total",
        "_finished",
        "_head",
        "_head_bytes",
        "_progress",
        "_streamer",
        "_tail",
    )

    def __init__(
        self,
        spec: StreamingSpec,
        *,
        capacity: int,
        limit: int | None = None,
        head_bytes: int = 0,
        progress: bool = True,
    ) -> None:
        if not isinstance(spec, StreamingSpec):
            raise TypeError(f"spec must be a StreamingSpec, not {type(spec).__name__}")
        for name, value in (("capacity", capacity), ("head_bytes", head_bytes)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise TypeError(f"limit must be an int or None, not {type(limit).__name__}")
        cap = cap_of(spec.max_delta_bytes)
        if capacity < cap:
            raise ValueError(
                f"capacity {capacity} is below the spec's max_delta_bytes {cap}:"
                " the tail must hold at least one whole frame"
            )
        if head_bytes < 0:
            raise ValueError(f"head_bytes must be >= 0, got {head_bytes}")
        self._tail = TailBuffer(capacity, limit)
        self._streamer = DeltaStreamer(spec)
        self._cap = max(cap, 1)
        # `total` when drain() last ran: bytes accepted after it are new, the
        # ones before it that are still pending are a held incomplete character.
        self._drained_total = 0
        self._head = bytearray()
        self._head_bytes = head_bytes
        self._progress = progress
        self._finished = False

    def __repr__(self) -> str:
        return (
            f"OutputStream(subkind={self._streamer.spec.subkind!r}, total={self.total},"
            f" surfaced={self._streamer.last_total})"
        )

    @property
    def buffer(self) -> TailBuffer:
        """The tail buffer (read its ``statistics()`` for the final counts)."""
        return self._tail

    @property
    def total(self) -> int:
        """Bytes accepted so far."""
        return self._tail.total

    @property
    def truncated(self) -> bool:
        """True once a byte was refused at the hard limit."""
        return self._tail.truncated

    @property
    def pending(self) -> int:
        """Bytes accepted but not yet surfaced or skipped by the stream."""
        return self._tail.total - self._streamer.last_total

    @property
    def frame_ready(self) -> bool:
        """True when a full frame's worth of bytes (the cap, at least 1) arrived
        since the last :meth:`drain` and a drain now would emit a frame: a
        caller that drains on a tick should drain now instead of waiting.

        A drain always makes it false: what a drain leaves pending is at most a
        held incomplete character, which is pending but not ready, so a loop
        that waits whenever this is false never spins on a held character.
        """
        if not self._progress or self._tail.total - self._drained_total < self._cap:
            return False
        pending = self._tail.total - self._streamer.last_total
        if pending > MAX_CONTINUATION_BYTES:
            # Some byte lies before the longest sequence that could be held:
            # it is emitted whole or as U+FFFD.
            return True
        tail = self._tail.tail()
        if pending > len(tail):
            return True  # a gap, which a frame always reports
        # Nothing is emitted only when every pending byte is one incomplete
        # sequence that more bytes could still complete.
        return utf_8_decode(tail[len(tail) - pending :], "replace", False)[1] > 0

    @property
    def whole_ready(self) -> bool:
        """True when :meth:`drain_whole` would emit a frame now: a whole frame's
        worth of bytes (a multiple of the cap, at least 1) is pending and is
        more than one incomplete character, or the tail overflowed (a gap)."""
        if not self._progress:
            return False
        whole = whole_pending(self._streamer, self._tail)
        if whole <= 0:
            return False
        if whole > MAX_CONTINUATION_BYTES:
            return True
        tail = self._tail.tail()
        pending = self._tail.total - self._streamer.last_total
        if pending > len(tail):
            return True  # a gap, which a frame always reports
        start = len(tail) - pending
        return utf_8_decode(tail[start : start + whole], "replace", False)[1] > 0

    @property
    def partial_ready(self) -> bool:
        """True when :meth:`drain` would emit more than :meth:`drain_whole`: the
        bytes pending beyond the whole frames are more than a trailing
        incomplete character (which a drain holds)."""
        if not self._progress:
            return False
        pending = self._tail.total - self._streamer.last_total
        rest = pending - whole_pending(self._streamer, self._tail)
        if rest <= 0:
            return False
        # The trailing incomplete character may start before the rest does.
        tail = self._tail.tail()
        last = tail[max(len(tail) - min(pending, MAX_CONTINUATION_BYTES), 0) :]
        held = len(last) - utf_8_decode(last, "replace", False)[1]
        return rest > held

    def write(self, data: Data) -> int:
        """Append ``data``; return how many bytes were accepted (fewer only past
        the hard limit).

        Raises:
            RuntimeError: the stream was finished.
            TypeError: ``data`` is not a bytes-like object.
        """
        if self._finished:
            raise RuntimeError("write() after finish(): the stream has ended")
        room = self._head_bytes - len(self._head)
        if room > 0:
            accepted = self._tail.write(data)
            self._head += _flat_bytes(data)[: min(room, accepted)]
            return accepted
        return self._tail.write(data)

    def drain(self) -> list[CustomProgress]:
        """Every frame due now, oldest first; empty when caught up or when the
        caller does not want progress. A trailing incomplete character is held."""
        if not self._progress:
            return []
        self._drained_total = self._tail.total
        return self._streamer.drain_buffer(self._tail)

    def drain_whole(self) -> list[CustomProgress]:
        """The frames of the whole frames' worth of pending bytes, oldest first:
        what :meth:`drain` would emit had the source stopped at the last
        multiple of the cap; the newer bytes, less than a frame, stay pending
        (a pacer lets them go later, with :meth:`drain`). Empty when the caller
        does not want progress."""
        if not self._progress:
            return []
        return whole_frames(self._streamer, self._tail)

    def finish(self) -> list[CustomProgress]:
        """The last frames: everything still pending, a trailing incomplete
        character flushed as U+FFFD, then, when bytes were refused at the limit
        and no frame has said ``truncated``, the truncation notice (an empty
        delta with ``truncated=True``; see :meth:`DeltaStreamer.finish`). Later
        writes are refused; a second call returns nothing new."""
        self._finished = True
        if not self._progress:
            return []
        return self._streamer.finish_buffer(self._tail)

    def drain_lines(
        self, tool_call_id: str, *, seq: int, session_id: str | None = None
    ) -> ProgressLines:
        """:meth:`drain`, with the frames written as the progress lines of call
        ``tool_call_id`` numbered from ``seq``: the bytes
        :func:`~kigi_tool_protocol.encode_progress_line` writes for each frame
        :meth:`drain` would return, made without building them (the fast path
        for a producer that writes its own lines). The arguments are checked
        on every call, whether or not a frame is due (or progress is wanted);
        on an error nothing is drained.

        Raises:
            ValueError: ``seq`` or a frame's ``seq`` would be outside the u64 range.
            TypeError: ``tool_call_id``, ``session_id`` or ``seq`` has the wrong type.
            WireError: ``tool_call_id`` or ``session_id`` cannot be encoded.
        """
        if not self._progress:
            # No frame to write; the arguments are checked all the same.
            return self._lines(_NO_DELTAS, tool_call_id, seq, session_id, None)
        point = mark(self._streamer)
        deltas = drain_buffer_deltas(self._streamer, self._tail)
        lines = self._lines(deltas, tool_call_id, seq, session_id, point)
        self._drained_total = self._tail.total
        return lines

    def finish_lines(
        self, tool_call_id: str, *, seq: int, session_id: str | None = None
    ) -> ProgressLines:
        """:meth:`finish`, with the frames written as :meth:`drain_lines` writes
        them. On an error nothing is drained and the stream is not finished.

        Raises:
            ValueError, TypeError, WireError: as :meth:`drain_lines`.
        """
        if self._progress:
            point = mark(self._streamer)
            deltas = finish_buffer_deltas(self._streamer, self._tail)
            lines = self._lines(deltas, tool_call_id, seq, session_id, point)
        else:
            lines = self._lines(_NO_DELTAS, tool_call_id, seq, session_id, None)
        self._finished = True
        return lines

    def _lines(
        self,
        deltas: Deltas,
        tool_call_id: str,
        seq: int,
        session_id: str | None,
        point: tuple[int, bool] | None,
    ) -> ProgressLines:
        try:
            data = encode_delta_lines(
                tool_call_id,
                self._streamer.spec.subkind,
                deltas.texts,
                total_bytes=deltas.total,
                truncated=deltas.truncated,
                gap=deltas.gap,
                seq=seq,
                session_id=session_id,
            )
        except BaseException:
            # The tail has not changed since: drained again, the same frames come.
            if point is not None:
                rewind(self._streamer, point)
            raise
        return ProgressLines(data, len(deltas.texts))

    def excerpt(self, max_bytes: int | None = None) -> Excerpt:
        """The output for a reader: whole when it fits in ``max_bytes`` (default:
        the kept head plus the tail's capacity), otherwise the kept head and the
        newest bytes around :data:`OMISSION_MARKER`. Neither side is cut inside a
        character; invalid bytes decode to U+FFFD. Bytes refused at the hard
        limit are announced by :data:`LIMIT_MARKER` at the end.

        Raises:
            ValueError: ``max_bytes`` is negative.
        """
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0 or None, got {max_bytes}")
        total = self._tail.total
        dropped = self._tail.statistics().dropped
        head = bytes(self._head)
        tail_view = self._tail.tail()
        budget = len(head) + len(tail_view) if max_bytes is None else max_bytes
        if total <= budget and total - len(head) <= len(tail_view):
            rest = bytes(tail_view[len(tail_view) - (total - len(head)) :])
            text = (head + rest).decode("utf-8", "replace")
            omitted = 0
        else:
            head = _complete_prefix(head[: budget // 2])
            keep = max(budget - len(head), 0)
            tail = _complete_suffix(bytes(tail_view[max(len(tail_view) - keep, 0) :]))
            omitted = total - len(head) - len(tail)
            text = (
                head.decode("utf-8", "replace")
                + OMISSION_MARKER.format(omitted=omitted)
                + tail.decode("utf-8", "replace")
            )
        if dropped:
            text += LIMIT_MARKER.format(dropped=dropped)
        return Excerpt(text, total, omitted, dropped > 0, dropped)
