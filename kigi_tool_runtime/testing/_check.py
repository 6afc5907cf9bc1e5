"""``check_stream``: assert every invariant of the streaming contract for one
frame sequence against the bytes the tool produced.

What a stream must satisfy (docs/design.md §2, from the consumer's side):

Rule 1. Deltas continue the source: every frame that is not a gap frame starts
        exactly where the previous frame ended, and its delta is the decode of
        the source bytes it consumed (``"replace"`` for invalid bytes, one
        U+FFFD per maximal subpart). So without a gap the concatenated deltas
        equal ``source.decode("utf-8", "replace")``, and valid text comes back
        exactly, with no U+FFFD the source does not contain.
Rule 2. Every frame consumes the longest prefix of the bytes pending at its
        ``total_bytes`` that holds at most ``cap`` source bytes and does not
        end inside a character more bytes could complete, or is a single
        character longer than the cap; no frame is empty except a gap frame and the truncation
        notice: the last frame, ``truncated``, at the same ``total_bytes`` as
        the frame before it (0 when it is the only one), when no earlier frame
        said ``truncated``. It says a refusal no delta frame could carry.
Rule 3. ``total_bytes`` never decreases, never exceeds what the source produced,
        and the last frame's equals the source's count; by then every byte has
        been delivered or reported lost, except the start of a character the
        limit cut in half, which a truncated stream leaves unsent.
Rule 4. Every loss is reported: bytes are skipped only right before a gap
        frame, whose text must be the source's bytes somewhere after the
        previous position (at least one byte lost, leading orphaned
        continuation bytes skipped, never decoded). Lost bytes are counted.
        Where a gap's survivors begin is pinned by a known ``tail_capacity``
        or by the end of a complete stream; otherwise a start that fits is
        taken (the one a drained run implies, else the earliest), and the
        span says it is approximate.
Rule 5. ``truncated`` is cumulative, is set only when bytes were refused at a
        limit, and once it is set ``total_bytes`` stops growing. A stream whose
        refused bytes no delta frame carried says it with the truncation notice
        (rule 2), so a refusal can always be said; it is required when the
        caller asks (``truncated=True``).

Deltas are text a JSON encoder can send: a lone surrogate is refused.

The checker knows nothing of how the stream was made: it judges only frames
and source bytes, so it can judge any tool. Its time is linear in the source
and the frames, on broken streams too: a gap's start is searched among a
bounded number of failing candidates (:data:`MAX_FAILED_STARTS`). The first broken frame is named in
a :class:`StreamCheckError` with the rule it broke and a short excerpt.
"""

from __future__ import annotations

import codecs
import itertools
import re
import threading
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from kigi_tool_protocol import (
    CustomProgress,
    DecodeError,
    PartialResultPayload,
    TextProgress,
    ToolCallProgressFrame,
)
from kigi_tool_protocol._codec import convert
from kigi_tool_protocol._progress import ContentProgress

from .._producer._chunk import MAX_CONTINUATION_BYTES, cap_of

__all__ = ("CheckedStream", "StreamCheckError", "check_stream")


#: The longest UTF-8 encoding of one character: bounds the source window that
#: can decode to a delta of a given length.
MAX_CHAR_BYTES: Final = 4

#: Characters and bytes quoted in an error message: enough to recognise the
#: place, short enough to read in a test report.
EXCERPT_CHARS: Final = 40

#: How many candidate starts of a gap's survivors may fail before the search
#: gives up and reports the closest miss: a source that repeats itself offers
#: a start at nearly every byte, and trying them all is quadratic. A real
#: stream's survivors fit at one of the first few.
MAX_FAILED_STARTS: Final = 64

_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: Kinds of ``tool_call_progress`` frames that never carry a partial result.
_NON_DELTA_KINDS: Final = frozenset({"text", "content"})

_REPLACEMENT: Final = "\ufffd"


class StreamCheckError(AssertionError):
    """Raised by :func:`check_stream` when a frame sequence breaks the streaming
    contract. The message names the first broken frame by its index in the
    sequence given, the rule it broke, and an excerpt of the frame and source.

    ``frame`` is that index (``None`` when the fault is the sequence as a whole,
    e.g. no frames for a non-empty source); ``reason`` is the message's first
    line without the frame prefix; ``detail`` the excerpt lines after it.
    """

    def __init__(self, frame: int | None, reason: str, detail: str = "") -> None:
        self.frame = frame
        self.reason = reason
        self.detail = detail
        where = "stream" if frame is None else f"frame {frame}"
        super().__init__(f"{where}: {reason}" + (f"\n{detail}" if detail else ""))


class LostSpan(NamedTuple):
    """Source bytes ``[start, end)`` lost just before gap frame ``frame``.

    ``exact``: the span is pinned (a known ``tail_capacity``, or the end of a
    complete stream); when false it is a placement that fits, and the truth
    may lie elsewhere between the previous position and the gap's total.
    """

    frame: int
    start: int
    end: int
    exact: bool = True

    @property
    def lost_bytes(self) -> int:
        """How many bytes were lost (skipped orphans included)."""
        return self.end - self.start


class CheckedStream(NamedTuple):
    """What :func:`check_stream` found in a stream that keeps the contract.

    ``text`` is the concatenated deltas; ``frames`` how many partial-result
    frames were checked; ``total_bytes`` the last frame's count (0 without
    frames); ``lost`` every gap, in order; ``truncated`` the last frame's flag.
    """

    text: str
    frames: int
    total_bytes: int
    lost: tuple[LostSpan, ...]
    truncated: bool

    @property
    def lost_exact(self) -> bool:
        """Whether every lost span is pinned, not only a placement that fits."""
        return all(span.exact for span in self.lost)

    @property
    def lost_bytes(self) -> int:
        """Bytes lost in all gaps."""
        return sum(span.lost_bytes for span in self.lost)


# -- decoding with a map back to source bytes -----------------------------------

_local = threading.local()


def _record_error(exc: UnicodeError) -> tuple[str, int]:
    assert isinstance(exc, UnicodeDecodeError)
    _local.spans.append((exc.start, exc.end))
    return _REPLACEMENT, exc.end


_RECORD: Final = "kigi_tool_runtime.testing.record"
codecs.register_error(_RECORD, _record_error)


def _decode(data: bytes | memoryview, final: bool) -> tuple[str, list[tuple[int, int]]]:
    """``data`` decoded with ``"replace"``, and the byte span of every invalid
    maximal subpart (each became one U+FFFD), in order."""
    spans: list[tuple[int, int]] = []
    _local.spans = spans
    text, _ = codecs.utf_8_decode(data, _RECORD, final)
    _local.spans = []
    return text, spans


def _bytes_for(text: str, chars: int, spans: list[tuple[int, int]]) -> int:
    """Source bytes behind the first ``chars`` characters of ``text``, which was
    decoded with invalid subparts at byte ``spans``."""
    size = len(text[:chars].encode("utf-8", "surrogatepass"))
    if not spans:
        return size
    # Each invalid subpart counts 3 bytes in that re-encoding (one U+FFFD) but
    # stands for end - start source bytes. A subpart is among the first `chars`
    # characters exactly when it starts before the byte they reach.
    for start, end in spans:
        if start >= size:
            break
        size += (end - start) - len(_REPLACEMENT.encode())
    return size


def _clip(text: str) -> str:
    return repr(text[:EXCERPT_CHARS]) + ("..." if len(text) > EXCERPT_CHARS else "")


def _clip_bytes(data: bytes) -> str:
    return repr(data[:EXCERPT_CHARS]) + ("..." if len(data) > EXCERPT_CHARS else "")


def _describe(payload: PartialResultPayload) -> str:
    return (
        f"  frame: delta={_clip(payload.delta)} ({len(payload.delta)} chars),"
        f" total_bytes={payload.total_bytes}, gap={payload.gap}, truncated={payload.truncated}"
    )


# -- normalising what the caller passed -----------------------------------------


def _payloads(frames: Iterable[Any], subkind: str | None) -> list[tuple[int, PartialResultPayload]]:
    """The partial-result payloads of ``frames`` with their indexes.

    Raises:
        StreamCheckError: a frame meant to carry a partial result does not
            decode as one, or is of a type that cannot carry one.
    """
    found: list[tuple[int, PartialResultPayload]] = []
    for index, frame in enumerate(frames):
        if isinstance(frame, (TextProgress, ContentProgress)):
            continue
        if isinstance(frame, CustomProgress):
            if subkind is not None and frame.subkind != subkind:
                continue
            body = frame.payload
        elif isinstance(frame, ToolCallProgressFrame):
            if frame.kind in _NON_DELTA_KINDS or (subkind is not None and frame.kind != subkind):
                continue
            body = frame.body
        elif isinstance(frame, (PartialResultPayload, dict)):
            body = frame
        else:
            raise StreamCheckError(
                index,
                f"a {type(frame).__name__} is not a partial-result frame"
                " (pass CustomProgress, ToolCallProgressFrame, PartialResultPayload or dict)",
            )
        if isinstance(body, PartialResultPayload):
            found.append((index, body))
            continue
        try:
            found.append((index, convert(body, PartialResultPayload)))
        except (DecodeError, ValueError) as exc:
            raise StreamCheckError(
                index,
                f"payload does not decode as a PartialResultPayload: {exc}",
                f"  payload: {_clip(repr(body))}",
            ) from exc
    return found


# -- the checker ----------------------------------------------------------------


class _Mismatch(NamedTuple):
    """Why a delta could not be placed at a source position."""

    frame: int
    reason: str
    detail: str


class _Miss(NamedTuple):
    """A delta that is not the source at ``start``; explained only if reported
    (a gap's search tries many starts, and most of them miss)."""

    frame: int
    start: int
    payload: PartialResultPayload


#: How many characters of a lossy delta are compared before the whole of it:
#: most wrong starts of a gap search differ within the first few.
_PROBE_CHARS: Final = 16


class _Checker:
    """One check: the source, the contract's parameters, and the frames."""

    def __init__(
        self,
        items: list[tuple[int, PartialResultPayload]],
        data: bytes,
        cap: int,
        tail_capacity: int | None,
    ) -> None:
        self.items = items
        self.data = data
        self.cap = cap
        self.tail_capacity = tail_capacity
        self.encoded: dict[int, bytes] = {}
        try:
            data.decode("utf-8")
            self.valid = True
        except UnicodeDecodeError:
            self.valid = False

    def exact(self, index: int, delta: str) -> bytes | None:
        """The source bytes ``delta`` must be, when that is decided by the delta
        alone (valid text, or no U+FFFD to stand for invalid bytes)."""
        if not (self.valid or _REPLACEMENT not in delta):
            return None
        encoded = self.encoded.get(index)
        if encoded is None:
            encoded = self.encoded[index] = delta.encode("utf-8", "surrogatepass")
        return encoded

    def lossy_text(
        self, start: int, chars: int, per_char: int = MAX_CHAR_BYTES
    ) -> tuple[str, list[tuple[int, int]]]:
        """The decode of source bytes from ``start``, far enough for ``chars``
        characters of up to ``per_char`` bytes, with its invalid spans."""
        data = self.data
        stop = min(start + per_char * chars + MAX_CHAR_BYTES, len(data))
        return _decode(memoryview(data)[start:stop], stop == len(data))

    # A delta placed at `start`: the end of the bytes it consumed, or why not.
    def match(
        self, index: int, start: int, payload: PartialResultPayload
    ) -> int | _Mismatch | _Miss:
        delta, data = payload.delta, self.data
        if not delta:
            return start
        encoded = self.exact(index, delta)
        if encoded is not None:
            if not data.startswith(encoded, start):
                return _Miss(index, start, payload)
            end = start + len(encoded)
        else:
            if len(delta) > _PROBE_CHARS:
                probe, _ = self.lossy_text(start, _PROBE_CHARS)
                if not probe.startswith(delta[:_PROBE_CHARS]):
                    return _Miss(index, start, payload)
            # Most characters of a lossy source are 1-2 bytes: decode twice the
            # delta's length first, and the full 4 bytes a character only if short.
            text, spans = self.lossy_text(start, len(delta), MAX_CHAR_BYTES // 2)
            if len(text) <= len(delta) and start + len(text) < len(data):
                text, spans = self.lossy_text(start, len(delta))
            if not text.startswith(delta):
                return _Miss(index, start, payload)
            end = start + _bytes_for(text, len(delta), spans)
        if end > payload.total_bytes:
            return _Mismatch(
                index,
                f"its delta needs source bytes up to {end}, past its total_bytes"
                f" {payload.total_bytes} (rule 3: a frame cannot surface bytes not yet produced)",
                _describe(payload),
            )
        consumed = end - start
        if consumed < self.cap and end < payload.total_bytes:
            # Rule 2: the longest prefix within the cap; only a trailing
            # incomplete character may be left pending.
            window = memoryview(data)[start : min(start + self.cap, payload.total_bytes)]
            _, longest = codecs.utf_8_decode(window, "replace", False)
            if longest > consumed:
                return _Mismatch(
                    index,
                    f"consumes {consumed} source bytes where {longest} were pending within"
                    f" the cap of {self.cap} (rule 2: a frame takes the longest prefix of"
                    " the pending bytes)",
                    _describe(payload),
                )
        if consumed > self.cap and len(delta) > 1:
            return _Mismatch(
                index,
                f"consumes {consumed} source bytes, over the cap of {self.cap}, and is"
                f" {len(delta)} characters (rule 2: only a single character may exceed the cap)",
                _describe(payload),
            )
        return end

    def error(self, failure: _Mismatch | _Miss) -> StreamCheckError:
        """The error that reports ``failure``."""
        if isinstance(failure, _Miss):
            failure = self.mismatch(*failure)
        return StreamCheckError(*failure)

    def mismatch(self, index: int, start: int, payload: PartialResultPayload) -> _Mismatch:
        """Say how ``payload``'s delta differs from the source at ``start``."""
        delta, data = payload.delta, self.data
        expected, spans = self.lossy_text(start, len(delta))
        at = next(
            (i for i, (a, b) in enumerate(zip(delta, expected, strict=False)) if a != b),
            min(len(delta), len(expected)),
        )
        at_byte = start + _bytes_for(expected, at, spans)
        detail = (
            f"{_describe(payload)}\n  source at byte {at_byte}:"
            f" {_clip_bytes(data[at_byte : at_byte + EXCERPT_CHARS])}"
        )
        if at >= len(expected):
            return _Mismatch(
                index,
                f"its delta runs past the end of the source ({len(data)} bytes) at character {at}",
                detail,
            )
        got, want = delta[at], expected[at]
        if got == _REPLACEMENT and want != _REPLACEMENT:
            return _Mismatch(
                index,
                f"U+FFFD at character {at} (source byte {at_byte}) where the source has"
                f" {want!r} (rule 1: no U+FFFD the source does not contain; was a character"
                " split between chunks decoded on its own?)",
                detail,
            )
        if not payload.gap:
            encoded = delta.encode("utf-8", "surrogatepass")
            later = data.find(encoded, start + 1, payload.total_bytes)
            if later > start and _REPLACEMENT not in delta:
                return _Mismatch(
                    index,
                    f"not a gap frame, but its delta is the source at byte {later}, not at"
                    f" {start}: {later - start} bytes were skipped without gap=true"
                    " (rule 4: every loss is reported by a gap frame)",
                    detail,
                )
        return _Mismatch(
            index,
            f"delta differs from the source at character {at} (source byte {at_byte}):"
            f" expected {_clip(expected[at:])}, got {_clip(delta[at:])}"
            " (rule 1: deltas continue the source exactly)",
            detail,
        )

    # A run of frames placed from `start`: the end of each, or the first misfit.
    def place(
        self, frames: list[tuple[int, PartialResultPayload]], start: int
    ) -> list[int] | _Mismatch | _Miss:
        ends: list[int] = []
        position = start
        for index, payload in frames:
            if not payload.delta and not payload.gap:
                return _Mismatch(
                    index,
                    "empty delta in a frame that is not a gap frame"
                    " (rule 2: only a gap frame, or the truncation notice at the end,"
                    " may be empty)",
                    _describe(payload),
                )
            found = self.match(index, position, payload)
            if not isinstance(found, int):
                return found
            ends.append(found)
            position = found
        return ends

    def start_for_end(
        self, frames: list[tuple[int, PartialResultPayload]], after: int, end: int
    ) -> int | None:
        """The one start from which ``frames`` would end exactly at ``end``, if
        the source there decodes to their text (the last run of a complete
        stream is placed from its end, not searched for)."""
        text = "".join(payload.delta for _, payload in frames)
        if self.valid or _REPLACEMENT not in text:
            return end - len(text.encode("utf-8", "surrogatepass"))
        # Decode from far enough back that the decoder has resynchronised by the
        # start; the text must then be the decode's last characters.
        low = max(after + 1, end - MAX_CHAR_BYTES * len(text) - MAX_CHAR_BYTES)
        decoded, spans = _decode(memoryview(self.data)[low:end], end == len(self.data))
        if not decoded.endswith(text):
            return None
        return low + _bytes_for(decoded, len(decoded) - len(text), spans)

    def orphans_ok(self, start: int, after: int, total: int) -> bool:
        """Whether a gap's survivors may begin at ``start``: the tail began at
        most 3 continuation bytes earlier (those were skipped), after byte
        ``after``, and where a known tail capacity puts it."""
        data = self.data
        capacity = self.tail_capacity
        if capacity is not None:
            tail_start = total - capacity
        elif start < len(data) and 0x80 <= data[start] <= 0xBF:
            tail_start = start - MAX_CONTINUATION_BYTES
        else:
            tail_start = start
        if tail_start <= after or not tail_start <= start <= tail_start + MAX_CONTINUATION_BYTES:
            return False
        if any(not 0x80 <= byte <= 0xBF for byte in data[tail_start:start]):
            return False
        skipped = start - tail_start
        return not (
            skipped < MAX_CONTINUATION_BYTES and start < len(data) and 0x80 <= data[start] <= 0xBF
        )

    def drained_starts(
        self, frames: list[tuple[int, PartialResultPayload]], after: int
    ) -> Iterable[int]:
        """Where a gap frame's survivors begin if its run (the frames that share
        its total) drained the tail, as ``DeltaStreamer.drain`` does: the run
        ends at that total less at most 3 held bytes. Tried first: a source
        that repeats itself fits at many earlier starts that only a later
        frame rules out."""
        total = frames[0][1].total_bytes
        low = high = 0  # the source bytes the run consumed, as bounds
        for _, payload in frames:
            if payload.total_bytes != total:
                break
            size = len(payload.delta.encode("utf-8", "surrogatepass"))
            high += size
            # One U+FFFD (3 bytes) of a lossy source stands for 1 to 3 bytes.
            low += size if self.valid else size - 2 * payload.delta.count(_REPLACEMENT)
        return range(max(total - high - MAX_CONTINUATION_BYTES, after + 1), total - low + 1)

    def candidates(self, after: int, payload: PartialResultPayload) -> Iterable[int]:
        """Where a gap frame's survivors might begin, earliest first."""
        data, total, delta = self.data, payload.total_bytes, payload.delta
        low, high = after + 1, total
        if self.tail_capacity is not None:
            low = max(low, total - self.tail_capacity)
            high = min(high, total - self.tail_capacity + MAX_CONTINUATION_BYTES)
        if not delta:
            # Nothing decodable survived: at most an incomplete character.
            return range(max(low, total - MAX_CONTINUATION_BYTES), high + 1)
        prefix = delta.split(_REPLACEMENT, 1)[0] if not self.valid else delta
        if not prefix:
            return (s for s in range(low, high + 1) if s < len(data) and data[s] >= 0x80)
        return _occurrences(data, prefix.encode("utf-8", "surrogatepass"), low, high)


def _occurrences(data: bytes, needle: bytes, low: int, high: int) -> Iterable[int]:
    at = data.find(needle, low)
    while 0 <= at <= high:
        yield at
        at = data.find(needle, at + 1)


def check_stream(
    frames: Iterable[Any],
    source: bytes | bytearray | memoryview,
    *,
    cap: int | None = None,
    tail_capacity: int | None = None,
    total: int | None = None,
    truncated: bool | None = None,
    subkind: str | None = None,
    complete: bool = True,
    lossless: bool = False,
) -> CheckedStream:
    """Assert that ``frames`` stream ``source`` as the contract requires.

    Args:
        frames: what a tool produced, in order: ``CustomProgress`` frames (with
            ``PartialResultPayload`` or decoded ``dict`` payloads),
            ``ToolCallProgressFrame``s, bare payloads or dicts. ``TextProgress``,
            ``ContentProgress`` and ``text``/``content`` frames are skipped.
        source: every byte the tool produced, in order.
        cap: the spec's ``max_delta_bytes`` (``None``: the 16 KiB default; 0:
            one character per frame).
        tail_capacity: the producer's tail size, when known: then a gap's
            survivors must start where a full tail of that size starts.
        total: the bytes the stream must account for (default ``len(source)``);
            less when a limit refused the rest.
        truncated: ``True``: some frame must say truncated (so the last one
            does; a refusal no delta frame carried is said by the truncation
            notice); ``False``: no frame may. Default: frames may say it only
            when ``total`` is less than ``len(source)``, and are not required
            to (pass ``True`` to require it).
        subkind: check only frames of this subkind (default: every
            partial-result frame).
        complete: the stream has ended, so it must reach ``total``; with
            ``False`` a prefix of a stream is checked.
        lossless: no gap frame is allowed.

    Returns:
        a :class:`CheckedStream`: the text, the frame count, the lost spans.

    Raises:
        StreamCheckError: the first frame that breaks the contract, and why.
        ValueError: ``total`` is outside ``0..len(source)``, ``cap`` is negative,
            or ``tail_capacity`` is below 1.
    """
    frames = list(frames)
    try:
        return _check_stream(
            frames, bytes(source), cap, tail_capacity, total, truncated, subkind, complete, lossless
        )
    except StreamCheckError as error:
        # Frames a server dropped from its queue are a loss no gap frame can
        # report: say so when they precede the fault.
        drops = [
            (index, frame.dropped_count)
            for index, frame in enumerate(frames)
            if isinstance(frame, ToolCallProgressFrame)
            and frame.dropped_count
            and (error.frame is None or index <= error.frame)
        ]
        if not drops:
            raise
        index, count = drops[0]
        raise StreamCheckError(
            error.frame,
            f"{error.reason}; frame {index} has dropped_count {count}: the transport"
            " dropped frames before it, a loss only the consumer can report",
            error.detail,
        ) from None


def _check_stream(
    frames: list[Any],
    data: bytes,
    cap: int | None,
    tail_capacity: int | None,
    total: int | None,
    truncated: bool | None,
    subkind: str | None,
    complete: bool,
    lossless: bool,
) -> CheckedStream:
    """:func:`check_stream` on arguments in their plain form."""
    end_total = len(data) if total is None else total
    if not 0 <= end_total <= len(data):
        raise ValueError(f"total must be within 0..{len(data)} (the source's length), got {total}")
    limit = cap_of(cap, "cap")
    if tail_capacity is not None and tail_capacity < 1:
        raise ValueError(f"tail_capacity must be >= 1 or None, got {tail_capacity}")
    # Truncation is required only when the caller says it must show.
    may_truncate = end_total < len(data) if truncated is None else truncated
    every = _payloads(frames, subkind)
    _check_text(every)
    _check_counters(every, end_total, len(data), may_truncate, must_truncate=bool(truncated))
    # The truncation notice carries no bytes: it is judged here, not placed.
    items = every[:-1] if _is_notice(every, data, end_total) else every
    checker = _Checker(items, data[:end_total], limit, tail_capacity)

    # Where a complete stream ends: at its total, or before the start of a
    # character the limit cut in half, which a truncated stream leaves unsent.
    stream_end = end_total
    if every and every[-1][1].truncated:
        for k in range(1, MAX_CONTINUATION_BYTES + 1):
            if _cut_in_half(data, end_total - k, end_total):
                stream_end = end_total - k
                break
    position = 0
    lost: list[LostSpan] = []
    k = 0
    while k < len(items):
        index, payload = items[k]
        following = next((j for j in range(k + 1, len(items)) if items[j][1].gap), len(items))
        if not payload.gap:
            placed = checker.place(items[k:following], position)
            if not isinstance(placed, list):
                raise checker.error(placed)
            position = placed[-1]
            k = following
            continue
        if lossless:
            raise StreamCheckError(
                index, "gap frame in a stream that must be lossless", _describe(payload)
            )
        last = following == len(items) and complete
        start, placed, pinned = _place_gap(
            checker, items[k:following], position, stream_end if last else None
        )
        lost.append(LostSpan(index, position, start, pinned or tail_capacity is not None))
        position = placed[-1]
        k = following

    if complete and position == end_total > stream_end:
        index, payload = every[-1]
        raise StreamCheckError(
            index,
            f"the stream delivered source bytes {stream_end}..{end_total}, the start of a"
            " character the limit cut in half (rule 3: a truncated stream leaves them"
            " unsent; flushed, they become a U+FFFD the source does not have)",
            _describe(payload),
        )
    if complete and position != stream_end:
        if not every:
            raise StreamCheckError(
                None,
                f"no partial-result frames for a source of {end_total} bytes: none of them"
                " was delivered or reported as lost (rule 3: was the stream finished when"
                " the source ended?)",
            )
        index, payload = every[-1]
        raise StreamCheckError(
            index,
            f"the stream ends after this frame at source byte {position} of {stream_end}:"
            f" {stream_end - position} bytes were neither delivered nor reported as lost"
            " (rule 3: was the backlog drained with final=True when the source ended?)",
            f"{_describe(payload)}\n  never delivered: {_clip_bytes(data[position:stream_end])}",
        )
    return CheckedStream(
        text="".join(payload.delta for _, payload in items),
        frames=len(every),
        total_bytes=every[-1][1].total_bytes if every else 0,
        lost=tuple(lost),
        truncated=every[-1][1].truncated if every else False,
    )


def _cut_in_half(data: bytes, position: int, end: int) -> bool:
    """Whether the bytes from ``position`` to ``end`` (where the limit cut the
    source) are the start of a character the bytes after ``end`` complete:
    part of the truncation, left unsent rather than flushed as U+FFFD."""
    if position < 0 or not 0 < end - position <= MAX_CONTINUATION_BYTES or end >= len(data):
        return False
    lead = data[position]
    if lead < 0xC2:
        return False  # not the lead byte of a multi-byte character
    length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    try:
        data[position : position + length].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return position + length > end


def _check_text(items: list[tuple[int, PartialResultPayload]]) -> None:
    """Every delta is text a JSON encoder can send.

    Raises:
        StreamCheckError: a delta holds a lone surrogate.
    """
    for index, payload in items:
        found = _SURROGATE.search(payload.delta)
        if found is not None:
            raise StreamCheckError(
                index,
                f"its delta holds a lone surrogate U+{ord(found.group()):04X} at character"
                f" {found.start()}, which no JSON encoder can send and no UTF-8 source"
                " decodes to (rule 1: deltas are the decode of the source)",
                _describe(payload),
            )


def _is_notice(items: list[tuple[int, PartialResultPayload]], data: bytes, end: int) -> bool:
    """Whether the last frame is the truncation notice (rule 2): at the total
    of the frame before it, or of the stream when what came after that frame
    is only the start of a character the limit cut in half.

    Raises:
        StreamCheckError: the last frame is empty and says truncated, but breaks
            a condition of the notice.
    """
    if not items:
        return False
    index, payload = items[-1]
    if payload.delta or payload.gap or not payload.truncated:
        return False
    before = items[-2][1] if len(items) > 1 else None
    expected = before.total_bytes if before is not None else 0
    if before is not None and before.truncated:
        why = "an earlier frame already said truncated"
    elif payload.total_bytes != expected and not (
        payload.total_bytes == end
        and any(_cut_in_half(data, end - k, end) for k in range(1, MAX_CONTINUATION_BYTES + 1))
    ):
        why = (
            f"its total_bytes {payload.total_bytes} is not the {expected} of the frame before it"
            if before is not None
            else f"its total_bytes {payload.total_bytes} is not 0, yet no frame came before it"
        )
    else:
        return True
    raise StreamCheckError(
        index,
        "empty delta in a frame that is not a gap frame, and not a truncation notice:"
        f" {why} (rule 2: only a gap frame, or the notice that ends a truncated stream,"
        " may be empty)",
        _describe(payload),
    )


def _place_gap(
    checker: _Checker,
    frames: list[tuple[int, PartialResultPayload]],
    after: int,
    must_end: int | None,
) -> tuple[int, list[int], bool]:
    """Place a gap frame and the frames up to the next gap: the earliest start
    that fits (the least a later gap is then constrained by), or, for the last
    run of a complete stream, the start that ends it at ``must_end``; and
    whether that start is pinned (by ``must_end``) rather than the earliest fit.

    Raises:
        StreamCheckError: no start fits (among the first
            :data:`MAX_FAILED_STARTS` that fail).
    """
    index, payload = frames[0]
    if must_end is not None:
        start = checker.start_for_end(frames, after, must_end)
        if start is not None and checker.orphans_ok(start, after, payload.total_bytes):
            placed = checker.place(frames, start)
            if isinstance(placed, list) and placed[-1] == must_end:
                return start, placed, True
    first_fit: tuple[int, list[int], bool] | None = None
    closest: _Mismatch | _Miss | None = None
    failed = 0
    preferred = checker.drained_starts(frames, after)
    tried = set(preferred)
    searched = (start for start in checker.candidates(after, payload) if start not in tried)
    for start in itertools.chain(preferred, searched):
        if not checker.orphans_ok(start, after, payload.total_bytes):
            continue
        placed = checker.place(frames, start)
        if not isinstance(placed, list):
            if closest is None or placed.frame > closest.frame:
                closest = placed
            failed += 1
            if failed >= MAX_FAILED_STARTS:
                break
            continue
        if must_end is None or placed[-1] == must_end:
            return start, placed, must_end is not None
        if first_fit is None:
            first_fit = (start, placed, False)
    if first_fit is not None:
        return first_fit  # the end-of-stream check names what is missing
    if closest is not None and closest.frame != index:
        raise checker.error(closest)
    where = f"between byte {after + 1} and {payload.total_bytes}"
    if checker.tail_capacity is not None:
        tail_start = payload.total_bytes - checker.tail_capacity
        if tail_start <= after:
            raise StreamCheckError(
                index,
                f"gap frame, but a tail of {checker.tail_capacity} bytes at total_bytes"
                f" {payload.total_bytes} still holds byte {after}, the stream's position:"
                " nothing can have been lost",
                _describe(payload),
            )
        where = f"where the tail of {checker.tail_capacity} bytes starts (byte {tail_start})"
    if isinstance(checker.place(frames, after), list):
        raise StreamCheckError(
            index,
            f"gap=true, but the stream continues exactly at byte {after}: nothing was lost"
            " (rule 4: a gap frame reports a loss)",
            _describe(payload),
        )
    raise StreamCheckError(
        index,
        f"gap frame whose text is not the source {where} after skipping at most"
        f" {MAX_CONTINUATION_BYTES} orphaned continuation bytes (rule 4: a gap's survivors"
        " are source bytes, never decoded orphans)",
        f"{_describe(payload)}\n  source after byte {after}:"
        f" {_clip_bytes(checker.data[after : after + EXCERPT_CHARS])}",
    )


def _check_counters(
    items: list[tuple[int, PartialResultPayload]],
    end_total: int,
    produced: int,
    may_truncate: bool,
    *,
    must_truncate: bool,
) -> None:
    """Rules 3 and 5 on the counters alone.

    Raises:
        StreamCheckError: a count went backwards or past the source, or the
            ``truncated`` flag is inconsistent.
    """
    previous: PartialResultPayload | None = None
    for index, payload in items:
        if payload.total_bytes > end_total:
            raise StreamCheckError(
                index,
                f"total_bytes {payload.total_bytes} is more than the {end_total} bytes"
                " the source produced (rule 3)",
                _describe(payload),
            )
        if previous is not None:
            if payload.total_bytes < previous.total_bytes:
                raise StreamCheckError(
                    index,
                    f"total_bytes went down from {previous.total_bytes} to"
                    f" {payload.total_bytes} (rule 3: total_bytes never decreases)",
                    _describe(payload),
                )
            if previous.truncated and not payload.truncated:
                raise StreamCheckError(
                    index,
                    "truncated went back to false (rule 5: the flag is cumulative)",
                    _describe(payload),
                )
            if previous.truncated and payload.total_bytes > previous.total_bytes:
                raise StreamCheckError(
                    index,
                    f"total_bytes grew from {previous.total_bytes} to {payload.total_bytes}"
                    " after the stream said truncated (rule 5: bytes past a limit are not"
                    " counted)",
                    _describe(payload),
                )
        if payload.truncated and not may_truncate:
            raise StreamCheckError(
                index,
                f"says truncated, but all {produced} bytes of the source count in the stream"
                " (rule 5: truncated means bytes were refused)",
                _describe(payload),
            )
        previous = payload
    if previous is None and must_truncate:
        raise StreamCheckError(
            None,
            f"no frame says truncated, but only {end_total} of the source's {produced} bytes"
            " count in the stream (rule 5: a finished stream says a refusal, by its"
            " truncation notice when no delta frame carried it)",
        )
    if previous is not None and must_truncate and not previous.truncated:
        index = items[-1][0]
        raise StreamCheckError(
            index,
            f"the last frame does not say truncated, but only {end_total} of the source's"
            f" {produced} bytes count in the stream (rule 5)",
            _describe(previous),
        )
