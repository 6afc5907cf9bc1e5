"""``StreamFold``: what one ``(tool_call_id, subkind)`` stream has said, as a
value that folds (the core under the public ``StreamState``).

Invariants:

Rule 1. Absent is not empty: the text is ``None`` until a decodable
        partial-result frame has landed; a frame with an empty delta (a gap
        with nothing decodable after it, or a truncation notice) makes it ``""``.
        An empty non-gap frame with ``truncated`` is the producer's truncation
        notice (``DeltaStreamer`` Rule 4): it appends nothing, makes the stream
        ``truncated``, and ends it: a frame after it is reported
        (``frame_after_end``).
Rule 2. Text is only appended, as a list of chunks joined when read, and only
        when the stream keeps text (``keep_text``); without it, the state is a
        fixed set of counters plus one entry per loss, whatever the output size.
Rule 3. The producer drains after every write (``DeltaStreamer.drain``), so the
        frames that share one ``total_bytes`` (a *run*) are one drain: when the
        next run begins, the producer's cursor stood at that total minus at
        most the bytes it held back, and the next frame's first character
        bounds those (:data:`MAX_HELD_BYTES`). Each run end re-anchors the
        cursor there; bytes that the total accounts for and no frame of the
        run delivered are a loss (an *inferred* :class:`Gap`, placed where the
        run began). A gap frame's lost bytes are its total minus the cursor
        before it minus the bytes its run delivered (its paced remainder).
Rule 4. The only figures relative to where a fold began are its first run (the
        *lead*, frames at the first total) and a gap frame met before the lead
        ended in a run end. Absorbing a later fold resolves them against this
        fold's cursor, exactly as one pass over both would have, so absorbing
        two folds equals folding their records whole. A fold that began at the
        start of the stream (``from_start``) resolves its lead against 0: a
        first run that delivered less than its total is a missing prefix.
Rule 5. A loss the reader's transport learned of, with the stream's total as
        of the loss (``Reassembler.record_loss(..., total_bytes=...)``), folds
        exactly as a gap frame with no delta at that total, except that it
        counts no frame: so Rules 1, 3 and 4 hold for it as for a gap frame,
        and it may be the stream's first record.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from kigi_tool_protocol import PartialResultPayload

from ._loss import (
    DEFAULT_GAP_MARKER,
    MAX_ANOMALIES_KEPT,
    MAX_HELD_BYTES,
    Anomaly,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
    gap_narrowed,
    gap_rebased,
    gap_shifted,
    gap_with_held,
    gap_with_open_run,
    render_gap_marker,
)

__all__ = ()

_REPLACEMENT: Final = "\ufffd"

# Per-record order of anomalies at one index, so merged folds list them exactly
# as a whole fold does: the record's seq check first, then what its content said.
_ORDER: Final = {
    "seq_gap": 0,
    "seq_repeated": 0,
    "seq_reordered": 0,
    "streams_evicted": 0,
    "unknown_call": 1,
    "undecodable": 2,
    "payload_invalid": 2,
    "frame_after_end": 3,
    "total_regressed": 3,
    "total_overrun": 4,
    "dropped_frames": 5,
}

# How the lead (the first run) ended: not yet, at a gap frame, at a frame with a
# higher total (a run end that can prove a missing prefix) or a lower one.
_LeadEnd = Literal["open", "gap", "rise", "fall"]


def _hold_bound(delta: str) -> int:
    """How many bytes the producer can have been holding back just before the
    frame whose delta is ``delta``: the held bytes begin its first character."""
    if not delta:
        return MAX_HELD_BYTES
    first = delta[0]
    if first < "\x80":
        return 0
    if first == _REPLACEMENT:
        return MAX_HELD_BYTES
    return len(first.encode("utf-8", "surrogatepass")) - 1


def _sizes(delta: str) -> tuple[int, int, int]:
    """The UTF-8 length of ``delta``, the fewest source bytes it can stand for
    (one U+FFFD, 3 bytes, replaces 1 to 3 of them), and its U+FFFD count."""
    if delta.isascii():
        size = len(delta)
        return size, size, 0
    size = len(delta.encode("utf-8", "surrogatepass"))
    # ``in`` finds a lone character far faster than ``count`` walks the text
    # (it skips ahead with memchr): count only a delta that has one.
    replaced = delta.count(_REPLACEMENT) if _REPLACEMENT in delta else 0
    return size, size - 2 * replaced, replaced


class StreamFold:
    """What one ``(tool_call_id, subkind)`` stream has said so far, and the
    steps that fold more of it in. A value: equal when everything it knows is
    equal.

    Package-private: its fields are the fold's own figures, read and written
    by its steps; a reader sees it through :class:`StreamState`, which owns
    one and gives only the public reading.
    """

    __slots__ = (
        "anchored",
        "anomalies",
        "anomalies_cut",
        "chars",
        "chunks",
        "cur_hi",
        "cur_lo",
        "first_gap",
        "first_hold",
        "first_index",
        "first_total",
        "frames",
        "from_start",
        "gaps",
        "has_text",
        "keep_text",
        "key",
        "lead_chars",
        "lead_end",
        "lead_end_hold",
        "lead_end_index",
        "lead_hi",
        "lead_lo",
        "notes",
        "notice_index",
        "notice_said",
        "rel_gap",
        "replacements",
        "run_open",
        "run_start",
        "text_bytes",
        "text_cut",
        "text_limit",
        "total_bytes",
        "truncated",
    )

    def __init__(
        self,
        key: StreamKey,
        *,
        keep_text: bool = True,
        from_start: bool = True,
        max_text_bytes: int | None = None,
    ) -> None:
        self.key = key
        self.keep_text = keep_text
        # The most text bytes kept; past it the text is dropped (and said so).
        self.text_limit = max_text_bytes
        self.text_cut = False
        self.from_start = from_start
        self.frames = 0
        self.first_total: int | None = None
        self.total_bytes: int | None = None
        self.truncated = False
        self.first_index = -1
        self.chunks: list[str] = []
        self.has_text = False
        self.chars = 0
        self.text_bytes = 0
        self.replacements = 0
        self.gaps: list[Gap] = []
        self.anomalies: list[Anomaly] = []
        # Anomalies past MAX_ANOMALIES_KEPT: counted, not kept.
        self.anomalies_cut = 0
        self.notes: list[Any] = []
        # The producer's cursor as the consumer can bound it: source bytes
        # delivered or lost so far. Relative to where this fold began until the
        # first run end or gap frame anchors it (Rule 4).
        self.cur_lo = 0
        self.cur_hi = 0
        self.anchored = False
        # The first decodable frame: a gap frame?; the hold bound it implies.
        self.first_gap = False
        self.first_hold = MAX_HELD_BYTES
        # The lead: bytes and characters of the frames at the first total, and
        # how, where and with what hold bound it ended.
        self.lead_lo = 0
        self.lead_hi = 0
        self.lead_chars = 0
        self.lead_end: _LeadEnd = "open"
        self.lead_end_hold = MAX_HELD_BYTES
        self.lead_end_index = -1
        # The first gap's figures are relative to where this fold began.
        self.rel_gap = False
        # The last gap's paced remainder may still be arriving.
        self.run_open = False
        # Where (in characters) the current run began.
        self.run_start = 0
        # The record of the truncation notice (-1: none yet), and whether a
        # frame after it was reported (once per stream).
        self.notice_index = -1
        self.notice_said = False

    # -- reading (``StreamState`` gives these to the reader) -----------------

    def read_text(self) -> str | None:
        """The reassembled text, or ``None`` when no delta has landed.

        Raises:
            ValueError: the stream keeps no text.
        """
        if not self.keep_text:
            name = f"{self.key.tool_call_id}/{self.key.subkind}"
            if self.text_cut:
                raise ValueError(
                    f"the text of stream {name} passed max_text_bytes={self.text_limit}"
                    " and was not kept"
                )
            raise ValueError(
                f"stream {name} keeps no text (the reassembler was made with keep_text=False)"
            )
        if not self.has_text:
            return None
        chunks = self.chunks
        if len(chunks) != 1:
            joined = "".join(chunks)
            chunks[:] = [joined] if joined else []
            return joined
        return chunks[0]

    def kept_anomalies(self) -> tuple[Anomaly, ...]:
        """The anomalies, cut to the first :data:`MAX_ANOMALIES_KEPT` (the
        others counted in :attr:`anomalies_cut`)."""
        self.anomalies_cut += keep_first(self.anomalies)
        return tuple(self.anomalies)

    def unseen(self, held: int) -> int:
        """The bytes unseen when the producer may hold back ``held``."""
        last = self.total_bytes
        if last is None or self.run_open:
            return 0
        if not self.anchored and not self.from_start:
            return 0  # the lead of a fold that began mid-stream: no base
        return max(last - held - self.cur_hi, 0)

    def report(self, *, ended: bool = False) -> LossReport:
        """The :class:`LossReport` of this stream. ``ended``: the stream has
        ended (its call returned, its log is whole), so the producer holds
        nothing back: every byte its total counts was delivered or lost, which
        makes the lost count exact when no delta holds a U+FFFD."""
        self.anomalies_cut += keep_first(self.anomalies)
        # A truncated stream may end before a character the limit cut in half.
        held = MAX_HELD_BYTES if not ended or self.truncated else 0
        unseen = self.unseen(held)
        gaps = self.all_gaps()
        lost_range = None
        last = self.total_bytes
        if gaps and not unseen and self.anchored and self.from_start and last is not None:
            # Every byte counted was delivered, lost in a gap, or held at the
            # end: the gaps' sum, whatever each one's own bounds.
            low = max(sum(gap.lost_bytes_min for gap in gaps), last - self.text_bytes - held)
            high = min(
                sum(gap.lost_bytes for gap in gaps), last - self.text_bytes + 2 * self.replacements
            )
            if low <= high:
                lost_range = (low, high)
        overrun = 0
        if (
            last is not None
            and not self.run_open
            and (self.from_start or self.anchored)
            and self.cur_lo > last
        ):
            overrun = self.cur_lo - last
        delivered = None
        if self.replacements:
            delivered = self._delivered(
                gaps, lost_range, ended and not self.truncated and not unseen
            )
        return LossReport(
            key=self.key,
            frames=self.frames,
            text_bytes=self.text_bytes,
            total_bytes=last,
            gaps=tuple(gaps),
            truncated=self.truncated,
            anomalies=tuple(self.anomalies),
            unseen_bytes=unseen,
            anomalies_not_kept=self.anomalies_cut,
            lost_range=lost_range,
            overrun_bytes=overrun,
            delivered_range=delivered,
        )

    def _delivered(
        self, gaps: list[Gap], lost_range: tuple[int, int] | None, whole: bool
    ) -> tuple[int, int]:
        """The source bytes the frames delivered, at least and at most: each
        U+FFFD stands for 1 to 3 of them. In a fold from the stream's start they
        and the bytes lost are within the last total; ``whole``: the stream has
        ended with nothing unseen and nothing held, so they make it up exactly."""
        low, high = self.text_bytes - 2 * self.replacements, self.text_bytes
        last = self.total_bytes
        if last is None or not self.from_start or low > last:
            return low, high  # no base, or an overrun: what arrived, as it is
        lost_low, lost_high = (
            lost_range
            if lost_range is not None
            else (sum(gap.lost_bytes_min for gap in gaps), sum(gap.lost_bytes for gap in gaps))
        )
        high = max(low, min(high, last - lost_low))
        if whole and (lost_range is not None or not gaps):
            low = min(high, max(low, last - lost_high))
        return low, high

    def render(self, marker: GapMarker = DEFAULT_GAP_MARKER) -> str:
        """The text with ``marker`` inserted wherever bytes were lost ("" when
        nothing landed).

        Raises:
            ValueError: the stream keeps no text .
        """
        text = self.read_text() or ""
        pieces: list[str] = []
        at = 0
        for gap in self.all_gaps():
            pieces.append(text[at : gap.offset])
            pieces.append(render_gap_marker(marker, gap))
            at = gap.offset
        pieces.append(text[at:])
        return "".join(pieces)

    def __repr__(self) -> str:
        return f"StreamFold({self.report().summary()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamFold):
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None  # type: ignore[assignment]  # mutable value: not hashable

    def fields(self) -> tuple[Any, ...]:
        """Everything this fold knows, for equality (the text joined)."""
        self.anomalies_cut += keep_first(self.anomalies)
        return (
            self.key,
            self.keep_text,
            self.from_start,
            self.frames,
            self.first_total,
            self.total_bytes,
            self.truncated,
            self.first_index,
            "".join(self.chunks),
            self.has_text,
            self.chars,
            self.text_bytes,
            self.replacements,
            self.gaps,
            self.anomalies,
            self.anomalies_cut,
            self.notes,
            self.cur_lo,
            self.cur_hi,
            self.anchored,
            self.first_gap,
            self.first_hold,
            self.lead_lo,
            self.lead_hi,
            self.lead_chars,
            self.lead_end,
            self.lead_end_hold,
            self.lead_end_index,
            self.rel_gap,
            self.run_open,
            self.run_start,
            self.notice_index,
            self.notice_said,
            self.text_cut,
        )

    def _prefix_gap(self) -> Gap | None:
        """The bytes before the lead that no frame delivered, when this fold
        began at the stream's start and its lead ended in a run end."""
        if not self.from_start or self.lead_end != "rise":
            return None
        first = self.first_total
        assert first is not None
        if first - self.lead_end_hold - self.lead_hi <= 0:
            return None
        return Gap(
            offset=0,
            index=self.lead_end_index,
            total_bytes=first,
            upper=first - self.lead_lo,
            lower=first - self.lead_hi,
            held=self.lead_end_hold,
            inferred=True,
        )

    def all_gaps(self) -> list[Gap]:
        """Every gap in stream order, the missing prefix (if any) first."""
        prefix = self._prefix_gap()
        if prefix is None:
            return self.gaps
        return [prefix, *self.gaps]

    # -- absorbing ---------------------------------------------------------------

    def _drop_text(self) -> None:
        # Past max_text_bytes: the figures go on, the text is no longer kept.
        if self.keep_text:
            self.keep_text = False
            self.text_cut = True
            self.chunks = []

    def _inferred_gap(self, index: int, last: int, held: int) -> Gap:
        # The current run, which began at _run_start, delivered less than its
        # total `last`: the missing bytes are a loss its frames never said.
        return Gap(
            offset=self.run_start,
            index=index,
            total_bytes=last,
            upper=last - self.cur_lo,
            lower=last - self.cur_hi,
            held=held,
            inferred=True,
        )

    def _end_run(self, held: int, index: int, rising: bool) -> Anomaly | None:
        """The current run (at :attr:`total_bytes`) ended at record ``index``,
        whose frame shows the producer held back at most ``held`` bytes;
        ``rising``: that frame's total is higher (a lower one is a regression,
        reported on its own). Returns the run's overrun, for the caller to
        report where a whole fold would: its frames together delivered more
        source bytes than its total counts."""
        last = self.total_bytes
        assert last is not None
        if self.run_open:
            self.run_open = False
            self._refine_hold(held)
            return None
        overrun = None
        if (self.from_start or self.anchored) and self.cur_lo > last:
            overrun = _run_overrun(self.key, index, self.cur_lo, last)
        if self.lead_end == "open":
            self.lead_end = "rise" if rising else "fall"
            self.lead_end_hold = held
            self.lead_end_index = index
        elif rising and last - held - self.cur_hi > 0:
            self.gaps.append(self._inferred_gap(index, last, held))
        self.cur_lo = last - held
        self.cur_hi = last
        self.anchored = True
        return overrun

    def _refine_hold(self, held: int) -> None:
        # The frame after a gap's run shows how much the producer can have held
        # back at the end of it; the last gap's lower bound and the cursor tighten.
        gap = self.gaps[-1]
        if held < gap.held:
            self.cur_lo += gap.held - held
            self.gaps[-1] = gap_with_held(gap, held)

    def _adopt(self, later: StreamFold, records: int, chars: int) -> None:
        """Take ``later``'s payload figures whole (this fold had none)."""
        self.first_total = later.first_total
        self.total_bytes = later.total_bytes
        self.first_index = later.first_index + records
        if later.text_cut:
            self._drop_text()
        if self.keep_text:
            self.chunks.extend(later.chunks)
        self.has_text = later.has_text
        self.chars = chars + later.chars
        self.text_bytes += later.text_bytes
        self.replacements += later.replacements
        self.gaps.extend(gap_shifted(gap, chars, records) for gap in later.gaps)
        self.cur_lo, self.cur_hi = later.cur_lo, later.cur_hi
        self.anchored = later.anchored
        self.first_gap = later.first_gap
        self.first_hold = later.first_hold
        self.lead_lo, self.lead_hi = later.lead_lo, later.lead_hi
        self.lead_chars = later.lead_chars
        self.lead_end = later.lead_end
        self.lead_end_hold = later.lead_end_hold
        self.lead_end_index = later.lead_end_index + records if later.lead_end_index >= 0 else -1
        self.rel_gap = later.rel_gap
        self.run_open = later.run_open
        self.run_start = chars + later.run_start
        self.notice_index = later.notice_index + records if later.notice_index >= 0 else -1
        self.notice_said = later.notice_said

    def _take_text(self, delta: str, chars: int, size: int) -> None:
        """Count ``delta`` (``size`` UTF-8 bytes, after ``chars`` characters) into
        this fold's text, keeping it when the fold keeps text, within its limit."""
        if self.keep_text:
            self.chunks.append(delta)
        self.chars = chars + len(delta)
        self.text_bytes += size
        if self.text_limit is not None and self.text_bytes > self.text_limit:
            self._drop_text()

    def added_at(self, index: int) -> tuple[list[Anomaly], Gap | None]:
        """What record ``index``, the last absorbed, added to this fold: the
        anomalies reported at it (in record order) and the gap it opened or
        proved, if any.

        A gap a gap frame opened is given with what that frame proves: at most
        its upper bound, and at least 1 byte. Frames after it at the same total
        carry the rest of its run and lower both bounds, so the bound it would
        have as the run's last frame is no lower bound yet; the fold narrows it
        to the exact figure as they arrive."""
        own = self.anomalies
        first = len(own)
        while first and own[first - 1].index == index:
            first -= 1
        gaps = self.gaps
        gap = gaps[-1] if gaps and gaps[-1].index == index else None
        if gap is not None and not gap.inferred:
            gap = self.gap_opened_at(index)
        if gap is None and self.lead_end_index == index:
            gap = self._prefix_gap()
        return own[first:], gap

    def gap_opened_at(self, index: int) -> Gap | None:
        """The gap the gap frame of record ``index`` opened,
        with the bounds the records absorbed since prove: the fold's figures
        once its run has ended (a later total, or a later gap), and while the
        run may still go on, its upper bound and at least 1 byte. ``None`` when
        no gap frame of this fold is at ``index``."""
        gaps = self.gaps
        for position in range(len(gaps) - 1, -1, -1):
            gap = gaps[position]
            if gap.index < index:
                break
            if gap.index == index and not gap.inferred:
                last = position == len(gaps) - 1
                if last and self.run_open and self.total_bytes == gap.total_bytes:
                    return gap_with_open_run(gap)
                return gap
        return None

    def absorb_payload(
        self, payload: PartialResultPayload, index: int, dropped: int | None
    ) -> None:
        """Absorb into this fold the delta of record ``index`` (``dropped``: its
        frame's ``dropped_count``): the reassembler's step."""
        if len(self.anomalies) > MAX_ANOMALIES_KEPT:
            self.anomalies_cut += keep_first(self.anomalies)
        total = payload.total_bytes
        delta = payload.delta
        gap = payload.gap
        last = self.total_bytes
        if (
            delta
            and not gap
            and not dropped
            and not payload.truncated
            and not self.run_open
            and self.lead_end != "open"
            and self.notice_index < 0
            and last is not None
            and total >= last
            and len(delta) * 4 <= total
        ):
            # The steady path: a frame that only appends, in the same run or
            # the next (the general path below does the same, step by step).
            chars = self.chars
            if delta.isascii():
                size = low = len(delta)
                held = 0
            else:
                size, low, replaced = _sizes(delta)
                self.replacements += replaced
                held = _hold_bound(delta)
            self._take_text(delta, chars, size)
            if total != last:
                if self.cur_lo > last:
                    self.anomalies.append(_run_overrun(self.key, index, self.cur_lo, last))
                if last - held - self.cur_hi > 0:
                    self.gaps.append(self._inferred_gap(index, last, held))
                self.cur_lo = last - held + low
                self.cur_hi = last + size
                self.run_start = chars
            else:
                self.cur_lo += low
                self.cur_hi += size
            self.frames += 1
            self.total_bytes = total
            return
        self.frames += 1
        self.has_text = True
        chars = self.chars
        if delta:
            size, low, replaced = _sizes(delta)
            self._take_text(delta, chars, size)
            self.replacements += replaced
        else:
            size = low = 0
        if self.notice_index >= 0 and not self.notice_said:
            self.notice_said = True
            self.anomalies.append(_after_end(self.key, index))
        if last is None:
            self.first_total = total
            self.first_index = index
            self.first_gap = gap
            self.first_hold = MAX_HELD_BYTES if gap else _hold_bound(delta)
            self.run_start = chars
            if gap:
                self.lead_end = "gap"
            else:
                self.lead_lo, self.lead_hi, self.lead_chars = low, size, len(delta)
                self.cur_lo += low
                self.cur_hi += size
        else:
            if total < last:
                self.anomalies.append(_regressed(self.key, index, last, total))
            if gap:
                if self.lead_end == "open":
                    self.lead_end = "gap"
            elif self.run_open and total == self.gaps[-1].total_bytes:
                # The paced remainder of the last gap's surviving tail.
                self.gaps[-1] = gap_narrowed(self.gaps[-1], low, size)
            elif self.lead_end == "open" and total == self.first_total:
                self.lead_lo += low
                self.lead_hi += size
                self.lead_chars += len(delta)
                self.cur_lo += low
                self.cur_hi += size
            elif total == last:
                self.cur_lo += low
                self.cur_hi += size
            else:
                overrun = self._end_run(_hold_bound(delta), index, total > last)
                if overrun is not None:
                    self.anomalies.append(overrun)
                if total < last:
                    # After a regression (reported on its own) the producer's
                    # cursor is known only to be at least 0.
                    self.cur_lo = 0
                self.run_start = chars
                self.cur_lo += low
                self.cur_hi += size
        if len(delta) * 4 > total and _source_bytes_min(delta) > total:
            # A character is at most 4 source bytes, so only a delta with more
            # than a quarter as many characters as the total can overrun it.
            self.anomalies.append(_overrun(self.key, index, delta, total))
        self.total_bytes = total
        if payload.truncated:
            self.truncated = True
            if not delta and not gap and self.notice_index < 0:
                self.notice_index = index
        if gap:
            self.gaps.append(
                Gap(
                    offset=chars,
                    index=index,
                    total_bytes=total,
                    upper=total - self.cur_lo - low,
                    lower=total - self.cur_hi - size,
                )
            )
            self.rel_gap = self.rel_gap or not self.anchored
            self.cur_lo = total - MAX_HELD_BYTES
            self.cur_hi = total
            self.anchored = True
            self.run_open = True
            self.run_start = chars
        if dropped:
            self.anomalies.append(
                Anomaly(
                    "dropped_frames",
                    index,
                    f"the sender dropped {dropped} frame(s) before this one",
                    self.key,
                )
            )

    def absorb_loss(self, total: int, index: int) -> None:
        """Absorb into this fold a loss its reader's transport learned of at record
        ``index``, ending at the stream's total ``total`` (Rule 5): folded as a
        gap frame with no delta at that total, counting no frame."""
        self.absorb_payload(
            PartialResultPayload(delta="", total_bytes=total, gap=True), index, None
        )
        self.frames -= 1

    def absorb(self, later: StreamFold, records: int) -> None:
        """Absorb into this fold the fold of its stream's later records
        (``records`` = how many records ``self``'s owner had absorbed before them)."""
        self.anomalies_cut += keep_first(self.anomalies)
        later.anomalies_cut += keep_first(later.anomalies)
        # Only the first frame after a truncation notice is reported.
        said = self.notice_index >= 0 and (self.notice_said or later.first_total is not None)
        anomalies = [
            shift_anomaly(anomaly, records)
            for anomaly in later.anomalies
            if anomaly.kind != "unknown_call" and not (said and anomaly.kind == "frame_after_end")
        ]
        self.frames += later.frames
        self.notes.extend(later.notes)
        self.truncated = self.truncated or later.truncated
        self.anomalies_cut += later.anomalies_cut
        if later.first_total is None:
            self.anomalies.extend(anomalies)
            self.anomalies_cut += keep_first(self.anomalies)
            return
        chars = self.chars
        if self.first_total is None:
            self._adopt(later, records, chars)
            if self.from_start and not later.from_start and later.lead_end in ("rise", "fall"):
                # The later fold began where this stream may have been under
                # way, so it left its first run unjudged; from the start, that
                # run is the stream's first, and its overrun is certain.
                first = later.first_total
                if later.lead_lo > first:
                    index = later.lead_end_index + records
                    insert_anomaly(anomalies, _run_overrun(self.key, index, later.lead_lo, first))
            self.anomalies.extend(anomalies)
            self.anomalies_cut += keep_first(self.anomalies)
            return
        first = later.first_total
        last = self.total_bytes
        assert last is not None
        first_index = later.first_index + records
        if self.notice_index >= 0 and not self.notice_said:
            insert_anomaly(anomalies, _after_end(self.key, first_index))
        if first < last:
            insert_anomaly(anomalies, _regressed(self.key, first_index, last, first))
        if later.first_gap:
            if self.lead_end == "open":
                self.lead_end = "gap"
            base_lo, base_hi = self.cur_lo, self.cur_hi
        else:
            lead_lo, lead_hi = later.lead_lo, later.lead_hi
            if self.run_open and first == self.gaps[-1].total_bytes:
                # The lead is the paced remainder of this fold's last gap.
                self.gaps[-1] = gap_narrowed(self.gaps[-1], lead_lo, lead_hi)
                base_lo, base_hi = self.cur_lo - lead_lo, self.cur_hi - lead_hi
            elif self.lead_end == "open" and first == self.first_total:
                self.lead_lo += lead_lo
                self.lead_hi += lead_hi
                self.lead_chars += later.lead_chars
                base_lo, base_hi = self.cur_lo, self.cur_hi
            elif first == last:
                base_lo, base_hi = self.cur_lo, self.cur_hi
            else:
                overrun = self._end_run(later.first_hold, first_index, first > last)
                if overrun is not None:
                    insert_anomaly(anomalies, overrun)
                if first < last:
                    self.cur_lo = 0
                self.run_start = chars
                base_lo, base_hi = self.cur_lo, self.cur_hi
            if later.lead_end in ("rise", "fall"):
                # The run holding the lead ends where the lead ended. The later
                # fold judged that run without what came before it: its verdict
                # is replaced by the one made here, with this fold's figures.
                end_index = later.lead_end_index + records
                anomalies = [
                    anomaly
                    for anomaly in anomalies
                    if not (anomaly.index == end_index and _is_run_overrun(anomaly))
                ]
                self.total_bytes = first
                self.cur_lo, self.cur_hi = base_lo + lead_lo, base_hi + lead_hi
                overrun = self._end_run(
                    later.lead_end_hold, later.lead_end_index + records, later.lead_end == "rise"
                )
                if overrun is not None:
                    insert_anomaly(anomalies, overrun)
            elif later.lead_end == "gap" and self.lead_end == "open":
                self.lead_end = "gap"
        gaps = [gap_shifted(gap, chars, records) for gap in later.gaps]
        if later.rel_gap:
            gaps[0] = gap_rebased(gaps[0], base_lo, base_hi)
            # Still relative when this fold had no anchor either.
            self.rel_gap = self.rel_gap or not self.anchored
        if later.anchored:
            self.cur_lo, self.cur_hi = later.cur_lo, later.cur_hi
            self.anchored = True
        else:
            self.cur_lo, self.cur_hi = base_lo + later.cur_lo, base_hi + later.cur_hi
        if later.gaps:
            self.run_open = later.run_open
        if later.first_gap or later.lead_end != "open":
            self.run_start = chars + later.run_start
        if self.notice_index >= 0:
            self.notice_said = True
        elif later.notice_index >= 0:
            self.notice_index = later.notice_index + records
            self.notice_said = later.notice_said
        self.total_bytes = later.total_bytes
        if later.text_cut:
            self._drop_text()
        if self.keep_text:
            self.chunks.extend(later.chunks)
        self.has_text = True
        self.chars += later.chars
        self.text_bytes += later.text_bytes
        if self.text_limit is not None and self.text_bytes > self.text_limit:
            self._drop_text()
        self.replacements += later.replacements
        self.gaps.extend(gaps)
        self.anomalies.extend(anomalies)
        self.anomalies_cut += keep_first(self.anomalies)

    def shifted_copy(self, records: int, from_start: bool) -> StreamFold:
        """A copy of ``self`` whose record indexes are ``records`` later, for
        a fold that began at the start or not (``from_start``)."""
        fresh = StreamFold(
            self.key,
            keep_text=self.keep_text or self.text_cut,
            from_start=from_start,
            max_text_bytes=self.text_limit,
        )
        fresh.absorb(self, records)
        # An unknown-call report belongs to whoever first saw the stream.
        fresh.anomalies[:0] = [
            shift_anomaly(anomaly, records)
            for anomaly in self.anomalies
            if anomaly.kind == "unknown_call"
        ]
        return fresh


def _after_end(key: StreamKey, index: int) -> Anomaly:
    return Anomaly(
        "frame_after_end",
        index,
        "a frame after the stream's truncation notice; nothing may follow it",
        key,
    )


def _regressed(key: StreamKey, index: int, last: int, total: int) -> Anomaly:
    return Anomaly(
        "total_regressed",
        index,
        f"total_bytes went back from {last} to {total}; it never decreases",
        key,
    )


# How a run's overrun begins (a single frame's overrun reads otherwise).
_RUN_OVERRUN: Final = "the frames up to total_bytes "


def _run_overrun(key: StreamKey, index: int, least: int, total: int) -> Anomaly:
    return Anomaly(
        "total_overrun",
        index,
        f"{_RUN_OVERRUN}{total} delivered at least {least} source bytes;"
        " a frame was repeated, or the producer miscounts",
        key,
    )


def _is_run_overrun(anomaly: Anomaly) -> bool:
    return anomaly.kind == "total_overrun" and anomaly.detail.startswith(_RUN_OVERRUN)


def _source_bytes_min(delta: str) -> int:
    """The fewest source bytes ``delta`` can stand for: its UTF-8 length, with
    each U+FFFD (3 bytes) counted as the 1 invalid byte it may replace."""
    return len(delta.encode("utf-8", "surrogatepass")) - 2 * delta.count(_REPLACEMENT)


def _overrun(key: StreamKey, index: int, delta: str, total: int) -> Anomaly:
    return Anomaly(
        "total_overrun",
        index,
        f"the delta holds at least {_source_bytes_min(delta)} source bytes but total_bytes"
        f" is {total}; a frame never carries more bytes than were produced",
        key,
    )


def keep_first(anomalies: list[Anomaly]) -> int:
    """Drop the anomalies past :data:`MAX_ANOMALIES_KEPT`; return how many."""
    extra = len(anomalies) - MAX_ANOMALIES_KEPT
    if extra <= 0:
        return 0
    del anomalies[MAX_ANOMALIES_KEPT:]
    return extra


def shift_anomaly(anomaly: Anomaly, records: int) -> Anomaly:
    """``anomaly`` as seen ``records`` records later."""
    if not records:
        return anomaly
    return Anomaly(anomaly.kind, anomaly.index + records, anomaly.detail, anomaly.key)


def anomaly_rank(anomaly: Anomaly) -> tuple[int, int]:
    """Where ``anomaly`` sorts among others: by record, then by check order."""
    return anomaly.index, _ORDER[anomaly.kind]


def insert_anomaly(anomalies: list[Anomaly], anomaly: Anomaly) -> None:
    """Insert ``anomaly`` where a whole fold would have reported it."""
    rank = anomaly_rank(anomaly)
    at = 0
    while at < len(anomalies) and anomaly_rank(anomalies[at]) < rank:
        at += 1
    anomalies.insert(at, anomaly)
