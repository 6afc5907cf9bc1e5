"""``StreamState``: what one ``(tool_call_id, subkind)`` stream has said, as a
value that folds.

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

__all__ = ("StreamState",)

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


def _take_text(state: StreamState, delta: str, chars: int, size: int) -> None:
    """Count ``delta`` (``size`` UTF-8 bytes, after ``chars`` characters) into
    ``state``'s text, keeping it when the state keeps text, within its limit."""
    if state._keep_text:
        state._chunks.append(delta)
    state._chars = chars + len(delta)
    state._bytes += size
    if state._text_limit is not None and state._bytes > state._text_limit:
        state._drop_text()


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


class StreamState:
    """What one ``(tool_call_id, subkind)`` stream has said so far. A value:
    equal when everything it knows is equal.

    Public reading: :attr:`text` (``None`` until a delta landed), :attr:`frames`,
    :attr:`total_bytes` (the last one), :attr:`truncated`, :attr:`gaps`,
    :attr:`anomalies`, :attr:`notes` (non-delta progress bodies, verbatim),
    :meth:`report` and :meth:`render`. Without ``keep_text`` the figures are
    all there but :attr:`text` and :meth:`render` raise.
    """

    __slots__ = (
        "_anchored",
        "_anomalies",
        "_anomalies_cut",
        "_bytes",
        "_chars",
        "_chunks",
        "_cur_hi",
        "_cur_lo",
        "_first_gap",
        "_first_hold",
        "_first_index",
        "_from_start",
        "_gaps",
        "_has_text",
        "_keep_text",
        "_lead_chars",
        "_lead_end",
        "_lead_end_hold",
        "_lead_end_index",
        "_lead_hi",
        "_lead_lo",
        "_notes",
        "_notice_index",
        "_notice_said",
        "_rel_gap",
        "_replacements",
        "_run_open",
        "_run_start",
        "_text_cut",
        "_text_limit",
        "first_total",
        "frames",
        "key",
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
        self._keep_text = keep_text
        # The most text bytes kept; past it the text is dropped (and said so).
        self._text_limit = max_text_bytes
        self._text_cut = False
        self._from_start = from_start
        self.frames = 0
        self.first_total: int | None = None
        self.total_bytes: int | None = None
        self.truncated = False
        self._first_index = -1
        self._chunks: list[str] = []
        self._has_text = False
        self._chars = 0
        self._bytes = 0
        self._replacements = 0
        self._gaps: list[Gap] = []
        self._anomalies: list[Anomaly] = []
        # Anomalies past MAX_ANOMALIES_KEPT: counted, not kept.
        self._anomalies_cut = 0
        self._notes: list[Any] = []
        # The producer's cursor as the consumer can bound it: source bytes
        # delivered or lost so far. Relative to where this fold began until the
        # first run end or gap frame anchors it (Rule 4).
        self._cur_lo = 0
        self._cur_hi = 0
        self._anchored = False
        # The first decodable frame: a gap frame?; the hold bound it implies.
        self._first_gap = False
        self._first_hold = MAX_HELD_BYTES
        # The lead: bytes and characters of the frames at the first total, and
        # how, where and with what hold bound it ended.
        self._lead_lo = 0
        self._lead_hi = 0
        self._lead_chars = 0
        self._lead_end: _LeadEnd = "open"
        self._lead_end_hold = MAX_HELD_BYTES
        self._lead_end_index = -1
        # The first gap's figures are relative to where this fold began.
        self._rel_gap = False
        # The last gap's paced remainder may still be arriving.
        self._run_open = False
        # Where (in characters) the current run began.
        self._run_start = 0
        # The record of the truncation notice (-1: none yet), and whether a
        # frame after it was reported (once per stream).
        self._notice_index = -1
        self._notice_said = False

    # -- reading -----------------------------------------------------------

    @property
    def keeps_text(self) -> bool:
        """Whether this stream keeps its text (``Reassembler(keep_text=...)``)."""
        return self._keep_text

    @property
    def text(self) -> str | None:
        """The reassembled text, or ``None`` when no delta has landed.

        Raises:
            ValueError: the stream keeps no text (see :attr:`keeps_text`).
        """
        if not self._keep_text:
            name = f"{self.key.tool_call_id}/{self.key.subkind}"
            if self._text_cut:
                raise ValueError(
                    f"the text of stream {name} passed max_text_bytes={self._text_limit}"
                    " and was not kept"
                )
            raise ValueError(
                f"stream {name} keeps no text (the reassembler was made with keep_text=False)"
            )
        if not self._has_text:
            return None
        chunks = self._chunks
        if len(chunks) != 1:
            joined = "".join(chunks)
            chunks[:] = [joined] if joined else []
            return joined
        return chunks[0]

    @property
    def text_bytes(self) -> int:
        """The UTF-8 length of the text (0 while nothing landed)."""
        return self._bytes

    @property
    def gaps(self) -> tuple[Gap, ...]:
        """Every gap, in stream order: the producer's gap frames, and the losses
        inferred from ``total_bytes`` (``Gap.inferred``)."""
        return tuple(self._all_gaps())

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        """Every anomaly attributed to this stream, in record order (the first
        :data:`MAX_ANOMALIES_KEPT`; :meth:`report` counts the others)."""
        self._anomalies_cut += keep_first(self._anomalies)
        return tuple(self._anomalies)

    @property
    def notes(self) -> tuple[Any, ...]:
        """Bodies of frames that are progress but not a delta stream (kind
        ``"text"`` with ``{"text": ...}``, kind ``"content"`` with a block list)."""
        return tuple(self._notes)

    @property
    def unseen_bytes(self) -> int:
        """Bytes the last ``total_bytes`` counts beyond what the frames delivered
        and the producer may still hold back: still in flight on a live stream,
        lost on one that has ended (0 when there are none)."""
        return self._unseen(MAX_HELD_BYTES)

    def _unseen(self, held: int) -> int:
        last = self.total_bytes
        if last is None or self._run_open:
            return 0
        if not self._anchored and not self._from_start:
            return 0  # the lead of a fold that began mid-stream: no base
        return max(last - held - self._cur_hi, 0)

    def report(self, *, ended: bool = False) -> LossReport:
        """The :class:`LossReport` of this stream. ``ended``: the stream has
        ended (its call returned, its log is whole), so the producer holds
        nothing back: every byte its total counts was delivered or lost, which
        makes the lost count exact when no delta holds a U+FFFD."""
        self._anomalies_cut += keep_first(self._anomalies)
        # A truncated stream may end before a character the limit cut in half.
        held = MAX_HELD_BYTES if not ended or self.truncated else 0
        unseen = self._unseen(held)
        gaps = self._all_gaps()
        lost_range = None
        last = self.total_bytes
        if gaps and not unseen and self._anchored and self._from_start and last is not None:
            # Every byte counted was delivered, lost in a gap, or held at the
            # end: the gaps' sum, whatever each one's own bounds.
            low = max(sum(gap.lost_bytes_min for gap in gaps), last - self._bytes - held)
            high = min(
                sum(gap.lost_bytes for gap in gaps), last - self._bytes + 2 * self._replacements
            )
            if low <= high:
                lost_range = (low, high)
        overrun = 0
        if (
            last is not None
            and not self._run_open
            and (self._from_start or self._anchored)
            and self._cur_lo > last
        ):
            overrun = self._cur_lo - last
        delivered = None
        if self._replacements:
            delivered = self._delivered(
                gaps, lost_range, ended and not self.truncated and not unseen
            )
        return LossReport(
            key=self.key,
            frames=self.frames,
            text_bytes=self._bytes,
            total_bytes=last,
            gaps=tuple(gaps),
            truncated=self.truncated,
            anomalies=tuple(self._anomalies),
            unseen_bytes=unseen,
            anomalies_not_kept=self._anomalies_cut,
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
        low, high = self._bytes - 2 * self._replacements, self._bytes
        last = self.total_bytes
        if last is None or not self._from_start or low > last:
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
            ValueError: the stream keeps no text (see :attr:`keeps_text`).
        """
        text = self.text or ""
        pieces: list[str] = []
        at = 0
        for gap in self._all_gaps():
            pieces.append(text[at : gap.offset])
            pieces.append(render_gap_marker(marker, gap))
            at = gap.offset
        pieces.append(text[at:])
        return "".join(pieces)

    def __repr__(self) -> str:
        return f"StreamState({self.report().summary()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamState):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable value: not hashable

    def _fields(self) -> tuple[Any, ...]:
        self._anomalies_cut += keep_first(self._anomalies)
        return (
            self.key,
            self._keep_text,
            self._from_start,
            self.frames,
            self.first_total,
            self.total_bytes,
            self.truncated,
            self._first_index,
            "".join(self._chunks),
            self._has_text,
            self._chars,
            self._bytes,
            self._replacements,
            self._gaps,
            self._anomalies,
            self._anomalies_cut,
            self._notes,
            self._cur_lo,
            self._cur_hi,
            self._anchored,
            self._first_gap,
            self._first_hold,
            self._lead_lo,
            self._lead_hi,
            self._lead_chars,
            self._lead_end,
            self._lead_end_hold,
            self._lead_end_index,
            self._rel_gap,
            self._run_open,
            self._run_start,
            self._notice_index,
            self._notice_said,
            self._text_cut,
        )

    def _prefix_gap(self) -> Gap | None:
        """The bytes before the lead that no frame delivered, when this fold
        began at the stream's start and its lead ended in a run end."""
        if not self._from_start or self._lead_end != "rise":
            return None
        first = self.first_total
        assert first is not None
        if first - self._lead_end_hold - self._lead_hi <= 0:
            return None
        return Gap(
            offset=0,
            index=self._lead_end_index,
            total_bytes=first,
            upper=first - self._lead_lo,
            lower=first - self._lead_hi,
            held=self._lead_end_hold,
            inferred=True,
        )

    def _all_gaps(self) -> list[Gap]:
        prefix = self._prefix_gap()
        if prefix is None:
            return self._gaps
        return [prefix, *self._gaps]

    # -- absorbing (the steps are module functions below) ---------------------

    def _drop_text(self) -> None:
        # Past max_text_bytes: the figures go on, the text is no longer kept.
        if self._keep_text:
            self._keep_text = False
            self._text_cut = True
            self._chunks = []

    def _inferred_gap(self, index: int, last: int, held: int) -> Gap:
        # The current run, which began at _run_start, delivered less than its
        # total `last`: the missing bytes are a loss its frames never said.
        return Gap(
            offset=self._run_start,
            index=index,
            total_bytes=last,
            upper=last - self._cur_lo,
            lower=last - self._cur_hi,
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
        if self._run_open:
            self._run_open = False
            self._refine_hold(held)
            return None
        overrun = None
        if (self._from_start or self._anchored) and self._cur_lo > last:
            overrun = _run_overrun(self.key, index, self._cur_lo, last)
        if self._lead_end == "open":
            self._lead_end = "rise" if rising else "fall"
            self._lead_end_hold = held
            self._lead_end_index = index
        elif rising and last - held - self._cur_hi > 0:
            self._gaps.append(self._inferred_gap(index, last, held))
        self._cur_lo = last - held
        self._cur_hi = last
        self._anchored = True
        return overrun

    def _refine_hold(self, held: int) -> None:
        # The frame after a gap's run shows how much the producer can have held
        # back at the end of it; the last gap's lower bound and the cursor tighten.
        gap = self._gaps[-1]
        if held < gap.held:
            self._cur_lo += gap.held - held
            self._gaps[-1] = gap_with_held(gap, held)

    def _adopt(self, later: StreamState, records: int, chars: int) -> None:
        """Take ``later``'s payload figures whole (this fold had none)."""
        self.first_total = later.first_total
        self.total_bytes = later.total_bytes
        self._first_index = later._first_index + records
        if later._text_cut:
            self._drop_text()
        if self._keep_text:
            self._chunks.extend(later._chunks)
        self._has_text = later._has_text
        self._chars = chars + later._chars
        self._bytes += later._bytes
        self._replacements += later._replacements
        self._gaps.extend(gap_shifted(gap, chars, records) for gap in later._gaps)
        self._cur_lo, self._cur_hi = later._cur_lo, later._cur_hi
        self._anchored = later._anchored
        self._first_gap = later._first_gap
        self._first_hold = later._first_hold
        self._lead_lo, self._lead_hi = later._lead_lo, later._lead_hi
        self._lead_chars = later._lead_chars
        self._lead_end = later._lead_end
        self._lead_end_hold = later._lead_end_hold
        self._lead_end_index = later._lead_end_index + records if later._lead_end_index >= 0 else -1
        self._rel_gap = later._rel_gap
        self._run_open = later._run_open
        self._run_start = chars + later._run_start
        self._notice_index = later._notice_index + records if later._notice_index >= 0 else -1
        self._notice_said = later._notice_said


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


# What the reassembler reads and adds: the fold's steps, package-private
# (``_reassembler`` imports them; none is part of StreamState's API).


def first_index_of(state: StreamState) -> int:
    """The record index of ``state``'s first delta (-1: none yet)."""
    return state._first_index


def recorded_anomalies(state: StreamState) -> list[Anomaly]:
    """The anomalies recorded so far, as held (not yet cut to
    :data:`MAX_ANOMALIES_KEPT`); the caller must not change the list."""
    return state._anomalies


def add_anomaly(state: StreamState, anomaly: Anomaly) -> None:
    """Report ``anomaly`` against ``state``'s stream."""
    state._anomalies.append(anomaly)


def add_note(state: StreamState, body: Any) -> None:
    """Keep ``body``, a progress body that is not a delta, as a note."""
    state._notes.append(body)


def added_at(state: StreamState, index: int) -> tuple[list[Anomaly], Gap | None]:
    """What record ``index``, the last absorbed, added to ``state``: the
    anomalies reported at it (in record order) and the gap it opened or
    proved, if any.

    A gap a gap frame opened is given with what that frame proves: at most
    its upper bound, and at least 1 byte. Frames after it at the same total
    carry the rest of its run and lower both bounds, so the bound it would
    have as the run's last frame is no lower bound yet; the fold narrows it
    to the exact figure as they arrive."""
    own = state._anomalies
    first = len(own)
    while first and own[first - 1].index == index:
        first -= 1
    gaps = state._gaps
    gap = gaps[-1] if gaps and gaps[-1].index == index else None
    if gap is not None and not gap.inferred:
        gap = gap_opened_at(state, index)
    if gap is None and state._lead_end_index == index:
        gap = state._prefix_gap()
    return own[first:], gap


def gap_opened_at(state: StreamState, index: int) -> Gap | None:
    """The gap the gap frame of record ``index`` opened,
    with the bounds the records absorbed since prove: the fold's figures
    once its run has ended (a later total, or a later gap), and while the
    run may still go on, its upper bound and at least 1 byte. ``None`` when
    no gap frame of ``state`` is at ``index``."""
    gaps = state._gaps
    for position in range(len(gaps) - 1, -1, -1):
        gap = gaps[position]
        if gap.index < index:
            break
        if gap.index == index and not gap.inferred:
            last = position == len(gaps) - 1
            if last and state._run_open and state.total_bytes == gap.total_bytes:
                return gap_with_open_run(gap)
            return gap
    return None


def absorb_payload(
    state: StreamState, payload: PartialResultPayload, index: int, dropped: int | None
) -> None:
    """Absorb into ``state`` the delta of record ``index`` (``dropped``: its
    frame's ``dropped_count``): the reassembler's step."""
    if len(state._anomalies) > MAX_ANOMALIES_KEPT:
        state._anomalies_cut += keep_first(state._anomalies)
    total = payload.total_bytes
    delta = payload.delta
    gap = payload.gap
    last = state.total_bytes
    if (
        delta
        and not gap
        and not dropped
        and not payload.truncated
        and not state._run_open
        and state._lead_end != "open"
        and state._notice_index < 0
        and last is not None
        and total >= last
        and len(delta) * 4 <= total
    ):
        # The steady path: a frame that only appends, in the same run or
        # the next (the general path below does the same, step by step).
        chars = state._chars
        if delta.isascii():
            size = low = len(delta)
            held = 0
        else:
            size, low, replaced = _sizes(delta)
            state._replacements += replaced
            held = _hold_bound(delta)
        _take_text(state, delta, chars, size)
        if total != last:
            if state._cur_lo > last:
                state._anomalies.append(_run_overrun(state.key, index, state._cur_lo, last))
            if last - held - state._cur_hi > 0:
                state._gaps.append(state._inferred_gap(index, last, held))
            state._cur_lo = last - held + low
            state._cur_hi = last + size
            state._run_start = chars
        else:
            state._cur_lo += low
            state._cur_hi += size
        state.frames += 1
        state.total_bytes = total
        return
    state.frames += 1
    state._has_text = True
    chars = state._chars
    if delta:
        size, low, replaced = _sizes(delta)
        _take_text(state, delta, chars, size)
        state._replacements += replaced
    else:
        size = low = 0
    if state._notice_index >= 0 and not state._notice_said:
        state._notice_said = True
        state._anomalies.append(_after_end(state.key, index))
    if last is None:
        state.first_total = total
        state._first_index = index
        state._first_gap = gap
        state._first_hold = MAX_HELD_BYTES if gap else _hold_bound(delta)
        state._run_start = chars
        if gap:
            state._lead_end = "gap"
        else:
            state._lead_lo, state._lead_hi, state._lead_chars = low, size, len(delta)
            state._cur_lo += low
            state._cur_hi += size
    else:
        if total < last:
            state._anomalies.append(_regressed(state.key, index, last, total))
        if gap:
            if state._lead_end == "open":
                state._lead_end = "gap"
        elif state._run_open and total == state._gaps[-1].total_bytes:
            # The paced remainder of the last gap's surviving tail.
            state._gaps[-1] = gap_narrowed(state._gaps[-1], low, size)
        elif state._lead_end == "open" and total == state.first_total:
            state._lead_lo += low
            state._lead_hi += size
            state._lead_chars += len(delta)
            state._cur_lo += low
            state._cur_hi += size
        elif total == last:
            state._cur_lo += low
            state._cur_hi += size
        else:
            overrun = state._end_run(_hold_bound(delta), index, total > last)
            if overrun is not None:
                state._anomalies.append(overrun)
            if total < last:
                # After a regression (reported on its own) the producer's
                # cursor is known only to be at least 0.
                state._cur_lo = 0
            state._run_start = chars
            state._cur_lo += low
            state._cur_hi += size
    if len(delta) * 4 > total and _source_bytes_min(delta) > total:
        # A character is at most 4 source bytes, so only a delta with more
        # than a quarter as many characters as the total can overrun it.
        state._anomalies.append(_overrun(state.key, index, delta, total))
    state.total_bytes = total
    if payload.truncated:
        state.truncated = True
        if not delta and not gap and state._notice_index < 0:
            state._notice_index = index
    if gap:
        state._gaps.append(
            Gap(
                offset=chars,
                index=index,
                total_bytes=total,
                upper=total - state._cur_lo - low,
                lower=total - state._cur_hi - size,
            )
        )
        state._rel_gap = state._rel_gap or not state._anchored
        state._cur_lo = total - MAX_HELD_BYTES
        state._cur_hi = total
        state._anchored = True
        state._run_open = True
        state._run_start = chars
    if dropped:
        state._anomalies.append(
            Anomaly(
                "dropped_frames",
                index,
                f"the sender dropped {dropped} frame(s) before this one",
                state.key,
            )
        )


def absorb_loss(state: StreamState, total: int, index: int) -> None:
    """Absorb into ``state`` a loss its reader's transport learned of at record
    ``index``, ending at the stream's total ``total`` (Rule 5): folded as a
    gap frame with no delta at that total, counting no frame."""
    absorb_payload(state, PartialResultPayload(delta="", total_bytes=total, gap=True), index, None)
    state.frames -= 1


def absorb_state(state: StreamState, later: StreamState, records: int) -> None:
    """Absorb into ``state`` the fold of its stream's later records
    (``records`` = how many records ``state``'s owner had absorbed before them)."""
    state._anomalies_cut += keep_first(state._anomalies)
    later._anomalies_cut += keep_first(later._anomalies)
    # Only the first frame after a truncation notice is reported.
    said = state._notice_index >= 0 and (state._notice_said or later.first_total is not None)
    anomalies = [
        shift_anomaly(anomaly, records)
        for anomaly in later._anomalies
        if anomaly.kind != "unknown_call" and not (said and anomaly.kind == "frame_after_end")
    ]
    state.frames += later.frames
    state._notes.extend(later._notes)
    state.truncated = state.truncated or later.truncated
    state._anomalies_cut += later._anomalies_cut
    if later.first_total is None:
        state._anomalies.extend(anomalies)
        state._anomalies_cut += keep_first(state._anomalies)
        return
    chars = state._chars
    if state.first_total is None:
        state._adopt(later, records, chars)
        if state._from_start and not later._from_start and later._lead_end in ("rise", "fall"):
            # The later fold began where this stream may have been under
            # way, so it left its first run unjudged; from the start, that
            # run is the stream's first, and its overrun is certain.
            first = later.first_total
            if later._lead_lo > first:
                index = later._lead_end_index + records
                insert_anomaly(anomalies, _run_overrun(state.key, index, later._lead_lo, first))
        state._anomalies.extend(anomalies)
        state._anomalies_cut += keep_first(state._anomalies)
        return
    first = later.first_total
    last = state.total_bytes
    assert last is not None
    first_index = later._first_index + records
    if state._notice_index >= 0 and not state._notice_said:
        insert_anomaly(anomalies, _after_end(state.key, first_index))
    if first < last:
        insert_anomaly(anomalies, _regressed(state.key, first_index, last, first))
    if later._first_gap:
        if state._lead_end == "open":
            state._lead_end = "gap"
        base_lo, base_hi = state._cur_lo, state._cur_hi
    else:
        lead_lo, lead_hi = later._lead_lo, later._lead_hi
        if state._run_open and first == state._gaps[-1].total_bytes:
            # The lead is the paced remainder of this fold's last gap.
            state._gaps[-1] = gap_narrowed(state._gaps[-1], lead_lo, lead_hi)
            base_lo, base_hi = state._cur_lo - lead_lo, state._cur_hi - lead_hi
        elif state._lead_end == "open" and first == state.first_total:
            state._lead_lo += lead_lo
            state._lead_hi += lead_hi
            state._lead_chars += later._lead_chars
            base_lo, base_hi = state._cur_lo, state._cur_hi
        elif first == last:
            base_lo, base_hi = state._cur_lo, state._cur_hi
        else:
            overrun = state._end_run(later._first_hold, first_index, first > last)
            if overrun is not None:
                insert_anomaly(anomalies, overrun)
            if first < last:
                state._cur_lo = 0
            state._run_start = chars
            base_lo, base_hi = state._cur_lo, state._cur_hi
        if later._lead_end in ("rise", "fall"):
            # The run holding the lead ends where the lead ended. The later
            # fold judged that run without what came before it: its verdict
            # is replaced by the one made here, with this fold's figures.
            end_index = later._lead_end_index + records
            anomalies = [
                anomaly
                for anomaly in anomalies
                if not (anomaly.index == end_index and _is_run_overrun(anomaly))
            ]
            state.total_bytes = first
            state._cur_lo, state._cur_hi = base_lo + lead_lo, base_hi + lead_hi
            overrun = state._end_run(
                later._lead_end_hold, later._lead_end_index + records, later._lead_end == "rise"
            )
            if overrun is not None:
                insert_anomaly(anomalies, overrun)
        elif later._lead_end == "gap" and state._lead_end == "open":
            state._lead_end = "gap"
    gaps = [gap_shifted(gap, chars, records) for gap in later._gaps]
    if later._rel_gap:
        gaps[0] = gap_rebased(gaps[0], base_lo, base_hi)
        # Still relative when this fold had no anchor either.
        state._rel_gap = state._rel_gap or not state._anchored
    if later._anchored:
        state._cur_lo, state._cur_hi = later._cur_lo, later._cur_hi
        state._anchored = True
    else:
        state._cur_lo, state._cur_hi = base_lo + later._cur_lo, base_hi + later._cur_hi
    if later._gaps:
        state._run_open = later._run_open
    if later._first_gap or later._lead_end != "open":
        state._run_start = chars + later._run_start
    if state._notice_index >= 0:
        state._notice_said = True
    elif later._notice_index >= 0:
        state._notice_index = later._notice_index + records
        state._notice_said = later._notice_said
    state.total_bytes = later.total_bytes
    if later._text_cut:
        state._drop_text()
    if state._keep_text:
        state._chunks.extend(later._chunks)
    state._has_text = True
    state._chars += later._chars
    state._bytes += later._bytes
    if state._text_limit is not None and state._bytes > state._text_limit:
        state._drop_text()
    state._replacements += later._replacements
    state._gaps.extend(gaps)
    state._anomalies.extend(anomalies)
    state._anomalies_cut += keep_first(state._anomalies)


def shifted_copy(state: StreamState, records: int, from_start: bool) -> StreamState:
    """A copy of ``state`` whose record indexes are ``records`` later, for
    a fold that began at the start or not (``from_start``)."""
    fresh = StreamState(
        state.key,
        keep_text=state._keep_text or state._text_cut,
        from_start=from_start,
        max_text_bytes=state._text_limit,
    )
    absorb_state(fresh, state, records)
    # An unknown-call report belongs to whoever first saw the stream.
    fresh._anomalies[:0] = [
        shift_anomaly(anomaly, records)
        for anomaly in state._anomalies
        if anomaly.kind == "unknown_call"
    ]
    return fresh
