"""What a reassembled stream lost: gaps, anomalies, the loss report and its rendering.

Invariants:

Rule 1. A figure the wire cannot pin down is a bound, and says so: a
        :class:`Gap` carries ``lost_bytes`` (an upper bound) and
        ``lost_bytes_min`` (a lower bound); ``exact`` is true only when they meet.
Rule 2. Nothing is summarised away: every anomaly the reassembler saw is in the
        report, in the order it was seen, with the record it was seen at.
Rule 3. These are values: frozen dataclasses, equal when their fields are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from .._producer._chunk import MAX_CONTINUATION_BYTES
from .._text import MAX_DETAIL_CHARS, cut, plural

__all__ = ("Anomaly", "AnomalyKind", "Gap", "LossReport")

#: The most bytes a producer may hold back at the end of a drain: the start of a
#: UTF-8 character whose last byte has not arrived (a 4-byte character missing
#: its last byte). A consumer cannot see them, so a gap's figures are bounds
#: that are this much apart until a later frame shows nothing was held.
MAX_HELD_BYTES: Final = MAX_CONTINUATION_BYTES

#: The text inserted where bytes were lost. ``{lost}`` becomes the lost byte
#: count (``"12"`` when exact, ``"9-12"`` when the wire only bounds it).
DEFAULT_GAP_MARKER: Final = "[... {lost} bytes lost ...]"

#: The most anomalies a reassembler keeps per stream, and for the connection:
#: enough to show what went wrong and where it began, while a flood of bad
#: records costs a fixed amount of memory. The first ones are kept; later ones
#: are only counted (``LossReport.anomalies_not_kept``), and a printer that
#: reads each record's anomalies as it lands (``Reassembler.appended``) still
#: sees every one.
MAX_ANOMALIES_KEPT: Final = 1000

#: Where a stream's text stops because the producer hit its output limit: what
#: came after was never counted or sent.
TRUNCATION_MARKER: Final = "[... output truncated at the limit ...]"


AnomalyKind = Literal[
    "undecodable",
    "seq_gap",
    "seq_repeated",
    "seq_reordered",
    "unknown_call",
    "payload_invalid",
    "total_regressed",
    "total_overrun",
    "dropped_frames",
    "frame_after_end",
    "streams_evicted",
]
"""Every protocol anomaly the reassembler reports.

- ``undecodable``: a record (line or frame) that is not a valid
  ``tool_call_progress`` notification: not JSON, invalid UTF-8, too large, a
  bad envelope or frame. Counted and reported; the stream goes on.
- ``seq_gap``: the envelope ``seq`` skipped numbers (frames lost in transport).
- ``seq_repeated``: the same ``seq`` twice in a row (a duplicated frame; its
  delta was absorbed again, so the text repeats it).
- ``seq_reordered``: ``seq`` went backwards (a reordered or replayed frame).
- ``unknown_call``: a frame for a call the reassembler was not told to expect.
- ``payload_invalid``: a partial-result frame whose body fails strict decode.
- ``total_regressed``: ``total_bytes`` went backwards within a stream.
- ``total_overrun``: a frame's delta holds more source bytes than its
  ``total_bytes`` counts (a producer that miscounts, or a forged frame).
- ``dropped_frames``: the frame says the sender dropped frames (``dropped_count``).
- ``frame_after_end``: a frame after the stream's truncation notice, which ends
  it (reported once per stream).
- ``streams_evicted``: the reassembler tracks at most ``max_streams`` streams; it
  stopped tracking the oldest, whose summary the detail quotes.
"""


class StreamKey(NamedTuple):
    """What a stream is keyed by: the call and the frame ``kind`` (its subkind)."""

    tool_call_id: str
    subkind: str


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One protocol anomaly: its ``kind``, the 0-based ``index`` of the record
    (line or frame) it was seen at, the stream it belongs to (``None`` when it
    cannot be attributed to one) and a sentence saying what was wrong, cut to
    about :data:`MAX_DETAIL_CHARS` characters."""

    kind: AnomalyKind
    index: int
    detail: str
    key: StreamKey | None = None

    def __post_init__(self) -> None:
        # A detail quotes what was wrong, never more than an excerpt of it: a
        # hostile record of megabytes costs a detail of a few hundred bytes.
        if len(self.detail) > MAX_DETAIL_CHARS + 40:
            object.__setattr__(self, "detail", cut(self.detail))


@dataclass(frozen=True, slots=True)
class Gap:
    """Bytes that never arrived: the producer's tail buffer overflowed past
    them (a gap frame), or, when ``inferred``, ``total_bytes`` counts them but
    no frame delivered them (a frame lost in transport, a missing prefix).

    ``offset`` is where in the text (in characters) the lost bytes belonged;
    ``index`` is the record of the gap frame (for an inferred gap, the record
    that proved it); ``total_bytes`` is the total they were counted by.

    The byte count is what the wire allows: the gap frame's ``total_bytes``
    minus where the stream stood before it minus the bytes delivered after it
    at that same total. That is exact unless the producer was holding back the
    start of an incomplete character (up to :data:`MAX_HELD_BYTES`) or a delta
    carried U+FFFD (which stands for 1 to 3 source bytes).
    """

    offset: int
    index: int
    total_bytes: int
    # The unclamped bounds and the held-back allowance; merging two folds adjusts
    # them linearly, so they are kept raw and clamped only when read.
    upper: int
    lower: int
    held: int = MAX_HELD_BYTES
    inferred: bool = False

    @property
    def lost_bytes(self) -> int:
        """An upper bound on the bytes lost here (at least 1: a gap lost something)."""
        return max(self.upper, 1)

    @property
    def lost_bytes_min(self) -> int:
        """A lower bound on the bytes lost here (at least 1, at most :attr:`lost_bytes`)."""
        return min(max(self.lower - self.held, 1), self.lost_bytes)

    @property
    def exact(self) -> bool:
        """Whether :attr:`lost_bytes` is the exact count rather than a bound."""
        return self.lost_bytes_min == self.lost_bytes

    def describe(self) -> str:
        """The lost byte count as text: ``"12"`` when exact, ``"9-12"`` when bounded."""
        if self.exact:
            return str(self.lost_bytes)
        return f"{self.lost_bytes_min}-{self.lost_bytes}"


# Package-private steps of the fold (``_stream_fold``, ``_marker_hold``): a
# gap's figures once more of its stream is known.


def gap_shifted(gap: Gap, chars: int, records: int) -> Gap:
    """``gap``, ``chars`` text characters and ``records`` records later (for a
    fold absorbed after others)."""
    return Gap(
        gap.offset + chars,
        gap.index + records,
        gap.total_bytes,
        gap.upper,
        gap.lower,
        gap.held,
        gap.inferred,
    )


def gap_with_open_run(gap: Gap) -> Gap:
    """``gap`` as its gap frame alone proves it, while later frames of its run
    may still deliver bytes: at most :attr:`Gap.lost_bytes`, at least 1."""
    return Gap(
        gap.offset,
        gap.index,
        gap.total_bytes,
        gap.upper,
        gap.held + 1,
        gap.held,
        gap.inferred,
    )


def gap_narrowed(gap: Gap, low: int, size: int) -> Gap:
    """``gap``, once a paced frame delivered ``low`` to ``size`` more source
    bytes of its run."""
    return Gap(
        gap.offset,
        gap.index,
        gap.total_bytes,
        gap.upper - low,
        gap.lower - size,
        gap.held,
        gap.inferred,
    )


def gap_rebased(gap: Gap, cursor_lo: int, cursor_hi: int) -> Gap:
    """``gap``'s figures, counted from a fold's start, once that fold's cursor
    bounds are known."""
    return Gap(
        gap.offset,
        gap.index,
        gap.total_bytes,
        gap.upper - cursor_lo,
        gap.lower - cursor_hi,
        gap.held,
        gap.inferred,
    )


def gap_with_held(gap: Gap, held: int) -> Gap:
    """``gap`` with ``held`` bytes held back at its edge."""
    return Gap(
        gap.offset,
        gap.index,
        gap.total_bytes,
        gap.upper,
        gap.lower,
        held,
        gap.inferred,
    )


GapMarker = str | Callable[[Gap], str]
"""A gap marker: a template with ``{lost}`` (see :data:`DEFAULT_GAP_MARKER`), or
a function from the :class:`Gap` to the text to insert."""


def render_gap_marker(marker: GapMarker, gap: Gap) -> str:
    """The text ``marker`` inserts for ``gap``."""
    if isinstance(marker, str):
        return marker.format(lost=gap.describe())
    return marker(gap)


@dataclass(frozen=True, slots=True)
class LossReport:
    """Everything a stream's reader should know about what did not arrive.

    ``frames`` is how many frames the stream absorbed; ``text_bytes`` the UTF-8
    length of the text held; ``total_bytes`` the last total the producer
    reported (``None`` before any decodable frame). ``delivered_range``: the
    source bytes the frames delivered, at least and at most (each U+FFFD, 3
    bytes of text, stands for 1 to 3 of them, so a binary command's text is
    longer than its output; its totals narrow the range); ``None``: exactly
    ``text_bytes``. ``undelivered_bytes`` is ``total_bytes`` minus the most
    bytes delivered (lost plus still in flight; exact when the delivered
    bytes are).
    ``truncated``: the producer hit its output limit, so content past it was
    never counted or sent (its size is unknown). ``unseen_bytes``: bytes the
    last total counts past what the frames delivered and the producer may
    still hold back; in flight while the stream is live, lost once it ended.
    ``anomalies_not_kept``: anomalies past :data:`MAX_ANOMALIES_KEPT`, counted only.
    ``lost_range``: the bytes lost in all gaps together, when the stream's
    totals bound that sum more tightly than its gaps do one by one (a gap can
    be a range because bytes held back at its end may belong to the next one;
    the sum does not depend on where they belong). ``None``: the gaps' sums.
    ``overrun_bytes``: source bytes the frames at the last total delivered
    beyond what it counts (a repeated frame, or a producer that miscounts);
    earlier runs that did so are ``total_overrun`` anomalies.
    """

    key: StreamKey
    frames: int
    text_bytes: int
    total_bytes: int | None
    gaps: tuple[Gap, ...]
    truncated: bool
    anomalies: tuple[Anomaly, ...]
    unseen_bytes: int = 0
    anomalies_not_kept: int = 0
    lost_range: tuple[int, int] | None = None
    overrun_bytes: int = 0
    delivered_range: tuple[int, int] | None = None

    @property
    def delivered_bytes(self) -> int:
        """Upper bound on the source bytes the frames delivered."""
        if self.delivered_range is not None:
            return self.delivered_range[1]
        return self.text_bytes

    @property
    def delivered_bytes_min(self) -> int:
        """Lower bound on the source bytes the frames delivered."""
        if self.delivered_range is not None:
            return self.delivered_range[0]
        return self.text_bytes

    @property
    def lost_bytes(self) -> int:
        """Upper bound on the bytes lost in gaps."""
        if self.lost_range is not None:
            return self.lost_range[1]
        return sum(gap.lost_bytes for gap in self.gaps)

    @property
    def lost_bytes_min(self) -> int:
        """Lower bound on the bytes lost in gaps."""
        if self.lost_range is not None:
            return self.lost_range[0]
        return sum(gap.lost_bytes_min for gap in self.gaps)

    @property
    def undelivered_bytes(self) -> int:
        """Bytes the producer counted that the text does not hold (0 before any total)."""
        if self.total_bytes is None:
            return 0
        return max(self.total_bytes - self.delivered_bytes, 0)

    @property
    def complete(self) -> bool:
        """No gap, no truncation, no anomaly, nothing unseen: the text is all
        there was so far."""
        return (
            not self.gaps
            and not self.truncated
            and not self.anomalies
            and not self.unseen_bytes
            and not self.overrun_bytes
        )

    def summary(self) -> str:
        """One line: the source bytes delivered, frames, gaps, truncation, anomalies."""
        call, subkind = self.key
        total = "no total yet" if self.total_bytes is None else f"total {self.total_bytes}"
        frames = plural(self.frames, "frame", "frames")
        least, most = self.delivered_bytes_min, self.delivered_bytes
        size = plural(most, "byte", "bytes") if least == most else f"{least}-{most} bytes"
        parts = [f"{call}/{subkind}: {size} in {frames} ({total})"]
        if self.gaps:
            low, high = self.lost_bytes_min, self.lost_bytes
            lost = plural(high, "byte", "bytes") if low == high else f"{low}-{high} bytes"
            inferred = sum(gap.inferred for gap in self.gaps)
            why = f", {inferred} inferred from total_bytes" if inferred else ""
            parts.append(f"{plural(len(self.gaps), 'gap', 'gaps')} ({lost} lost{why})")
        elif not self.unseen_bytes:
            parts.append("no gaps")
        if self.unseen_bytes:
            # Bytes the last total counts and no frame delivered (in flight, or
            # lost once the stream has ended): never "no gaps" beside them.
            parts.append(f"{plural(self.unseen_bytes, 'byte', 'bytes')} counted but not delivered")
        if self.overrun_bytes:
            parts.append(
                f"{plural(self.overrun_bytes, 'byte', 'bytes')} delivered past total_bytes"
                " (total_overrun)"
            )
        if self.truncated:
            parts.append("truncated at the output limit")
        if self.anomalies:
            kinds = sorted({anomaly.kind for anomaly in self.anomalies})
            count = len(self.anomalies) + self.anomalies_not_kept
            more = f", {self.anomalies_not_kept} not kept" if self.anomalies_not_kept else ""
            parts.append(f"{plural(count, 'anomaly', 'anomalies')} ({', '.join(kinds)}{more})")
        return ", ".join(parts)
