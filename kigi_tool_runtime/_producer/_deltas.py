"""``DeltaStreamer``: :func:`stream_chunk` with the cursor kept for you.

Invariants:

Rule 1. The cursor only moves forward, and only by what :func:`stream_chunk`
        returns; no frame is produced any other way.
Rule 2. :meth:`DeltaStreamer.drain` returns every frame the tail allows right
        now: afterwards the cursor is at ``total`` or before a held incomplete
        character. :meth:`DeltaStreamer.finish` also flushes that character, so
        afterwards the cursor is at ``total`` (unless Rule 5 drops it).
Rule 3. A drain always terminates: every frame but a gap frame consumes at least
        one byte, and a gap frame moves the cursor to the surviving tail.
Rule 4. A truncation is always said. :meth:`DeltaStreamer.finish` ends with one
        truncation notice, ``PartialResultPayload(delta="", total_bytes=total,
        truncated=True, gap=False)``, when the source says ``truncated`` but no
        frame this streamer emitted has: bytes refused whole at a limit never
        move ``total``, so no delta frame could carry the flag. It is the only
        non-gap frame with an empty delta, and only at the end; it is emitted
        at most once (a second ``finish`` does not repeat it). It is a rule of
        this source layer: :func:`stream_chunk` never makes it.
Rule 5. A truncated source never ends with a U+FFFD it did not have: bytes of
        a character the limit cut in half (the refused bytes would have
        completed it) are part of the truncation, so
        :meth:`DeltaStreamer.finish_buffer` leaves them unsent (at most 3
        bytes; the stream says ``truncated``) instead of flushing them. Bytes
        that no refused byte completes are invalid and flushed as U+FFFD.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import NamedTuple

from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec

from ._chunk import Tail, advance, bytes_tail, cap_of, check_step, next_delta
from ._tail import TailBuffer, cut_character

__all__ = ("DeltaStreamer",)


class Deltas(NamedTuple):
    """The frames of one drain, as their parts: each delta's
    text, oldest first, and what they share (all frames of one drain carry the
    same ``total_bytes`` and ``truncated``; only the first can report a gap)."""

    texts: list[str]
    total: int
    truncated: bool
    gap: bool


class DeltaStreamer:
    """Turn one byte source into capped, UTF-8-complete deltas, keeping the cursor.

    Call :meth:`drain` (or :meth:`drain_buffer`) on every tick and
    :meth:`finish` (or :meth:`finish_buffer`) once the source has ended.

    Raises:
        ValueError: ``spec.max_delta_bytes`` is negative.
    """

    __slots__ = ("_cap", "_last_total", "_said_truncated", "_spec", "_subkind")

    def __init__(self, spec: StreamingSpec) -> None:
        self._cap = cap_of(spec.max_delta_bytes)
        self._subkind = spec.subkind
        self._spec = spec
        self._last_total = 0
        # Whether a frame of this streamer has carried truncated=true (Rule 4).
        self._said_truncated = False

    def __repr__(self) -> str:
        return f"DeltaStreamer(subkind={self._spec.subkind!r}, last_total={self._last_total})"

    @property
    def spec(self) -> StreamingSpec:
        """The streaming spec every frame follows."""
        return self._spec

    @property
    def last_total(self) -> int:
        """How many source bytes have been surfaced or skipped so far."""
        return self._last_total

    def step(
        self, tail: Tail, total: int, truncated: bool = False, *, final: bool = False
    ) -> CustomProgress | None:
        """At most one frame (see :func:`stream_chunk`); advances the cursor.

        Raises:
            ValueError: ``total`` is negative.
            TypeError: ``tail`` is not a bytes-like object, ``total`` is not an
                ``int``, or ``truncated`` is not a ``bool``.
        """
        last_total = self._last_total
        if not check_step(total, last_total, truncated):
            return None
        progress, self._last_total = advance(
            self._subkind, self._cap, bytes_tail(tail), total, last_total, truncated, final
        )
        if truncated and progress is not None:
            self._said_truncated = True
        return progress

    def drain(self, tail: Tail, total: int, truncated: bool = False) -> list[CustomProgress]:
        """Every frame the tail allows now, oldest first (empty when caught up).

        A trailing incomplete character stays held for the next call.

        Raises:
            ValueError: ``total`` is negative.
            TypeError: ``tail`` is not a bytes-like object, ``total`` is not an
                ``int``, or ``truncated`` is not a ``bool``.
        """
        return self._run(tail, total, truncated, False)

    def finish(self, tail: Tail, total: int, truncated: bool = False) -> list[CustomProgress]:
        """Like :meth:`drain`, for a source that has ended: a trailing incomplete
        character is flushed as U+FFFD, and the cursor ends at ``total``.

        When ``truncated`` is true and no frame of this streamer has said so
        yet, the last frame returned is the truncation notice (Rule 4):
        ``delta=""``, ``total_bytes=total``, ``truncated=True``, ``gap=False``.
        It comes once; a later ``finish`` does not repeat it.

        Raises:
            ValueError: ``total`` is negative.
            TypeError: ``tail`` is not a bytes-like object, ``total`` is not an
                ``int``, or ``truncated`` is not a ``bool``.
        """
        return self._run(tail, total, truncated, True)

    def drain_buffer(self, buffer: TailBuffer) -> list[CustomProgress]:
        """:meth:`drain` over ``buffer``'s tail, total and truncated flag."""
        return self._frames(self._run_buffer(buffer, False))

    def finish_buffer(self, buffer: TailBuffer) -> list[CustomProgress]:
        """:meth:`finish` over ``buffer``'s tail, total and truncated flag: when
        the buffer refused bytes at its limit and no frame has said
        ``truncated``, the frames end with the truncation notice (Rule 4); a
        character the limit cut in half is left unsent (Rule 5)."""
        return self._frames(self._run_buffer(buffer, True))

    def _run_buffer(self, buffer: TailBuffer, final: bool) -> Deltas:
        # The buffer's tail is a flat byte view and its total is never negative,
        # so nothing needs checking.
        total = buffer.total
        truncated = buffer.truncated
        if total > self._last_total:
            # Rule 5: a character the limit cut in half is held, never flushed.
            flush = final and not cut_character(buffer)
            deltas = self._loop(buffer.tail(), total, truncated, flush)
            if deltas.texts:
                return deltas
        if final and truncated and not self._said_truncated:
            return self._notice(total)
        return Deltas([], total, truncated, False)

    def _run(self, tail: Tail, total: int, truncated: bool, final: bool) -> list[CustomProgress]:
        if check_step(total, self._last_total, truncated):
            deltas = self._loop(bytes_tail(tail), total, truncated, final)
            if deltas.texts:
                return self._frames(deltas)
        if final and truncated and not self._said_truncated:
            return self._frames(self._notice(total))
        return []

    def _notice(self, total: int) -> Deltas:
        # Rule 4: the one frame that says a truncation no delta frame carried.
        self._said_truncated = True
        return Deltas([""], total, True, False)

    def _frames(self, deltas: Deltas) -> list[CustomProgress]:
        texts, total, truncated, gap = deltas
        subkind = self._subkind
        frames = [
            CustomProgress(
                subkind=subkind,
                payload=PartialResultPayload(
                    delta=text, total_bytes=total, truncated=truncated, gap=False
                ),
            )
            for text in texts
        ]
        if gap:
            payload = PartialResultPayload(
                delta=texts[0], total_bytes=total, truncated=truncated, gap=True
            )
            frames[0] = CustomProgress(subkind=subkind, payload=payload)
        return frames

    def _loop(self, tail: memoryview, total: int, truncated: bool, final: bool) -> Deltas:
        cursor = self._last_total
        cap = self._cap
        size = len(tail)
        texts: list[str] = []
        gap = False
        pending = total - cursor
        if cap < pending <= size:
            # More than one frame is due and nothing was lost. When the pending
            # bytes are all ASCII, every byte is a whole character: decode them
            # once and cut the text every `cap` characters, the deltas the steps
            # below would make one decode at a time.
            run = bytes(tail[size - pending :])
            if run.isascii():
                text = run.decode("ascii")
                step = cap or 1  # a cap of 0 is one character a frame
                texts = [text[at : at + step] for at in range(0, pending, step)]
                cursor = total
        elif pending > size:
            # The middle was lost: the first frame reports the gap, and leaves
            # the cursor inside the tail, so no later frame of this run can.
            first, gap, cursor = next_delta(cap, tail, total, cursor, final)
            texts.append(first)  # type: ignore[arg-type]  # a gap always makes a frame
        # Arguments are checked once: every later step sees the same tail and a
        # cursor that only grew. Reaching `total` ends the drain without the call
        # that would only say so.
        while cursor < total:
            start = size - (total - cursor)
            # The common step, inlined: the decoder found whole characters
            # within the cap (exactly what `next_delta` does first).
            end = size if size - start <= cap else start + cap
            text, used = utf_8_decode(tail[start:end], "replace", final and end == size)
            if used:
                cursor += used
                texts.append(text)
                continue
            # A cap inside the first character, or a held sequence.
            delta, _, cursor = next_delta(cap, tail, total, cursor, final)
            if delta is None:
                break
            texts.append(delta)
        self._last_total = cursor
        if truncated and texts:
            self._said_truncated = True
        return Deltas(texts, total, truncated, gap)


# What ``OutputStream`` takes of a streamer besides its API (package-private):
# a drain as :class:`Deltas`, and a mark to go back to when the lines of a
# drain could not be written.


def mark(streamer: DeltaStreamer) -> tuple[int, bool]:
    """``streamer``'s cursor and truncation flag, for :func:`rewind`."""
    return streamer._last_total, streamer._said_truncated


def rewind(streamer: DeltaStreamer, mark: tuple[int, bool]) -> None:
    """Take ``streamer`` back to ``mark`` (from :func:`mark`): the frames drained
    since are due again, over the same tail."""
    streamer._last_total, streamer._said_truncated = mark


def drain_buffer_deltas(streamer: DeltaStreamer, buffer: TailBuffer) -> Deltas:
    """:meth:`DeltaStreamer.drain_buffer`'s frames as :class:`Deltas`."""
    return streamer._run_buffer(buffer, False)


def finish_buffer_deltas(streamer: DeltaStreamer, buffer: TailBuffer) -> Deltas:
    """:meth:`DeltaStreamer.finish_buffer`'s frames as :class:`Deltas`."""
    return streamer._run_buffer(buffer, True)


def whole_pending(streamer: DeltaStreamer, buffer: TailBuffer) -> int:
    """How many of ``buffer``'s pending bytes make whole frames: the largest
    multiple of the cap (of 1 for a cap of 0) that is pending."""
    pending = buffer.total - streamer._last_total
    step = streamer._cap or 1
    return pending - pending % step


def drain_whole_buffer_deltas(streamer: DeltaStreamer, buffer: TailBuffer) -> Deltas:
    """The frames of :func:`whole_pending`'s bytes only, as :class:`Deltas`:
    the drain the stream would have made when the source had produced just
    those bytes (so the frames end at the ``total_bytes`` they carry, as every
    drain's do; a trailing incomplete character is held). The newer bytes that
    make less than a frame stay pending, unless the tail overflowed (a drain
    that reports a gap) or the source was truncated at its limit: those take
    everything, as :func:`drain_buffer_deltas` does."""
    total = buffer.total
    whole = whole_pending(streamer, buffer)
    if whole <= 0:
        return Deltas([], total, buffer.truncated, False)
    end = streamer._last_total + whole
    tail = buffer.tail()
    if buffer.truncated or total - streamer._last_total > len(tail):
        # A truncated source's total never grows again, and a frame that says
        # truncated carries the final total: nothing is left to wait for.
        # The tail overflowed: the drain reports the gap as a full tail shows
        # it (the survivors start where a tail of its capacity starts at
        # `total`), so it is a whole drain, the survivors caught up at once.
        return streamer._run_buffer(buffer, False)
    # The newest `total - end` bytes (fewer than a cap, so inside the tail,
    # which holds at least one frame) are left out.
    view = tail[: len(tail) - (total - end)]
    return streamer._loop(view, end, buffer.truncated, False)


def whole_frames(streamer: DeltaStreamer, buffer: TailBuffer) -> list[CustomProgress]:
    """:func:`drain_whole_buffer_deltas` as frames."""
    return streamer._frames(drain_whole_buffer_deltas(streamer, buffer))
