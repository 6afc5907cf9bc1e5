"""``stream_chunk``: turn the tail of a growing byte source into capped,
UTF-8-complete, append-only deltas.

Invariants (docs/design.md §2 states them normatively; this module keeps them):

Rule 1. ``total <= last_total`` yields no frame and leaves the cursor alone.
Rule 2. The pending bytes are the last ``total - last_total`` bytes of the tail.
        When fewer survive, the middle was lost: the frame says ``gap``, and the
        tail's leading continuation bytes (at most 3, their lead byte lost) are
        skipped and count as consumed.
Rule 3. A frame consumes at most ``cap`` source bytes (``max_delta_bytes``, or
        16 KiB when unset), except that a cap smaller than the next character
        yields exactly that one character (at most 3 bytes over the cap): with
        a cap of 0 every frame is one character.
Rule 4. A frame never ends inside an incomplete UTF-8 sequence that more bytes
        could still complete; only the trailing bytes of the frame decide that,
        so an earlier invalid byte never disables the hold-back. "Incomplete" is
        what Python's incremental UTF-8 decoder holds back, which includes a
        trailing 0xED 0xA0-0xBF (a truncated surrogate); the conformance vectors
        expect exactly that. Invalid bytes become U+FFFD per maximal subpart
        (Python's ``"replace"``, equal to Rust's ``from_utf8_lossy``).
Rule 5. Pending bytes that are only an incomplete sequence are held (no frame)
        until more bytes arrive, or flushed as U+FFFD when ``final`` is set and
        nothing else is pending.
Rule 6. The cursor advances past exactly the bytes emitted plus skipped orphans.
Rule 7. A gap is always reported, by a frame with an empty delta if nothing
        decodable survived; no other frame is ever empty.
Rule 8. ``total_bytes`` is ``total``; ``truncated`` is passed through verbatim.

Cost: one call touches only the bytes it emits (plus at most 3 leading orphans
and at most 4 bytes of a first character), never the whole tail: only the
emitted slice is taken (a view: every tail is read through a memoryview) and
decoded, and the decoder's own incremental stop performs the hold-back in that
same pass.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import Final, NamedTuple

from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES

__all__ = ("Chunk", "stream_chunk")

#: A UTF-8 character is at most 4 bytes, so at most 3 bytes follow its lead or
#: precede its end. Hence: a gap tail starts with at most 3 continuation bytes
#: whose lead byte was lost (a fourth was invalid in the source itself and
#: decodes to U+FFFD); a cut splits at most 3 bytes off a character; a producer
#: holds back at most 3 bytes of an incomplete one (``MAX_HELD_BYTES``).
MAX_CONTINUATION_BYTES: Final = 3

Tail = bytes | bytearray | memoryview


class Chunk(NamedTuple):
    """What one :func:`stream_chunk` call produced.

    ``progress`` is the frame (a ``CustomProgress`` whose ``payload`` is a
    ``PartialResultPayload``) or ``None`` when there is nothing to surface yet;
    ``last_total`` is the advanced cursor to pass to the next call.
    """

    progress: CustomProgress | None
    last_total: int


def _first_char_len(tail: memoryview, start: int, end: int, final: bool) -> int:
    """Byte length of the first decode unit of ``tail[start:end]``: a whole
    character, or a maximal invalid subpart (one U+FFFD). When the bytes run out
    before the unit is decided (an incomplete sequence), 0, or with ``final`` the
    length of that incomplete sequence (it decodes to one U+FFFD).

    The second byte's range depends on the lead byte (no overlongs, no
    surrogates, nothing past U+10FFFF), as Python's and Rust's decoders judge it.
    The one exception mirrors Python's incremental decoder, which the rest of
    this module relies on: a lead 0xED and a byte 0xA0-0xBF at the very end
    (a truncated surrogate) count as incomplete, never as decided.
    """
    lead = tail[start]
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        need, low, high = 2, 0x80, 0xBF
    elif lead == 0xE0:
        need, low, high = 3, 0xA0, 0xBF
    elif lead == 0xED:
        need, low, high = 3, 0x80, 0x9F
    elif 0xE1 <= lead <= 0xEF:
        need, low, high = 3, 0x80, 0xBF
    elif lead == 0xF0:
        need, low, high = 4, 0x90, 0xBF
    elif lead == 0xF4:
        need, low, high = 4, 0x80, 0x8F
    elif 0xF1 <= lead <= 0xF3:
        need, low, high = 4, 0x80, 0xBF
    else:
        # 0x80-0xC1 and 0xF5-0xFF can never start a character.
        return 1
    for length in range(1, need):
        index = start + length
        if index >= end:
            return length if final else 0
        byte = tail[index]
        if not low <= byte <= high:
            if lead == 0xED and 0xA0 <= byte <= 0xBF and index + 1 == end and not final:
                return 0
            return length
        low, high = 0x80, 0xBF
    return need


def stream_chunk(
    spec: StreamingSpec,
    tail: Tail,
    total: int,
    last_total: int,
    truncated: bool = False,
    *,
    final: bool = False,
) -> Chunk:
    """Surface the next delta of a byte source, at most one frame per call.

    Args:
        spec: the tool's streaming spec: the frame's ``subkind`` and the cap on
            source bytes per frame (``max_delta_bytes``; ``None`` means 16 KiB,
            0 means one character per frame).
        tail: the newest bytes the source produced, newest last (``bytes``,
            ``bytearray`` or a 1-D contiguous ``memoryview``; never copied whole).
        total: how many bytes the source has produced so far (monotonic).
        last_total: how many of them were already surfaced or skipped (the
            cursor a previous call returned; 0 at the start).
        truncated: the source's cumulative "content was lost upstream" flag,
            copied into the frame verbatim.
        final: the source has ended; a trailing incomplete sequence is flushed
            as U+FFFD instead of held. Call until no frame comes back.

    Returns:
        ``Chunk(progress, last_total)``: the frame or ``None``, and the cursor.
        ``last_total > total`` is not an error: like ``total == last_total`` it
        means nothing new, and yields no frame with the cursor unchanged.

    Raises:
        ValueError: ``total`` or ``last_total`` is negative,
            ``spec.max_delta_bytes`` is negative, or a frame would carry a
            ``total`` beyond the wire's u64 range.
        TypeError: ``tail`` is not bytes-like, or is a non-contiguous view,
            ``total`` or ``last_total`` is not an ``int``, or ``truncated`` is
            not a ``bool``.
    """
    if not check_step(total, last_total, truncated):
        return _new_chunk(Chunk, (None, last_total))
    return _new_chunk(
        Chunk,
        advance(
            spec.subkind,
            cap_of(spec.max_delta_bytes),
            bytes_tail(tail),
            total,
            last_total,
            truncated,
            final,
        ),
    )


# Building the NamedTuple through tuple.__new__ skips its Python-level __new__.
_new_chunk = tuple.__new__


def check_step(total: int, last_total: int, truncated: bool) -> bool:
    """Check the arguments of one step of a source and say whether it has
    anything new (``total > last_total``); the one check of :func:`stream_chunk`
    and :class:`DeltaStreamer`.

    ``truncated`` must be a ``bool``: the wire field is a JSON boolean, and a
    ``1`` or ``None`` copied verbatim into a frame would make every strict
    decoder reject it. ``last_total > total`` is not an error (nothing new).

    Raises:
        TypeError: ``truncated`` is not a ``bool``, or a count is not an ``int``.
        ValueError: ``total`` is negative, or ``last_total`` is negative while
            below ``total``.
    """
    if truncated is not False and truncated is not True:
        raise TypeError(f"truncated must be a bool, not {type(truncated).__name__}")
    if type(total) is not int or type(last_total) is not int:
        check_count("total", total)
        check_count("last_total", last_total)
    if total <= last_total:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        return False
    if last_total < 0:
        raise ValueError(f"last_total must be >= 0, got {last_total}")
    return True


def check_count(name: str, value: object) -> None:
    """Check that a byte count is an ``int``: a float would reach the frame's
    ``total_bytes`` (which the strict decoder rejects) or fail as a slice index.

    Raises:
        TypeError: ``value`` is not an ``int`` (a ``bool`` is not a count).
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")


def cap_of(max_delta_bytes: int | None, name: str = "spec.max_delta_bytes") -> int:
    """The source bytes one frame may consume under a spec's ``max_delta_bytes``
    (``None``: :data:`DEFAULT_MAX_DELTA_BYTES`; 0: one character a frame).

    Raises:
        ValueError: ``max_delta_bytes`` is negative (the message calls it ``name``).
    """
    if max_delta_bytes is None:
        return DEFAULT_MAX_DELTA_BYTES
    if max_delta_bytes < 0:
        raise ValueError(f"{name} must be >= 0 or None, got {max_delta_bytes}")
    return max_delta_bytes


def bytes_tail(tail: Tail) -> memoryview:
    """``tail`` as a flat view of unsigned bytes (no copy), so that slicing out
    the emitted bytes never copies them either.

    Raises:
        TypeError: ``tail`` is not bytes-like, or is a non-contiguous view.
    """
    tail_type = type(tail)
    if tail_type is memoryview:
        if tail.format != "B" or tail.ndim != 1 or not tail.c_contiguous:  # type: ignore[union-attr]
            return _as_bytes_view(tail)  # type: ignore[arg-type]
        return tail  # type: ignore[return-value]
    if tail_type is bytes or tail_type is bytearray:
        return memoryview(tail)
    if isinstance(tail, memoryview):
        return _as_bytes_view(tail)
    if isinstance(tail, (bytes, bytearray)):
        return memoryview(tail)
    raise TypeError(f"tail must be bytes, bytearray or memoryview, not {type(tail).__name__}")


def advance(
    subkind: str,
    cap: int,
    tail: memoryview,
    total: int,
    last_total: int,
    truncated: bool,
    final: bool,
) -> tuple[CustomProgress | None, int]:
    """Package-internal. The body of :func:`stream_chunk`, for arguments already checked:
    ``0 <= last_total < total``, ``cap >= 0``, ``tail`` from :func:`bytes_tail`."""
    text, gap, cursor = next_delta(cap, tail, total, last_total, final)
    if text is None:
        return None, cursor
    payload = PartialResultPayload(delta=text, total_bytes=total, truncated=truncated, gap=gap)
    return CustomProgress(subkind=subkind, payload=payload), cursor


def next_delta(
    cap: int, tail: memoryview, total: int, last_total: int, final: bool
) -> tuple[str | None, bool, int]:
    """Package-internal. The next frame's delta (None: no frame), whether it
    reports a gap, and the advanced cursor: :func:`advance` without the frame."""
    size = len(tail)
    new = total - last_total
    if new <= size:
        start = size - new
        gap = False
    else:
        # The middle was lost. Bytes 0x80-0xBF at the front continue a character
        # whose lead byte is gone: skip them (they are consumed, never decoded).
        gap = True
        start = 0
        limit = min(size, MAX_CONTINUATION_BYTES)
        while start < limit and 0x80 <= tail[start] <= 0xBF:
            start += 1

    end = size if size - start <= cap else start + cap
    # Decoding with final=False stops before a trailing incomplete sequence, so
    # the decoder itself performs the hold-back of rule 4 on just this slice;
    # only the call that reaches the end of a finished source flushes it.
    text, used = utf_8_decode(tail[start:end], "replace", final and end == size)
    if not used and end < size:
        # The cap cut inside the first character: emit exactly that character,
        # unless the pending bytes are one incomplete sequence (hold it, or flush
        # it at the end of the source). Without a cap cut the decoder has already
        # judged: nothing used means the pending bytes are one incomplete
        # sequence, held (with `final`, the decode above flushed them).
        used = _first_char_len(tail, start, size, final)
        if used:
            text = utf_8_decode(tail[start : start + used], "replace", True)[0]
    if used:
        return text, gap, total - (size - start - used) if gap else last_total + used
    if gap:
        return text, gap, total - (size - start)
    return None, False, last_total


def _as_bytes_view(view: memoryview) -> memoryview:
    """A flat unsigned-byte view of ``view`` (no copy).

    Raises:
        TypeError: ``view`` is not C-contiguous.
    """
    try:
        return view.cast("B")
    except TypeError as exc:
        raise TypeError(f"tail must be a contiguous buffer: {exc}") from exc
