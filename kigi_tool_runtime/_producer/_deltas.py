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

from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec

from ._chunk import Tail, advance, bytes_tail, cap_of, check_step
from ._tail import TailBuffer

__all__ = ("DeltaStreamer",)


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
        return self._run_buffer(buffer, False)

    def finish_buffer(self, buffer: TailBuffer) -> list[CustomProgress]:
        """:meth:`finish` over ``buffer``'s tail, total and truncated flag: when
        the buffer refused bytes at its limit and no frame has said
        ``truncated``, the frames end with the truncation notice (Rule 4); a
        character the limit cut in half is left unsent (Rule 5)."""
        return self._run_buffer(buffer, True)

    def _run_buffer(self, buffer: TailBuffer, final: bool) -> list[CustomProgress]:
        # The buffer's tail is a flat byte view and its total is never negative,
        # so nothing needs checking.
        total = buffer.total
        truncated = buffer.truncated
        if total <= self._last_total:
            frames: list[CustomProgress] = []
        else:
            # Rule 5: a character the limit cut in half is held, never flushed.
            flush = final and not buffer.cut_character
            frames = self._loop(buffer.tail(), total, truncated, flush)
        if final and truncated and not self._said_truncated:
            frames.append(self._notice(total))
        return frames

    def _run(self, tail: Tail, total: int, truncated: bool, final: bool) -> list[CustomProgress]:
        if not check_step(total, self._last_total, truncated):
            frames: list[CustomProgress] = []
        else:
            frames = self._loop(bytes_tail(tail), total, truncated, final)
        if final and truncated and not self._said_truncated:
            frames.append(self._notice(total))
        return frames

    def _notice(self, total: int) -> CustomProgress:
        # Rule 4: the one frame that says a truncation no delta frame carried.
        self._said_truncated = True
        payload = PartialResultPayload(delta="", total_bytes=total, truncated=True, gap=False)
        return CustomProgress(subkind=self._subkind, payload=payload)

    def _loop(
        self, tail: memoryview, total: int, truncated: bool, final: bool
    ) -> list[CustomProgress]:
        cursor = self._last_total
        subkind = self._subkind
        cap = self._cap
        size = len(tail)
        frames: list[CustomProgress] = []
        # Arguments are checked once: every later step sees the same tail and a
        # cursor that only grew. Reaching `total` ends the drain without the call
        # that would only say so.
        while cursor < total:
            start = size - (total - cursor)
            if start >= 0:
                # The common step, inlined: no gap, and the decoder found whole
                # characters within the cap (exactly what `advance` does first).
                end = size if size - start <= cap else start + cap
                text, used = utf_8_decode(tail[start:end], "replace", final and end == size)
                if used:
                    cursor += used
                    payload = PartialResultPayload(
                        delta=text, total_bytes=total, truncated=truncated, gap=False
                    )
                    frames.append(CustomProgress(subkind=subkind, payload=payload))
                    continue
            # A gap, a cap inside the first character, or a held sequence.
            progress, cursor = advance(subkind, cap, tail, total, cursor, truncated, final)
            if progress is None:
                break
            frames.append(progress)
        self._last_total = cursor
        if truncated and frames:
            self._said_truncated = True
        return frames
