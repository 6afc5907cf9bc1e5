"""``Reassembler``: fold ``tool_call_progress`` frames back into text, exactly,
knowing what was lost.

Invariants:

Rule 1. A fold is resumable: folding a record sequence in two parts and
        absorbing the second fold into the first equals folding it whole,
        ``Reassembler.fold(a).absorb(Reassembler.fold(b)) == Reassembler.fold(a + b)``,
        for every split. Checks that straddle the split (a ``seq`` hole, a
        ``total_bytes`` regression, a gap whose paced remainder arrives after
        the split) are found all the same. So a follower that reconnects folds
        only what is new, and never needs a second parser.
Rule 2. Absent is not empty: a stream's text is ``None`` until a decodable
        partial-result frame has landed; a frame with an empty delta (a gap
        with nothing decodable after it) makes it ``""``.
Rule 3. Nothing is dropped silently. A record that cannot be decoded is counted
        and reported (``undecodable``) and the fold goes on; every protocol
        anomaly lands in an :class:`Anomaly` with the record it was seen at.
        Valid JSON-RPC messages that are not progress notifications are counted
        in :attr:`Reassembler.ignored`.
Rule 4. Each check compares a record with the one before it: ``seq`` with the
        previous ``seq`` on the connection (it is a per-connection counter, so
        it is checked across all streams), ``total_bytes`` with the previous
        total of the same stream. A repeated or reordered frame is reported and
        still absorbed: the reassembler reports transport faults; it does not
        guess which copy is right.
Rule 5. Gap accounting assumes the producer drains after every write, as
        ``DeltaStreamer.drain`` does: the frames that share a gap frame's
        ``total_bytes`` are what survived of that gap's tail. Under that
        assumption every reported bound holds.

Sans-IO: records come in as bytes, strings or decoded frames; nothing here
reads a file or a socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from kigi_tool_protocol import (
    MAX_FRAME_BYTES_CEILING,
    METHOD_TOOL_CALL_PROGRESS,
    DecodeError,
    FrameTooLargeError,
    JsonRpcNotification,
    JsonRpcResponse,
    PartialResultPayload,
    ToolCallProgressFrame,
    convert,
    json_codec,
)

from ._lines import OversizedLine
from ._loss import (
    DEFAULT_GAP_MARKER,
    MAX_HELD_BYTES,
    Anomaly,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
    _plural,
    render_gap_marker,
)

__all__ = (
    "DEFAULT_MAX_RECORD_BYTES",
    "Appended",
    "Reassembler",
    "Record",
    "StreamState",
)

#: The longest record (one JSON line) the reassembler parses. The wire's frame
#: ceiling: a peer may declare any limit up to it, so a consumer that must read
#: every legal frame cannot demand less. A longer record is reported as
#: ``undecodable`` without being parsed, so it cannot make the decoder allocate.
DEFAULT_MAX_RECORD_BYTES: Final = MAX_FRAME_BYTES_CEILING

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
    "dropped_frames": 4,
}


Record = bytes | bytearray | memoryview | str | OversizedLine
"""One record of a JSON-lines frame log: a line (without its newline), or the
marker for a line too long to read."""


# -- strict line decoding ---------------------------------------------------

# The common case in one strict decode: a progress notification whose body is a
# partial result. Anything else takes the careful path, which says what is wrong.
_FAST_LINE: Final = JsonRpcNotification[ToolCallProgressFrame[PartialResultPayload]]
_RAW_FRAME: Final = ToolCallProgressFrame[msgspec.Raw]
_ANY_FRAME: Final = ToolCallProgressFrame[Any]


def _where(error: DecodeError, prefix: str) -> str:
    path = prefix + error.path[1:]
    return f"{error.reason} at `{path}`"


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


# -- one stream ---------------------------------------------------------------


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

    def _measure(self) -> None:
        """Count the chunks the steady path appended without counting them."""
        part = self._unmeasured
        if not part:
            return
        self._unmeasured = []
        chars = sum(map(len, part))
        if all(map(str.isascii, part)):
            size = low = chars
        else:
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
            _shift_anomaly(anomaly, records)
            for anomaly in later._anomalies
            if anomaly.kind != "unknown_call"
        ]
        if (
            self.total_bytes is not None
            and later.first_total is not None
            and later.first_total < self.total_bytes
        ):
            _insert(
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
            _shift_anomaly(anomaly, records)
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


def _shift_anomaly(anomaly: Anomaly, records: int) -> Anomaly:
    if not records:
        return anomaly
    return Anomaly(anomaly.kind, anomaly.index + records, anomaly.detail, anomaly.key)


def _insert(anomalies: list[Anomaly], anomaly: Anomaly) -> None:
    """Insert ``anomaly`` where a whole fold would have reported it."""
    rank = (anomaly.index, _ORDER[anomaly.kind])
    at = 0
    while at < len(anomalies) and (anomalies[at].index, _ORDER[anomalies[at].kind]) < rank:
        at += 1
    anomalies.insert(at, anomaly)


# -- what one record added -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """What one record added, for printers that cannot take back a printed line.

    ``key`` is the stream it belonged to (``None`` for an undecodable or ignored
    record); ``text`` the delta it appended (``None`` if it carried none);
    ``gap`` the gap it opened, its byte count as known at that frame (frames
    paced after it can only lower the upper bound); ``truncated`` whether the
    stream is now known to be truncated; ``anomalies`` what it was reported for;
    ``note`` a non-delta progress body.
    """

    key: StreamKey | None
    text: str | None = None
    gap: Gap | None = None
    truncated: bool = False
    anomalies: tuple[Anomaly, ...] = ()
    note: Any = None

    def render(self, marker: GapMarker = DEFAULT_GAP_MARKER) -> str:
        """The gap marker (if a gap opened) followed by the appended text."""
        head = render_gap_marker(marker, self.gap) if self.gap is not None else ""
        return head + (self.text or "")


# -- the connection ------------------------------------------------------------


class Reassembler:
    """Fold the records of one connection (or one frame log) into streams.

    ``known_calls``: when given, a frame for any other call is still absorbed
    but reported (``unknown_call``). ``max_record_bytes``: records longer than
    this are reported ``undecodable`` without being parsed.

    A value: two reassemblers are equal when they have folded to the same state.

    Raises:
        ValueError: ``max_record_bytes`` is less than 1.
    """

    __slots__ = (
        "_anomalies",
        "_first_seq",
        "_first_seq_index",
        "_known",
        "_last_delta",
        "_last_key",
        "_last_note",
        "_last_seq",
        "_max_bytes",
        "_records",
        "_streams",
        "ignored",
    )

    def __init__(
        self,
        *,
        known_calls: Iterable[str] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        if max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be at least 1, got {max_record_bytes}")
        self._known = None if known_calls is None else frozenset(known_calls)
        self._max_bytes = max_record_bytes
        self._streams: dict[StreamKey, StreamState] = {}
        self._anomalies: list[Anomaly] = []
        self._records = 0
        self.ignored = 0
        self._first_seq: int | None = None
        self._first_seq_index = -1
        self._last_seq: int | None = None
        self._last_key: StreamKey | None = None
        self._last_delta: str | None = None
        self._last_note: Any = None

    @classmethod
    def fold(
        cls,
        records: Iterable[Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any]],
        *,
        known_calls: Iterable[str] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> Reassembler:
        """A new reassembler that has absorbed ``records`` in order.

        Raises:
            ValueError: ``max_record_bytes`` is less than 1.
        """
        folded = cls(known_calls=known_calls, max_record_bytes=max_record_bytes)
        absorb = folded.absorb_record
        for record in records:
            absorb(record)
        return folded

    def spawn(self) -> Reassembler:
        """A new, empty reassembler configured like this one (to fold a suffix
        that will be absorbed into this one)."""
        return Reassembler(known_calls=self._known, max_record_bytes=self._max_bytes)

    # -- reading --------------------------------------------------------------

    @property
    def records(self) -> int:
        """How many records (lines, frames, notifications) were absorbed."""
        return self._records

    @property
    def streams(self) -> Mapping[StreamKey, StreamState]:
        """Every stream seen, in first-seen order (a read-only view)."""
        return _ReadOnly(self._streams)

    def stream(self, tool_call_id: str, subkind: str) -> StreamState | None:
        """The stream of ``tool_call_id``/``subkind``, or ``None`` if none was seen."""
        return self._streams.get(StreamKey(tool_call_id, subkind))

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        """Every anomaly, of the connection and of every stream, in record order."""
        merged = list(self._anomalies)
        for state in self._streams.values():
            merged.extend(state._anomalies)
        merged.sort(key=lambda anomaly: (anomaly.index, _ORDER[anomaly.kind]))
        return tuple(merged)

    @property
    def connection_anomalies(self) -> tuple[Anomaly, ...]:
        """Anomalies no stream can own: undecodable records and ``seq`` faults."""
        return tuple(self._anomalies)

    def reports(self) -> list[LossReport]:
        """One :class:`LossReport` per stream, in first-seen order."""
        return [state.report() for state in self._streams.values()]

    def summary(self) -> str:
        """One line per stream, then one for the connection's own anomalies."""
        lines = [state.report().summary() for state in self._streams.values()]
        if self._anomalies or self.ignored:
            kinds = sorted({anomaly.kind for anomaly in self._anomalies})
            listed = f" ({', '.join(kinds)})" if kinds else ""
            records = _plural(self._records, "record", "records")
            anomalies = _plural(len(self._anomalies), "anomaly", "anomalies")
            ignored = _plural(self.ignored, "other message", "other messages")
            lines.append(f"connection: {records}, {anomalies}{listed}, {ignored} ignored")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Reassembler(records={self._records}, streams={len(self._streams)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reassembler):
            return NotImplemented
        return (
            self._records == other._records
            and self.ignored == other.ignored
            and self._first_seq == other._first_seq
            and self._first_seq_index == other._first_seq_index
            and self._last_seq == other._last_seq
            and self._anomalies == other._anomalies
            and self._known == other._known
            and self._max_bytes == other._max_bytes
            and list(self._streams.items()) == list(other._streams.items())
        )

    __hash__ = None  # type: ignore[assignment]  # mutable value: not hashable

    # -- absorbing ------------------------------------------------------------

    def absorb_record(
        self, record: Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any]
    ) -> None:
        """Absorb one record of any kind: a JSON line (bytes or str), an
        :class:`~kigi_tool_runtime.OversizedLine`, a decoded notification or a
        decoded frame."""
        if isinstance(record, bytes | bytearray | memoryview | str):
            self.absorb_line(record)
        elif isinstance(record, OversizedLine):
            self.absorb_oversized(record)
        elif isinstance(record, JsonRpcNotification):
            self.absorb_notification(record)
        else:
            self.absorb_frame(record)

    def absorb_line(self, line: bytes | bytearray | memoryview | str) -> None:
        """Absorb one JSON-RPC line (without its newline), decoded strictly.

        A line that is not a valid ``tool_call_progress`` notification is
        reported ``undecodable``; other valid JSON-RPC messages are counted in
        :attr:`ignored`. Never raises for bad input.
        """
        index = self._records
        self._records = index + 1
        self._last_key = None
        self._last_delta = None
        self._last_note = None
        try:
            fast = json_codec.decode(line, _FAST_LINE, max_bytes=self._max_bytes)
        except DecodeError:
            self._careful_line(line, index)
            return
        if fast.seq is not None:
            self._check_seq(fast.seq, index)
        frame = fast.params
        self._absorb_decoded(frame.tool_call_id, frame.kind, frame.body, frame.dropped_count, index)

    def absorb_oversized(self, line: OversizedLine) -> None:
        """Report a line that was too long to read (it was skipped unparsed)."""
        index = self._records
        self._records = index + 1
        self._last_key = None
        self._last_delta = None
        self._last_note = None
        self._anomalies.append(
            Anomaly(
                "undecodable",
                index,
                f"line of {line.size} bytes exceeds the frame limit of {line.limit} bytes; "
                "it was skipped unread",
            )
        )

    def absorb_notification(self, notification: JsonRpcNotification[Any]) -> None:
        """Absorb a decoded ``JsonRpcNotification``; one whose method is not
        ``tool_call_progress`` is counted in :attr:`ignored`."""
        if notification.method != METHOD_TOOL_CALL_PROGRESS:
            index = self._records
            self._records = index + 1
            self._last_key = None
            if notification.seq is not None:
                self._check_seq(notification.seq, index)
            self.ignored += 1
            return
        params = notification.params
        if not isinstance(params, ToolCallProgressFrame):
            try:
                params = convert(params, _ANY_FRAME)
            except DecodeError as error:
                index = self._records
                self._records = index + 1
                self._last_key = None
                if notification.seq is not None:
                    self._check_seq(notification.seq, index)
                self._anomalies.append(
                    Anomaly(
                        "undecodable",
                        index,
                        f"progress params are not a frame: {_where(error, '$.params')}",
                    )
                )
                return
        self.absorb_frame(params, notification.seq)

    def absorb_frame(self, frame: ToolCallProgressFrame[Any], seq: int | None = None) -> None:
        """Absorb one decoded progress frame, with its envelope ``seq`` if known.

        The body is decoded strictly as a ``PartialResultPayload``; a body that
        is not one is kept as a note when it is ordinary text/content progress,
        and reported ``payload_invalid`` otherwise.
        """
        index = self._records
        self._records = index + 1
        self._last_key = None
        self._last_delta = None
        self._last_note = None
        if seq is not None:
            self._check_seq(seq, index)
        body = frame.body
        if isinstance(body, PartialResultPayload):
            payload: PartialResultPayload | None = body
            reason = ""
        else:
            try:
                payload = convert(body, PartialResultPayload)
                reason = ""
            except DecodeError as error:
                payload = None
                reason = _where(error, "$.body")
        if payload is not None:
            self._absorb_decoded(
                frame.tool_call_id, frame.kind, payload, frame.dropped_count, index
            )
        else:
            self._absorb_other(frame.tool_call_id, frame.kind, body, reason, index)

    def absorb(self, later: Reassembler) -> Reassembler:
        """Absorb the fold of the records that came after this one's, and
        return ``self``: ``fold(a).absorb(fold(b)) == fold(a + b)``.

        Raises:
            ValueError: ``later`` was configured differently (known calls, limit).
        """
        if later is self:
            later = self.spawn().absorb(self)
        if later._known != self._known or later._max_bytes != self._max_bytes:
            raise ValueError(
                "cannot absorb a fold made with different known_calls or max_record_bytes"
            )
        shift = self._records
        anomalies = [_shift_anomaly(anomaly, shift) for anomaly in later._anomalies]
        if self._last_seq is not None and later._first_seq is not None:
            seq_fault = _seq_fault(self._last_seq, later._first_seq, later._first_seq_index + shift)
            if seq_fault is not None:
                _insert(anomalies, seq_fault)
        if self._first_seq is None and later._first_seq is not None:
            self._first_seq = later._first_seq
            self._first_seq_index = later._first_seq_index + shift
        if later._last_seq is not None:
            self._last_seq = later._last_seq
        self._anomalies.extend(anomalies)
        for key, state in later._streams.items():
            mine = self._streams.get(key)
            if mine is None:
                self._streams[key] = state._copy(shift)
            else:
                mine._absorb_state(state, shift)
        self._records += later._records
        self.ignored += later.ignored
        return self

    def appended(
        self,
        record: Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any],
        seq: int | None = None,
    ) -> Appended:
        """Absorb one record and answer what it added (see :class:`Appended`).

        ``seq`` applies when ``record`` is a bare frame.
        """
        before = len(self._anomalies)
        if seq is not None and not isinstance(
            record, bytes | bytearray | memoryview | str | OversizedLine
        ):
            self.absorb_frame(record, seq)  # type: ignore[arg-type]
        else:
            self.absorb_record(record)
        index = self._records - 1
        anomalies = list(self._anomalies[before:])
        key = self._last_key
        if key is None:
            return Appended(None, anomalies=tuple(anomalies))
        state = self._streams[key]
        anomalies.extend(anomaly for anomaly in state._anomalies if anomaly.index == index)
        anomalies.sort(key=lambda anomaly: _ORDER[anomaly.kind])
        gap = state._gaps[-1] if state._gaps and state._gaps[-1].index == index else None
        return Appended(
            key,
            text=self._last_delta,
            gap=gap,
            truncated=state.truncated,
            anomalies=tuple(anomalies),
            note=self._last_note,
        )

    # -- internals ------------------------------------------------------------

    def _state(self, tool_call_id: str, kind: str, index: int) -> StreamState:
        # A plain tuple finds the StreamKey entry (equal hash and equality)
        # without building a named tuple per frame.
        state: StreamState | None = self._streams.get((tool_call_id, kind))  # type: ignore[call-overload]
        if state is None:
            key = StreamKey(tool_call_id, kind)
            state = self._streams[key] = StreamState(key)
            if self._known is not None and tool_call_id not in self._known:
                state._anomalies.append(
                    Anomaly(
                        "unknown_call",
                        index,
                        f"frame for call {tool_call_id!r}, which this harness did not make",
                        key,
                    )
                )
        self._last_key = state.key
        return state

    def _absorb_decoded(
        self,
        tool_call_id: str,
        kind: str,
        payload: PartialResultPayload,
        dropped: int | None,
        index: int,
    ) -> None:
        self._state(tool_call_id, kind, index)._absorb_payload(payload, index, dropped)
        self._last_delta = payload.delta

    def _absorb_other(
        self, tool_call_id: str, kind: str, body: Any, reason: str, index: int
    ) -> None:
        state = self._state(tool_call_id, kind, index)
        state.frames += 1
        if (kind == "text" and isinstance(body, dict) and isinstance(body.get("text"), str)) or (
            kind == "content" and isinstance(body, list)
        ):
            state._notes.append(body)
            self._last_note = body
            return
        state._anomalies.append(
            Anomaly(
                "payload_invalid",
                index,
                f"body of a {kind!r} frame is not a valid PartialResultPayload: {reason}",
                state.key,
            )
        )

    def _check_seq(self, seq: int, index: int) -> None:
        last = self._last_seq
        if last is None:
            if self._first_seq is None:
                self._first_seq = seq
                self._first_seq_index = index
        else:
            fault = _seq_fault(last, seq, index)
            if fault is not None:
                self._anomalies.append(fault)
        self._last_seq = seq

    def _careful_line(self, line: bytes | bytearray | memoryview | str, index: int) -> None:
        # Decode layer by layer, so the report names the layer that is wrong and
        # a frame whose body alone is bad still counts against its stream.
        try:
            message = json_codec.decode_message(line, max_bytes=self._max_bytes, params=msgspec.Raw)
        except FrameTooLargeError as error:
            self._anomalies.append(Anomaly("undecodable", index, str(error)))
            return
        except DecodeError as error:
            self._anomalies.append(
                Anomaly("undecodable", index, f"not a JSON-RPC message: {error}")
            )
            return
        if isinstance(message, JsonRpcNotification) and message.seq is not None:
            # seq counts every notification on the connection, not only progress.
            self._check_seq(message.seq, index)
        if isinstance(message, JsonRpcResponse) or message.method != METHOD_TOOL_CALL_PROGRESS:
            self.ignored += 1
            return
        try:
            frame = json_codec.decode(message.params, _RAW_FRAME)
        except DecodeError as error:
            self._anomalies.append(
                Anomaly(
                    "undecodable",
                    index,
                    f"progress params are not a frame: {_where(error, '$.params')}",
                )
            )
            return
        try:
            payload = json_codec.decode(frame.body, PartialResultPayload)
        except DecodeError as error:
            try:
                body = json_codec.decode(frame.body)
            except DecodeError:
                # Not even JSON text (invalid UTF-8 in a key): not a note either.
                body = None
            self._absorb_other(
                frame.tool_call_id, frame.kind, body, _where(error, "$.params.body"), index
            )
            return
        self._absorb_decoded(frame.tool_call_id, frame.kind, payload, frame.dropped_count, index)


def _seq_fault(last: int, seq: int, index: int) -> Anomaly | None:
    if seq == last + 1:
        return None
    if seq > last:
        missing = seq - last - 1
        return Anomaly(
            "seq_gap",
            index,
            f"seq jumped from {last} to {seq}: {missing} frame(s) lost in transport",
        )
    if seq == last:
        return Anomaly("seq_repeated", index, f"seq {seq} arrived twice in a row; absorbed again")
    return Anomaly("seq_reordered", index, f"seq went back from {last} to {seq}")


class _ReadOnly(Mapping[StreamKey, StreamState]):
    __slots__ = ("_data",)

    def __init__(self, data: dict[StreamKey, StreamState]) -> None:
        self._data = data

    def __getitem__(self, key: StreamKey) -> StreamState:
        return self._data[key]

    def __iter__(self) -> Iterator[StreamKey]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)
