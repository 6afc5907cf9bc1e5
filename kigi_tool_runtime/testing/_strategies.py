"""Hypothesis strategies for byte sources, write/tick schedules and wire values.

The SDK's own property tests draw from here, and so can a tool author's: one
set of strategies, so every test exercises the same awkward inputs (split
multi-byte characters, invalid bytes, long runs, caps of 0 and 1, tiny tails).
"""

from __future__ import annotations

import itertools
from typing import Final

from hypothesis import strategies as st

from kigi_tool_protocol import PartialResultPayload, StreamingSpec
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES

from .._producer._tail import MIN_TAIL_CAPACITY

__all__ = ("byte_sources", "caps", "schedules", "utf8_text_sources")

ScheduleStep = bytes | None
"""One step of a schedule: a write of these bytes, or ``None`` for a tick."""

#: The longest run of one character a source may contain: long enough to span
#: many frames at small caps and to overflow small tails, small enough that a
#: property test stays fast.
MAX_RUN_LENGTH: Final = 3000

#: The ranges of the wire's ``u32`` cap and ``u64`` byte count.
U32_MAX: Final = 2**32 - 1
U64_MAX: Final = 2**64 - 1

#: The most pieces a schedule cuts a source into (beyond it, ticks of nothing).
MAX_SCHEDULE_WRITES: Final = 40

# One representative of every UTF-8 length and of the characters that break
# naive code: NUL and other controls, DEL, C1 controls, the last BMP scalar
# before the surrogates, U+FFFD itself (which must never be mistaken for loss),
# the BOM, and the edges of the 4-byte range.
_AWKWARD = (
    "\x00\t\n\r\x1b\x7f\x80\x9f\xa0é\u07ff\u0800€\ud7ff\ue000\ufeff\ufffd\uffff"
    "😀\U00010000\U0010ffff"
)

_chars = st.one_of(
    st.sampled_from(_AWKWARD),
    st.characters(codec="utf-8"),
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
)
_text_pieces = st.one_of(
    st.text(_chars, max_size=40),
    st.builds(lambda c, n: c * n, _chars, st.integers(1, MAX_RUN_LENGTH)),
)

# Byte pieces that exercise the decoder's edges: truncated multi-byte characters
# (including a truncated surrogate, which Python's incremental decoder holds),
# orphaned continuation bytes, overlongs, surrogates, bytes past U+10FFFF and
# bytes that can never appear in UTF-8.
_BROKEN = (
    b"\xc3",
    b"\xe2\x82",
    b"\xe2",
    b"\xf0\x9f\x98",
    b"\xf0\x9f",
    b"\xf0",
    b"\x80",
    b"\xbf\xbf\xbf\xbf",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xed\xa0",
    b"\xf4\x90\x80\x80",
    b"\xf5",
    b"\xff",
    b"\xfe\xff",
)


@st.composite
def _join(draw: st.DrawFn, pieces: st.SearchStrategy[bytes], max_pieces: int) -> bytes:
    return b"".join(draw(st.lists(pieces, max_size=max_pieces)))


def utf8_text_sources() -> st.SearchStrategy[bytes]:
    """Valid UTF-8 sources (as bytes): characters of 1 to 4 bytes, control
    characters, U+FFFD itself, and long runs of one character."""
    return _join(_text_pieces.map(lambda text: text.encode("utf-8")), 8)


def byte_sources() -> st.SearchStrategy[bytes]:
    """Arbitrary byte sources: valid text mixed with invalid sequences,
    truncated multi-byte characters, orphaned continuation bytes and raw bytes."""
    pieces = st.one_of(
        _text_pieces.map(lambda text: text.encode("utf-8")),
        st.sampled_from(_BROKEN),
        st.binary(max_size=40),
    )
    return _join(pieces, 12)


@st.composite
def schedules(draw: st.DrawFn, source: bytes) -> list[ScheduleStep]:
    """Cut ``source`` into writes interleaved with ticks.

    A schedule is a list of steps: ``bytes`` is a write (possibly empty),
    ``None`` a tick. The writes concatenate to ``source``; cuts fall anywhere,
    and half of them (when the source has multi-byte characters) inside one;
    ticks come anywhere, in runs.
    """
    # Half the cuts, where the source has any, fall inside a multi-byte
    # character, so its pieces arrive in different writes and often across a
    # tick: the case a held-back character must survive.
    inside = [at for at in range(1, len(source)) if 0x80 <= source[at] < 0xC0]
    cut = st.integers(0, len(source))
    if inside:
        cut = st.one_of(cut, st.sampled_from(inside))
    cuts = sorted(draw(st.lists(cut, max_size=MAX_SCHEDULE_WRITES - 1)))
    bounds = [0, *cuts, len(source)]
    steps: list[ScheduleStep] = []
    for start, end in itertools.pairwise(bounds):
        steps.extend([None] * draw(st.integers(0, 2)))
        steps.append(source[start:end])
    steps.extend([None] * draw(st.integers(0, 2)))
    return steps


def tiny_caps() -> st.SearchStrategy[int | None]:
    """Caps for fuzzing a tool: mostly 0 to 4 (at or below one character, where
    a held-back character decides whether a drain can make progress), sometimes
    a few characters' worth or ``None`` (the default cap), which any tool's
    tail holds."""
    return st.sampled_from((0, 1, 2, 3, 4) * 3 + (5, 7, 16, 64, None))


def caps() -> st.SearchStrategy[int | None]:
    """``StreamingSpec.max_delta_bytes`` values: ``None`` (the default), 0 (one
    character per frame), 1 to 4 (smaller than a character), small and large."""
    return st.one_of(
        st.none(),
        st.integers(0, 8),
        st.integers(9, 300),
        st.sampled_from([DEFAULT_MAX_DELTA_BYTES, U32_MAX]),
    )


def tail_sizes() -> st.SearchStrategy[int]:
    """``TailBuffer`` capacities from the smallest allowed (4) up."""
    return st.one_of(
        st.integers(MIN_TAIL_CAPACITY, 16),
        st.integers(17, 512),
        st.integers(513, 1 << 17),
    )


def output_limits(steps: list[ScheduleStep]) -> st.SearchStrategy[int | None]:
    """Hard output limits (``TailBuffer(limit=...)``) for a schedule: none, any
    from 0 to a little past the source, or one that falls exactly on a write
    boundary, where a later write is refused whole and only the end-of-stream
    truncation notice can say ``truncated``."""
    ends = [0]
    for step in steps:
        if step is not None:
            ends.append(ends[-1] + len(step))
    return st.one_of(st.none(), st.integers(0, ends[-1] + 4), st.sampled_from(ends))


def streaming_specs() -> st.SearchStrategy[StreamingSpec]:
    """Streaming specs with any subkind and any cap from :func:`caps`."""
    return st.builds(
        StreamingSpec,
        subkind=st.one_of(st.sampled_from(["bash_output_chunk", "test_chunk", ""]), st.text()),
        max_delta_bytes=caps(),
    )


def partial_payloads() -> st.SearchStrategy[PartialResultPayload]:
    """Any well-formed ``PartialResultPayload``, including empty deltas and the
    extremes of ``total_bytes``."""
    return st.builds(
        PartialResultPayload,
        delta=st.text(_chars),
        total_bytes=st.one_of(st.integers(0, 1 << 20), st.integers(0, U64_MAX)),
        truncated=st.booleans(),
        gap=st.booleans(),
    )
