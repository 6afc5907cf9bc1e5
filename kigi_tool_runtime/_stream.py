"""``StreamState``: what one ``(tool_call_id, subkind)`` stream has said, as a
value that folds.

Invariants:

Rule 1. Absent is not empty: the text is ``None`` until a decodable
        partial-result frame has landed; a frame with an empty delta (a gap
        with nothing decodable after it, or a truncation notice) makes it ``""``.
        An empty non-gap frame is no anomaly: it is the producer's truncation
        notice (``DeltaStreamer`` Rule 4), which appends nothing, leaves the
        cursor where it was and makes the stream ``truncated``.
Rule 2. Text is only appended, as a list of chunks joined when read; a frame
        that only appends (the steady path) costs one list append, and its
        bytes are counted in one pass when a figure is next needed.
Rule 3. The producer's cursor is tracked as a pair of bounds: relative to
        where the fold began until the first gap, then anchored at each gap
        frame's ``total_bytes``. A gap's lost bytes are that total minus the
        cursor before it minus the bytes delivered at that same total (its
        paced remainder). Every figure that moves when a later fold is
        absorbed (a gap run continued, a held character ruled out, a relative
        cursor rebased) moves linearly, so absorbing two folds equals
        folding their records in one pass.
Rule 4. Gap accounting assumes the producer drains after every write, as
        ``DeltaStreamer.drain`` does: the frames that share a gap frame's
        ``total_bytes`` are what survived of that gap's tail.
"""

from __future__ import annotations

from typing import Any, Final

from kigi_tool_protocol import PartialResultPayload

from ._loss import (
    DEFAULT_GAP_MARKER,
    MAX_HELD_BYTES,
    Anomaly,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
    render_gap_marker,
)

__all__ = ("StreamState", "anomaly_rank", "insert_anomaly", "shift_anomaly")

_REPLACEMENT: Final = "\ufffd"

# Per-record order of anomalies at one index, so merged folds list them exactly
# as a whole fold does: the record's seq check first, then what its content said.
_ORDER: Final = {
    "seq_gap": 0,
    "seq_repeated": 0,
    "seq_reordered": 0,
    "unknown_call": 1,
    "undecodable": 2,
    "payload_invalid": 2,
    "total_regressed": 3,
    "total_overrun": 4,
    "dropped_frames": 5,
}


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
    return len(first.encode()) - 1


class StreamState:
    """What one ``(tool_call_id, subkind)`` stream has said so far. A value:
    equal when everything it knows is equal.

    Public reading: :attr:`text` (``None`` until a delta landed), :attr:`frames`,
    :attr:`total_bytes` (the last one), :attr:`truncated`, :attr:`gaps`,
    :attr:`anomalies`, :attr:`notes` (non-delta progress bodies, verbatim),
    :meth:`report` and :meth:`render`.
    """

    __slots__ = (
        "_after_lead_hold",
        "_anchored",
        "_anomalies",
        "_bytes",
        "_chars",
        "_chunks",
        "_cur_hi",
        "_cur_lo",
        "_first_hold",
        "_first_index",
        "_gaps",
        "_has_text",
        "_lead_hi",
        "_lead_lo",
        "_lead_open",
        "_notes",
        "_pre_hi",
        "_pre_lo",
        "_replacements",
        "_run_open",
        "_unmeasured",
        "first_total",
        "frames",
        "key",
        "total_bytes",
        "truncated",
    )

    def __init__(self, key: StreamKey) -> None:
        self.key = key
        self.frames = 0
        self.first_total: int | None = None
        self.total_bytes: int | None = None
        self.truncated = False
        self._first_index = -1
        self._chunks: list[str] = []
        # Chunks the steady path appended without counting them in _chars,
        # _bytes, _replacements and the cursor: measured in one pass when a
        # figure is next needed (a UTF-8 length costs an encode).
        self._unmeasured: list[str] = []
        self._has_text = False
        self._chars = 0
        self._bytes = 0
        self._replacements = 0
        self._gaps: list[Gap] = []
        self._anomalies: list[Anomaly] = []
        self._notes: list[Any] = []
        # The producer's cursor as the consumer can bound it: source bytes
        # delivered or lost so far. Relative to where this fold began until the
        # first gap anchors it to that gap's total.
        self._cur_lo = 0
        self._cur_hi = 0
        self._anchored = False
        # Bytes consumed before the first gap (relative), and the leading run of
        # frames that share the first total: a fold absorbed after an open gap
        # hands that run to the gap.
        self._pre_lo = 0
        self._pre_hi = 0
        self._lead_lo = 0
        self._lead_hi = 0
        self._lead_open = True
        # Held-back allowance implied by the first decodable frame, and by the
        # first one after the leading run (None: no such frame yet).
        self._first_hold: int | None = None
        self._after_lead_hold: int | None = None
        # The last gap's paced remainder may still be arriving.
        self._run_open = False

    # -- reading -----------------------------------------------------------

    @property
    def text(self) -> str | None:
        """The reassembled text, or ``None`` when no delta has landed."""
        if not self._has_text:
            return None
        chunks = self._chunks
        if len(chunks) != 1:
            joined = "".join(chunks)
            # The unmeasured list must not keep the old chunks alive beside the
            # joined text (twice the memory); all-ASCII text counts for free.
            if joined.isascii():
                self._measure(len(joined) - self._chars)
            else:
                self._measure()
            chunks[:] = [joined] if joined else []
            return joined
        return chunks[0]

    @property
    def text_bytes(self) -> int:
        """The UTF-8 length of :attr:`text` (0 while it is ``None``)."""
        self._measure()
        return self._bytes

    @property
    def gaps(self) -> tuple[Gap, ...]:
        """Every gap, in stream order."""
        return tuple(self._gaps)

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        """Every anomaly attributed to this stream, in record order."""
        return tuple(self._anomalies)

    @property
    def notes(self) -> tuple[Any, ...]:
        """Bodies of frames that are progress but not a delta stream (kind
        ``"text"`` with ``{"text": ...}``, kind ``"content"`` with a block list)."""
        return tuple(self._notes)

    def report(self) -> LossReport:
        """The :class:`LossReport` of this stream."""
        self._measure()
        return LossReport(
            key=self.key,
            frames=self.frames,
            text_bytes=self._bytes,
            total_bytes=self.total_bytes,
            gaps=tuple(self._gaps),
            truncated=self.truncated,
            anomalies=tuple(self._anomalies),
        )

    def render(self, marker: GapMarker = DEFAULT_GAP_MARKER) -> str:
        """The text with ``marker`` inserted wherever bytes were lost ("" when
        nothing landed)."""
        text = self.text or ""
        pieces: list[str] = []
        at = 0
        for gap in self._gaps:
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
        self._measure()
        text = self.text
        return (
            self.key,
            self.frames,
            self.first_total,
            self.total_bytes,
            self.truncated,
            self._first_index,
            text,
            self._chars,
            self._bytes,
            self._replacements,
            self._gaps,
            self._anomalies,
            self._notes,
            self._cur_lo,
            self._cur_hi,
            self._anchored,
            self._pre_lo,
            self._pre_hi,
            self._lead_lo,
            self._lead_hi,
            self._lead_open,
            self._first_hold,
            self._after_lead_hold,
            self._run_open,
        )

    # -- absorbing ------------------------------------------------------------

    def _measure(self, ascii_chars: int | None = None) -> None:
        """Count the chunks the steady path appended without counting them
        (``ascii_chars``: their length, when they are known to be ASCII)."""
        part = self._unmeasured
        if not part:
            return
        self._unmeasured = []
        if ascii_chars is not None:
            chars = size = low = ascii_chars
        elif all(map(str.isascii, part)):
            chars = size = low = sum(map(len, part))
            size = low = chars
        else:
            chars = sum(map(len, part))
            size = sum(map(len, map(str.encode, part)))
            replaced = sum(map(_count_replacements, part))
            self._replacements += replaced
            low = size - 2 * replaced
        self._chars += chars
        self._bytes += size
        # The steady path only runs with no open gap run and the leading run
        # closed, so these bytes only move the cursor (and, before any gap, the
        # count of bytes consumed before it).
        self._cur_lo += low
        self._cur_hi += size
        if not self._anchored:
            self._pre_lo += low
            self._pre_hi += size

    def _absorb_payload(
        self, payload: PartialResultPayload, index: int, dropped: int | None
    ) -> None:
        total = payload.total_bytes
        last = self.total_bytes
        # A character is at most 4 source bytes, so only a delta with more than a
        # quarter as many characters as the total can overrun it: one cheap
        # comparison on the steady path, an exact count only when it might.
        overrun = len(payload.delta) * 4 > total and _source_bytes_min(payload.delta) > total
        if (
            not self._lead_open
            and not self._run_open
            and not payload.gap
            and not dropped
            and last is not None
            and total >= last
        ):
            # The steady path: a frame that only appends. Its bytes are counted
            # lazily, in one pass, when a figure is next needed.
            self.frames += 1
            delta = payload.delta
            if delta:
                self._chunks.append(delta)
                self._unmeasured.append(delta)
            self.total_bytes = total
            if payload.truncated:
                self.truncated = True
            if overrun:
                self._anomalies.append(_overrun(self.key, index, payload.delta, total))
            return
        self._measure()
        delta = payload.delta
        self.frames += 1
        self._has_text = True
        chars = self._chars
        if delta:
            self._chunks.append(delta)
            if delta.isascii():
                size = low = len(delta)
            else:
                size = len(delta.encode())
                # One U+FFFD (3 bytes) stands for 1 to 3 source bytes.
                replaced = delta.count(_REPLACEMENT)
                self._replacements += replaced
                low = size - 2 * replaced
            self._chars = chars + len(delta)
            self._bytes += size
        else:
            size = low = 0
        last = self.total_bytes
        if last is None:
            self.first_total = total
            self._first_index = index
            self._first_hold = MAX_HELD_BYTES if payload.gap else _hold_bound(delta)
        elif total < last:
            self._anomalies.append(_regressed(self.key, index, last, total))
        if overrun:
            self._anomalies.append(_overrun(self.key, index, delta, total))
        self.total_bytes = total
        if payload.truncated:
            self.truncated = True
        if payload.gap:
            if self._lead_open:
                self._lead_open = False
                self._after_lead_hold = MAX_HELD_BYTES
            self._gaps.append(
                Gap(
                    offset=chars,
                    index=index,
                    total_bytes=total,
                    upper=total - self._cur_lo - low,
                    lower=total - self._cur_hi - size,
                )
            )
            self._cur_lo = total - MAX_HELD_BYTES
            self._cur_hi = total
            self._anchored = True
            self._run_open = True
        elif self._run_open and total == self._gaps[-1].total_bytes:
            # The paced remainder of the last gap's surviving tail.
            gap = self._gaps[-1]
            self._gaps[-1] = Gap(
                offset=gap.offset,
                index=gap.index,
                total_bytes=gap.total_bytes,
                upper=gap.upper - low,
                lower=gap.lower - size,
                held=gap.held,
            )
        else:
            if self._run_open:
                self._run_open = False
                self._refine_hold(_hold_bound(delta))
            self._cur_lo += low
            self._cur_hi += size
            if not self._anchored:
                self._pre_lo += low
                self._pre_hi += size
                if self._lead_open:
                    if total == self.first_total:
                        self._lead_lo += low
                        self._lead_hi += size
                    else:
                        self._lead_open = False
                        self._after_lead_hold = _hold_bound(delta)
        if dropped:
            self._anomalies.append(
                Anomaly(
                    "dropped_frames",
                    index,
                    f"the sender dropped {dropped} frame(s) before this one",
                    self.key,
                )
            )

    def _refine_hold(self, held: int) -> None:
        # The frame after a gap's run shows how much the producer can have held
        # back at the end of it; the last gap's lower bound and the cursor tighten.
        gap = self._gaps[-1]
        if held < gap.held:
            self._cur_lo += gap.held - held
            self._gaps[-1] = Gap(
                offset=gap.offset,
                index=gap.index,
                total_bytes=gap.total_bytes,
                upper=gap.upper,
                lower=gap.lower,
                held=held,
            )

    def _absorb_state(self, later: StreamState, records: int) -> None:
        """Absorb the fold of this stream's later records (``records`` = how many
        records this fold's owner had absorbed before them)."""
        self._measure()
        later._measure()
        anomalies = [
            shift_anomaly(anomaly, records)
            for anomaly in later._anomalies
            if anomaly.kind != "unknown_call"
        ]
        if (
            self.total_bytes is not None
            and later.first_total is not None
            and later.first_total < self.total_bytes
        ):
            insert_anomaly(
                anomalies,
                _regressed(
                    self.key, later._first_index + records, self.total_bytes, later.first_total
                ),
            )
        extends = (
            self._run_open
            and later.first_total is not None
            and later.first_total == self._gaps[-1].total_bytes
        )
        if self._run_open and later.first_total is not None:
            held = later._after_lead_hold if extends else later._first_hold
            if held is not None:
                self._refine_hold(held)
        ext_lo, ext_hi = (later._lead_lo, later._lead_hi) if extends else (0, 0)
        if extends:
            gap = self._gaps[-1]
            self._gaps[-1] = Gap(
                offset=gap.offset,
                index=gap.index,
                total_bytes=gap.total_bytes,
                upper=gap.upper - ext_lo,
                lower=gap.lower - ext_hi,
                held=gap.held,
            )
        gaps = [gap._shifted(self._chars, records) for gap in later._gaps]
        if gaps:
            first = gaps[0]
            gaps[0] = Gap(
                offset=first.offset,
                index=first.index,
                total_bytes=first.total_bytes,
                upper=first.upper - (self._cur_lo - ext_lo),
                lower=first.lower - (self._cur_hi - ext_hi),
                held=first.held,
            )
        if later._anchored:
            self._cur_lo, self._cur_hi = later._cur_lo, later._cur_hi
        else:
            self._cur_lo += later._pre_lo - ext_lo
            self._cur_hi += later._pre_hi - ext_hi
        if not self._anchored:
            self._pre_lo += later._pre_lo
            self._pre_hi += later._pre_hi
        if self.first_total is None:
            self.first_total = later.first_total
            self._first_index = (
                later._first_index + records if later.first_total is not None else -1
            )
            self._first_hold = later._first_hold
            self._lead_lo, self._lead_hi = later._lead_lo, later._lead_hi
            self._lead_open = later._lead_open
            self._after_lead_hold = later._after_lead_hold
        elif self._lead_open and later.first_total is not None:
            if later.first_total == self.first_total:
                self._lead_lo += later._lead_lo
                self._lead_hi += later._lead_hi
                self._lead_open = later._lead_open
                self._after_lead_hold = later._after_lead_hold
            else:
                self._lead_open = False
                self._after_lead_hold = later._first_hold
        if later._gaps:
            self._run_open = later._run_open
        elif later.first_total is not None:
            self._run_open = extends and later._lead_open
        self._anchored = self._anchored or later._anchored
        if later.total_bytes is not None:
            self.total_bytes = later.total_bytes
        self.truncated = self.truncated or later.truncated
        self.frames += later.frames
        self._chunks.extend(later._chunks)
        self._has_text = self._has_text or later._has_text
        self._chars += later._chars
        self._bytes += later._bytes
        self._replacements += later._replacements
        self._gaps.extend(gaps)
        self._anomalies.extend(anomalies)
        self._notes.extend(later._notes)

    def _copy(self, records: int) -> StreamState:
        fresh = StreamState(self.key)
        fresh._absorb_state(self, records)
        # An unknown-call report belongs to whoever first saw the stream.
        fresh._anomalies[:0] = [
            shift_anomaly(anomaly, records)
            for anomaly in self._anomalies
            if anomaly.kind == "unknown_call"
        ]
        return fresh


def _count_replacements(text: str) -> int:
    return text.count(_REPLACEMENT)


def _regressed(key: StreamKey, index: int, last: int, total: int) -> Anomaly:
    return Anomaly(
        "total_regressed",
        index,
        f"total_bytes went back from {last} to {total}; it never decreases",
        key,
    )


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
