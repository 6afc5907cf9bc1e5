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
Rule 2. Records are keyed by ``(tool_call_id, kind)``; each key's
        :class:`StreamState` (its fold in ``_stream_fold.py``) holds its text, gaps and anomalies.
Rule 3. Nothing is dropped silently. A record that cannot be decoded is counted
        and reported (``undecodable``) and the fold goes on; every protocol
        anomaly lands in an :class:`Anomaly` with the record it was seen at.
        Valid JSON-RPC messages that are not progress notifications are counted
        in :attr:`Reassembler.ignored`.
        A loss the reader's transport learned of is recorded
        (:meth:`Reassembler.record_loss`), with the stream's total as of the
        loss when known: a gap that counts no frame, never a made-up frame.
Rule 4. Each check compares a record with the one before it: ``seq`` with the
        previous ``seq`` of the same counter, ``total_bytes`` with the previous
        total of the same stream. A repeated or reordered frame is reported and
        still absorbed: the reassembler reports transport faults; it does not
        guess which copy is right.
Rule 5. Which records share a ``seq`` counter is the ``seq_scope``. ``"call"``
        (the default; this project's server numbers each call 0, 1, 2, ...):
        one counter per ``tool_call_id``, across that call's subkinds, so calls
        may interleave freely; a record whose call cannot be read (a
        notification of another method, progress params that are not a frame)
        has no counter, and its ``seq`` is not checked. ``"connection"`` (a hub
        numbering every notification it sends): one counter for the whole
        connection, fed by every notification that carries a ``seq``.
Rule 6. Decoding is strict and layered: the common line (a progress
        notification with a partial-result body) is decoded in one typed pass;
        any other line is decoded envelope, then frame, then body, so the
        report names the layer that is wrong, and a bad body still counts
        against its stream.
Rule 7. Memory is bounded by what the caller asks for: without ``keep_text``
        a stream keeps counters and losses only; at most ``max_streams``
        streams (and ``seq`` counters) are tracked, the one seen first evicted
        and reported; at most :data:`MAX_ANOMALIES_KEPT` anomalies are kept per
        list (the rest counted), each detail an excerpt. The fold contract
        holds while nothing was evicted or cut.
Rule 8. A fold that begins at the start of the records (``from_start``) knows
        each counter starts at 0 and each stream at byte 0: a first ``seq``
        above 0 and a first run short of its total are a missing prefix.

Sans-IO: records come in as bytes, strings or decoded frames; nothing here
reads a file or a socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, get_args

import msgspec

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcNotification,
    JsonRpcResponse,
    PartialResultPayload,
    ToolCallProgressFrame,
    json_codec,
)
from kigi_tool_protocol._codec import convert
from kigi_tool_protocol._errors import FrameTooLargeError
from kigi_tool_protocol._jsonrpc import JsonRpcMessage
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS
from kigi_tool_protocol._progress_line import decode_progress_frame, decode_progress_line

from .._text import excerpt, plural
from .._wire._split import OversizedLine
from ._loss import (
    DEFAULT_GAP_MARKER,
    MAX_ANOMALIES_KEPT,
    Anomaly,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
    render_gap_marker,
)
from ._stream_fold import anomaly_rank, insert_anomaly, keep_first, shift_anomaly
from ._stream_state import (
    StreamState,
    absorb_loss,
    absorb_payload,
    absorb_state,
    add_anomaly,
    add_note,
    added_at,
    count_frame,
    first_index_of,
    gap_opened_at,
    recorded_anomalies,
    shifted_copy,
)

__all__ = ("Appended", "Reassembler")

#: The most streams a reassembler tracks at once. A stream costs about a
#: kilobyte without its text, so this bounds a connection that names a new
#: ``tool_call_id`` in every frame to about 10 MB; a harness with more calls
#: in flight at once raises it. Past it, the stream seen first is no longer
#: tracked: its summary is reported (``streams_evicted``), its figures
#: dropped; a later frame of it starts a stream afresh.
DEFAULT_MAX_STREAMS: Final = 10_000

#: The longest record (one JSON line) the reassembler parses. The wire's frame
#: ceiling: a peer may declare any limit up to it, so a consumer that must read
#: every legal frame cannot demand less. A longer record is reported as
#: ``undecodable`` without being parsed, so it cannot make the decoder allocate.
DEFAULT_MAX_RECORD_BYTES: Final = MAX_FRAME_BYTES_CEILING

Record = bytes | bytearray | memoryview | str | OversizedLine
"""One record of a JSON-lines frame log: a line (without its newline), or the
marker for a line too long to read."""

SeqScope = Literal["call", "connection"]
"""Which records share one envelope ``seq`` counter: ``"call"``, one counter per
``tool_call_id`` (this project's server), or ``"connection"``, one for every
notification on the connection (a hub's numbering)."""

_SEQ_SCOPES: Final = get_args(SeqScope)


# -- strict line decoding ---------------------------------------------------

# The common case (a progress notification whose body is a partial result) comes
# from decode_progress_line typed in one strict pass. Anything else takes the
# careful path, which says what is wrong: decode_progress_frame with the body
# kept raw, then the body. A decoded notification's params are converted.
_ANY_FRAME: Final = ToolCallProgressFrame[Any]


def _where(error: DecodeError, prefix: str) -> str:
    path = prefix + error.path[1:]
    return f"{error.reason} at `{path}`"


def _not_a_frame(error: DecodeError, index: int) -> Anomaly:
    """The anomaly for a ``tool_call_progress`` notification whose params do not
    decode as a progress frame."""
    return Anomaly(
        "undecodable", index, f"progress params are not a frame: {_where(error, '$.params')}"
    )


# -- what one record added -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """What one record added, for printers that cannot take back a printed line.

    ``key`` is the stream it belonged to (``None`` for an undecodable or ignored
    record); ``text`` the delta it appended (``None`` if it carried none);
    ``gap`` the gap it opened, with the bounds that frame proves (at most its
    upper bound, at least 1 byte: later frames of its run deliver more of the
    surviving tail, and the fold's figure is exact once the run has ended),
    or the loss it proved (an inferred
    gap: the run before this frame delivered less than its total; the render
    places it where that run began, a printer here, before this frame's
    text); ``truncated`` whether the
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


#: What one absorbed record added to the stream it landed in: the stream's key,
#: the delta text it appended (``None`` if it carried none) and the non-delta
#: progress body it kept as a note (``None`` if none). A plain tuple: the
#: absorbing hot path builds one per record.
Added = tuple[StreamKey, str | None, Any]


# -- the connection ------------------------------------------------------------


class Reassembler:
    """Fold the records of one connection (or one frame log) into streams.

    ``known_calls``: when given, a frame for any other call is still absorbed
    but reported (``unknown_call``). ``max_record_bytes``: records longer than
    this are reported ``undecodable`` without being parsed. ``seq_scope``: which
    records share one ``seq`` counter (see :data:`SeqScope`); ``"call"`` by
    default, as this project's server numbers them. ``keep_text``: whether
    streams keep their text; without it a stream is a fixed set of counters
    plus its losses (read what each record adds with :meth:`appended`).
    ``from_start``: whether the records begin at the start of the connection
    (or log), so a first ``seq`` above 0 and a first run that delivered less
    than its ``total_bytes`` are a missing prefix; false for a fold that
    resumes mid-stream. ``max_streams``: how many streams (and ``seq``
    counters) are tracked at once (:data:`DEFAULT_MAX_STREAMS`); the fold
    contract holds while none was evicted. ``max_text_bytes``: the most text
    bytes a stream keeps (``None``: no bound); past it the stream stops
    keeping its text (reading it says why) and its figures go on.

    A value: two reassemblers are equal when they have folded to the same state.

    Raises:
        ValueError: ``max_record_bytes`` or ``max_streams`` is less than 1, or
            ``seq_scope`` is neither ``"call"`` nor ``"connection"``.
    """

    __slots__ = (
        "_anomalies",
        "_anomalies_cut",
        "_from_start",
        "_keep_text",
        "_known",
        "_max_bytes",
        "_max_streams",
        "_max_text",
        "_per_call",
        "_records",
        "_seqs",
        "_streams",
        "ignored",
    )

    def __init__(
        self,
        *,
        known_calls: Iterable[str] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        seq_scope: SeqScope = "call",
        keep_text: bool = True,
        from_start: bool = True,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_text_bytes: int | None = None,
    ) -> None:
        if max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be at least 1, got {max_record_bytes}")
        if max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, got {max_streams}")
        if seq_scope not in _SEQ_SCOPES:
            raise ValueError(f"seq_scope must be 'call' or 'connection', got {seq_scope!r}")
        self._known = None if known_calls is None else frozenset(known_calls)
        self._max_bytes = max_record_bytes
        self._per_call = seq_scope == "call"
        self._keep_text = keep_text
        self._from_start = from_start
        self._max_streams = max_streams
        self._max_text = max_text_bytes
        self._anomalies_cut = 0
        self._streams: dict[StreamKey, StreamState] = {}
        self._anomalies: list[Anomaly] = []
        self._records = 0
        self.ignored = 0
        # One counter per call id ("call" scope) or one under None ("connection"):
        # [first seq, the record index it came at, last seq]. The first seq is
        # what a fold absorbed before this one checks its own last seq against.
        self._seqs: dict[str | None, list[int]] = {}

    @classmethod
    def fold(
        cls,
        records: Iterable[Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any]],
        *,
        known_calls: Iterable[str] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        seq_scope: SeqScope = "call",
        keep_text: bool = True,
        from_start: bool = True,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> Reassembler:
        """A new reassembler that has absorbed ``records`` in order.

        Raises:
            ValueError: ``max_record_bytes`` is less than 1, or ``seq_scope`` is
                neither ``"call"`` nor ``"connection"``.
            TypeError: a record is of no kind :meth:`absorb_record` takes.
        """
        folded = cls(
            known_calls=known_calls,
            max_record_bytes=max_record_bytes,
            seq_scope=seq_scope,
            keep_text=keep_text,
            from_start=from_start,
            max_streams=max_streams,
        )
        absorb = folded.absorb_record
        for record in records:
            absorb(record)
        return folded

    def spawn(self) -> Reassembler:
        """A new, empty reassembler configured like this one (to fold a suffix
        that will be absorbed into this one)."""
        return Reassembler(
            known_calls=self._known,
            max_record_bytes=self._max_bytes,
            seq_scope=self.seq_scope,
            keep_text=self._keep_text,
            from_start=self._from_start,
            max_streams=self._max_streams,
            max_text_bytes=self._max_text,
        )

    # -- reading --------------------------------------------------------------

    @property
    def seq_scope(self) -> SeqScope:
        """Which records share one ``seq`` counter (see :data:`SeqScope`)."""
        return "call" if self._per_call else "connection"

    @property
    def records(self) -> int:
        """How many records (lines, frames, notifications, and losses recorded
        with their total: :meth:`record_loss`) were absorbed."""
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
        self._anomalies_cut += keep_first(self._anomalies)
        merged = [*self._anomalies, *self._seq_prefixes()]
        for state in self._streams.values():
            merged.extend(recorded_anomalies(state))
        merged.sort(key=anomaly_rank)
        return tuple(merged)

    def _own_anomalies(self) -> tuple[Anomaly, ...]:
        """Anomalies no stream can own: undecodable records, ``seq`` faults,
        evicted streams (the first :data:`MAX_ANOMALIES_KEPT`)."""
        self._anomalies_cut += keep_first(self._anomalies)
        prefixes = self._seq_prefixes()
        if not prefixes:
            return tuple(self._anomalies)
        return tuple(sorted([*self._anomalies, *prefixes], key=anomaly_rank))

    @property
    def anomalies_not_kept(self) -> int:
        """Connection anomalies past :data:`MAX_ANOMALIES_KEPT`, counted only
        (each stream's report counts its own)."""
        self._anomalies_cut += keep_first(self._anomalies)
        return self._anomalies_cut

    def reports(self, *, ended: bool = False) -> list[LossReport]:
        """One :class:`LossReport` per stream, in first-seen order; ``ended``:
        the streams have ended (see :meth:`StreamState.report`)."""
        return [state.report(ended=ended) for state in self._streams.values()]

    def summary(self, *, ended: bool = False) -> str:
        """One line per stream, then one for the connection's own anomalies."""
        lines = [state.report(ended=ended).summary() for state in self._streams.values()]
        own = self._own_anomalies()
        if own or self.ignored:
            kinds = sorted({anomaly.kind for anomaly in own})
            listed = f" ({', '.join(kinds)})" if kinds else ""
            records = plural(self._records, "record", "records")
            cut = self.anomalies_not_kept
            anomalies = plural(len(own) + cut, "anomaly", "anomalies")
            if cut:
                anomalies += f" ({cut} not kept)"
            ignored = plural(self.ignored, "other message", "other messages")
            lines.append(f"connection: {records}, {anomalies}{listed}, {ignored} ignored")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Reassembler(records={self._records}, streams={len(self._streams)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reassembler):
            return NotImplemented
        self._anomalies_cut += keep_first(self._anomalies)
        other._anomalies_cut += keep_first(other._anomalies)
        return (
            self._records == other._records
            and self._anomalies_cut == other._anomalies_cut
            and self.ignored == other.ignored
            and self._per_call == other._per_call
            and self._seqs == other._seqs
            and self._anomalies == other._anomalies
            and self._known == other._known
            and self._max_bytes == other._max_bytes
            and self._keep_text == other._keep_text
            and self._from_start == other._from_start
            and list(self._streams.items()) == list(other._streams.items())
        )

    __hash__ = None  # type: ignore[assignment]  # mutable value: not hashable

    # -- absorbing ------------------------------------------------------------

    def absorb_record(
        self, record: Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any]
    ) -> Added | None:
        """Absorb one record of any kind: a JSON line (bytes or str), an
        ``OversizedLine`` (a line the reader skipped), a decoded notification or a
        decoded frame. Returns what it added to a stream (see :data:`Added`),
        ``None`` when it landed in none.

        Raises:
            TypeError: ``record`` is none of these (nothing is counted).
        """
        if isinstance(record, bytes | bytearray | memoryview | str):
            return self.absorb_line(record)
        if isinstance(record, OversizedLine):
            self.absorb_oversized(record)
            return None
        if isinstance(record, JsonRpcNotification):
            return self.absorb_notification(record)
        if isinstance(record, ToolCallProgressFrame):
            return self.absorb_frame(record)
        raise TypeError(
            "a record is a JSON line (bytes or str), an OversizedLine, a"
            f" JsonRpcNotification or a ToolCallProgressFrame, not {type(record).__name__}"
        )

    def absorb_line(self, line: bytes | bytearray | memoryview | str) -> Added | None:
        """Absorb one JSON-RPC line (without its newline), decoded strictly.

        A line that is not a valid ``tool_call_progress`` notification is
        reported ``undecodable``; other valid JSON-RPC messages are counted in
        :attr:`ignored`. Never raises for bad input; what is not a line at all
        (a dict, ``None``) is a ``TypeError``, raised before anything is counted.
        Returns what the line added to a stream, ``None`` when it landed in none.
        """
        index = self._records
        refused: Anomaly | None = None
        try:
            message = decode_progress_line(line, max_bytes=self._max_bytes)
        except FrameTooLargeError as error:
            refused = Anomaly("undecodable", index, str(error))
        except DecodeError as error:
            refused = Anomaly("undecodable", index, f"not a JSON-RPC message: {error}")
        # Counted only now: what is no line at all raised TypeError above.
        self._records = index + 1
        if len(self._anomalies) > MAX_ANOMALIES_KEPT:
            self._anomalies_cut += keep_first(self._anomalies)
        if refused is not None:
            self._anomalies.append(refused)
            return None
        if not isinstance(message, JsonRpcNotification) or not isinstance(
            message.params, ToolCallProgressFrame
        ):
            return self._careful_message(message, index)
        frame = message.params
        payload = frame.body
        state = self._absorb_progress(frame, payload, message.seq, index)
        return (state.key, payload.delta, None)

    def absorb_oversized(self, line: OversizedLine) -> None:
        """Report a line that was too long to read (it was skipped unparsed)."""
        index = self._records
        self._records = index + 1
        if len(self._anomalies) > MAX_ANOMALIES_KEPT:
            self._anomalies_cut += keep_first(self._anomalies)
        self._anomalies.append(
            Anomaly(
                "undecodable",
                index,
                f"line of {line.size} bytes exceeds the frame limit of {line.limit} bytes; "
                "it was skipped unread",
            )
        )

    def absorb_notification(self, notification: JsonRpcNotification[Any]) -> Added | None:
        """Absorb a decoded ``JsonRpcNotification``; one whose method is not
        ``tool_call_progress`` is counted in :attr:`ignored`. Returns what it
        added to a stream, ``None`` when it landed in none."""
        if len(self._anomalies) > MAX_ANOMALIES_KEPT:
            self._anomalies_cut += keep_first(self._anomalies)
        if notification.method != METHOD_TOOL_CALL_PROGRESS:
            index = self._records
            self._records = index + 1
            if notification.seq is not None:
                self._check_seq(notification.seq, index, None)
            self.ignored += 1
            return None
        params = notification.params
        if not isinstance(params, ToolCallProgressFrame):
            try:
                params = convert(params, _ANY_FRAME)
            except DecodeError as error:
                index = self._records
                self._records = index + 1
                if notification.seq is not None:
                    self._check_seq(notification.seq, index, None)
                self._anomalies.append(_not_a_frame(error, index))
                return None
        return self.absorb_frame(params, notification.seq)

    def absorb_frame(
        self, frame: ToolCallProgressFrame[Any], seq: int | None = None
    ) -> Added | None:
        """Absorb one decoded progress frame, with its envelope ``seq`` if known.

        The body is decoded strictly as a ``PartialResultPayload``; a body that
        is not one is kept as a note when it is ordinary text/content progress,
        and reported ``payload_invalid`` otherwise. Returns what it added to
        its stream (a frame always lands in one).
        """
        index = self._records
        self._records = index + 1
        if len(self._anomalies) > MAX_ANOMALIES_KEPT:
            self._anomalies_cut += keep_first(self._anomalies)
        body = frame.body
        if isinstance(body, PartialResultPayload):
            state = self._absorb_progress(frame, body, seq, index)
            return (state.key, body.delta, None)
        if seq is not None:
            self._check_seq(seq, index, frame.tool_call_id)
        try:
            payload: PartialResultPayload | None = convert(body, PartialResultPayload)
            reason = ""
        except DecodeError as error:
            payload = None
            reason = _where(error, "$.body")
        if payload is not None:
            return self._absorb_decoded(
                frame.tool_call_id, frame.kind, payload, frame.dropped_count, index
            )
        return self._absorb_other(frame.tool_call_id, frame.kind, body, reason, index)

    def absorb(self, later: Reassembler) -> Reassembler:
        """Absorb the fold of the records that came after this one's, and
        return ``self``: ``fold(a).absorb(fold(b)) == fold(a + b)``.

        Raises:
            ValueError: ``later`` was configured differently (known calls,
                limit, seq scope).
        """
        if later is self:
            later = self.spawn().absorb(self)
        if (
            later._known != self._known
            or later._max_bytes != self._max_bytes
            or later._per_call != self._per_call
            or later._keep_text != self._keep_text
        ):
            raise ValueError(
                "cannot absorb a fold made with different known_calls, max_record_bytes,"
                " seq_scope or keep_text"
            )
        shift = self._records
        later._anomalies_cut += keep_first(later._anomalies)
        self._anomalies_cut += keep_first(self._anomalies) + later._anomalies_cut
        anomalies = [shift_anomaly(anomaly, shift) for anomaly in later._anomalies]
        for call, (first, first_index, last) in later._seqs.items():
            track = self._seqs.get(call)
            if track is None:
                self._seqs[call] = [first, first_index + shift, last]
                continue
            # The one check that straddles the split, per counter.
            seq_fault = _seq_fault(track[2], first, first_index + shift, call)
            if seq_fault is not None:
                insert_anomaly(anomalies, seq_fault)
            track[2] = last
        self._anomalies.extend(anomalies)
        self._anomalies_cut += keep_first(self._anomalies)
        for key, state in later._streams.items():
            mine = self._streams.get(key)
            if mine is None:
                self._evict_for_one_more(shift + max(first_index_of(state), 0))
                self._streams[key] = shifted_copy(state, shift, self._from_start)
            else:
                absorb_state(mine, state, shift)
        self._records += later._records
        self.ignored += later.ignored
        return self

    def record_loss(
        self, key: StreamKey | None, detail: str, *, total_bytes: int | None = None
    ) -> Anomaly:
        """Report records that never reached their reader, as a ``dropped_frames``
        anomaly of the stream ``key`` (of the connection when ``None``) saying
        ``detail``; the stream's report is then not ``complete``. Returns the
        anomaly.

        Without ``total_bytes``, the records were absorbed here and lost after
        (a bounded queue between this reassembler and its reader dropped them):
        the figures hold them, the reader's text does not, and the anomaly is
        at the last record absorbed, where the loss was noticed.

        With ``total_bytes``, the records never reached this reassembler
        either (the transport learned of their loss: discarded, trimmed, a
        ``seq`` hole, a lost tail), and the stream's total as of the loss,
        when known, is ``total_bytes``: the loss is a gap that ends at that
        total, folded as a gap frame with no delta there but counting no frame
        (``_stream_fold.py`` Rule 5), so its bytes are counted and the fold
        contract (Rule 1) holds with it. It takes its own place in the record
        order (it counts in :attr:`records`), its anomaly there, and it may
        come before any record of the stream or of the connection (the
        stream then starts with a gap). :meth:`appended_loss` answers what it
        added, for a printer.

        Raises:
            ValueError: without ``total_bytes``, no record was absorbed yet
                (nothing could be lost); with it, ``key`` is ``None`` or
                ``total_bytes`` is negative.
        """
        if total_bytes is not None:
            if key is None:
                raise ValueError("a loss with total_bytes belongs to a stream: give its key")
            if total_bytes < 0:
                raise ValueError(f"total_bytes cannot be negative, got {total_bytes}")
            index = self._records
            self._records = index + 1
            stream = self._state(key[0], key[1], index)
            absorb_loss(stream, total_bytes, index)
            lost = Anomaly("dropped_frames", index, detail, stream.key)
            add_anomaly(stream, lost)
            return lost
        if not self._records:
            raise ValueError("no record was absorbed: nothing can have been lost")
        state = None if key is None else self._streams.get(key)
        anomaly = Anomaly("dropped_frames", self._records - 1, detail, key)
        if state is None:
            self._anomalies.append(anomaly)
        else:
            add_anomaly(state, anomaly)
        return anomaly

    def appended_loss(self, key: StreamKey, detail: str, *, total_bytes: int) -> Appended:
        """:meth:`record_loss` with ``total_bytes``, answered as :meth:`appended`
        answers a record: the gap the loss opened (what it proves: at most its
        upper bound, at least 1 byte, while later frames at that total may
        still deliver the run's tail; :meth:`settled` narrows it), no text, and
        its anomalies. A printer prints ``render()`` where the bytes went
        missing, with no frame to carry the marker.

        Raises:
            ValueError: ``total_bytes`` is negative.
        """
        self._anomalies_cut += keep_first(self._anomalies)
        before = len(self._anomalies)
        self.record_loss(key, detail, total_bytes=total_bytes)
        index = self._records - 1
        state = self._streams[StreamKey(key[0], key[1])]
        own, gap = added_at(state, index)
        anomalies = [*self._anomalies[before:], *own]
        anomalies.sort(key=anomaly_rank)
        return Appended(state.key, gap=gap, truncated=state.truncated, anomalies=tuple(anomalies))

    def settled(self, appended: Appended) -> Appended:
        """``appended`` (from :meth:`appended`) with its gap's bounds as every
        record absorbed since proves them: the later frames of the gap's run
        narrow them to the fold's figures, exact once the run has ended. A
        printer that holds a batch of records prints each batch settled."""
        gap = appended.gap
        if gap is None or gap.inferred or appended.key is None:
            return appended
        state = self._streams.get(appended.key)
        known = None if state is None else gap_opened_at(state, gap.index)
        if known is None or known == gap:
            return appended
        return replace(appended, gap=known)

    def appended(
        self,
        record: Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any],
        seq: int | None = None,
    ) -> Appended:
        """Absorb one record and answer what it added (see :class:`Appended`).

        ``seq`` applies when ``record`` is a bare frame; a line or a
        notification carries its own.
        """
        connection = self._anomalies
        if len(connection) > MAX_ANOMALIES_KEPT:
            self._anomalies_cut += keep_first(connection)
        before = len(connection)
        counters = len(self._seqs)
        state: StreamState | None = None
        if isinstance(record, ToolCallProgressFrame) and isinstance(
            record.body, PartialResultPayload
        ):
            # The hot path: a decoded delta frame, absorbed without the layers
            # above it, its stream at hand for what it added.
            index = self._records
            self._records = index + 1
            state = self._absorb_progress(record, record.body, seq, index)
            added: Added | None = (state.key, record.body.delta, None)
        elif isinstance(record, ToolCallProgressFrame):
            added = self.absorb_frame(record, seq)
        else:
            added = self.absorb_record(record)
        index = self._records - 1
        anomalies = connection[before:]  # a new list: most frames add none
        if len(self._seqs) > counters and self._from_start:
            counter, (first, _, _) = next(reversed(self._seqs.items()))
            if first > 0:
                anomalies.insert(0, _seq_prefix(first, index, counter))
        if added is None:
            return Appended(None, anomalies=tuple(anomalies))
        key, text, note = added
        if state is None:
            state = self._streams[key]
        own, gap = added_at(state, index)
        if own:
            anomalies.extend(own)
        if len(anomalies) > 1:
            anomalies.sort(key=anomaly_rank)
        return Appended(key, text, gap, state.truncated, tuple(anomalies), note)

    # -- internals ------------------------------------------------------------

    def _absorb_progress(
        self,
        frame: ToolCallProgressFrame[Any],
        payload: PartialResultPayload,
        seq: int | None,
        index: int,
    ) -> StreamState:
        """Absorb ``frame``, whose body is ``payload``, as record ``index`` (the
        caller has counted it): its ``seq`` checked, then its delta folded into
        its stream, which is returned. The hot path of every decoded frame."""
        call = frame.tool_call_id
        if seq is not None:
            # Inlined: the next seq in order (anything else: _check_seq).
            track = self._seqs.get(call if self._per_call else None)
            if track is not None and seq == track[2] + 1:
                track[2] = seq
            else:
                self._check_seq(seq, index, call)
        state: StreamState | None = self._streams.get((call, frame.kind))  # type: ignore[call-overload]
        if state is None:
            state = self._state(call, frame.kind, index)
        absorb_payload(state, payload, index, frame.dropped_count)
        return state

    def _state(self, tool_call_id: str, kind: str, index: int) -> StreamState:
        # A plain tuple finds the StreamKey entry (equal hash and equality)
        # without building a named tuple per frame.
        state: StreamState | None = self._streams.get((tool_call_id, kind))  # type: ignore[call-overload]
        if state is None:
            self._evict_for_one_more(index)
            key = StreamKey(tool_call_id, kind)
            state = self._streams[key] = StreamState(
                key,
                keep_text=self._keep_text,
                from_start=self._from_start,
                max_text_bytes=self._max_text,
            )
            if self._known is not None and tool_call_id not in self._known:
                add_anomaly(
                    state,
                    Anomaly(
                        "unknown_call",
                        index,
                        f"frame for call {tool_call_id!r}, which this harness did not make",
                        key,
                    ),
                )
        return state

    def _evict_for_one_more(self, index: int) -> None:
        """Make room for one more stream: stop tracking the one seen first and
        report its summary (``streams_evicted``, at record ``index``)."""
        if len(self._streams) < self._max_streams:
            return
        key = next(iter(self._streams))
        state = self._streams.pop(key)
        self._anomalies.append(
            Anomaly(
                "streams_evicted",
                index,
                f"stopped tracking a stream to track a new one (at most {self._max_streams}):"
                f" {state.report().summary()}",
                key,
            )
        )

    def _absorb_decoded(
        self,
        tool_call_id: str,
        kind: str,
        payload: PartialResultPayload,
        dropped: int | None,
        index: int,
    ) -> Added:
        state = self._state(tool_call_id, kind, index)
        absorb_payload(state, payload, index, dropped)
        return (state.key, payload.delta, None)

    def _absorb_other(
        self, tool_call_id: str, kind: str, body: Any, reason: str, index: int
    ) -> Added:
        state = self._state(tool_call_id, kind, index)
        count_frame(state)
        if (kind == "text" and isinstance(body, dict) and isinstance(body.get("text"), str)) or (
            kind == "content" and isinstance(body, list)
        ):
            add_note(state, body)
            return (state.key, None, body)
        add_anomaly(
            state,
            Anomaly(
                "payload_invalid",
                index,
                f"body of a {kind!r} frame is not a valid PartialResultPayload: {reason}",
                state.key,
            ),
        )
        return (state.key, None, None)

    def _seq_prefixes(self) -> list[Anomaly]:
        """A counter whose first ``seq`` is above 0 lost its first frames, when
        the records begin at the start (``from_start``)."""
        if not self._from_start:
            return []
        return [
            _seq_prefix(first, index, counter)
            for counter, (first, index, _) in self._seqs.items()
            if first > 0
        ]

    def _check_seq(self, seq: int, index: int, call: str | None) -> None:
        # ``call`` is the record's tool_call_id, or None when it has none.
        if self._per_call:
            if call is None:
                return  # no call, no counter: see Rule 5
            counter: str | None = call
        else:
            counter = None
        track = self._seqs.get(counter)
        if track is None:
            if len(self._seqs) >= self._max_streams:
                # Bounded like the streams: the counter seen first goes.
                del self._seqs[next(iter(self._seqs))]
            self._seqs[counter] = [seq, index, seq]
            return
        fault = _seq_fault(track[2], seq, index, counter)
        if fault is not None:
            self._anomalies.append(fault)
        track[2] = seq

    def _careful_message(self, message: JsonRpcMessage, index: int) -> Added | None:
        # A line the fast path did not take, its params still undecoded: decode
        # layer by layer, so the report names the layer that is wrong and a frame
        # whose body alone is bad still counts against its stream.
        seq = message.seq if isinstance(message, JsonRpcNotification) else None
        if seq is not None and not self._per_call:
            # seq counts every notification on the connection, not only progress.
            self._check_seq(seq, index, None)
        if isinstance(message, JsonRpcResponse) or message.method != METHOD_TOOL_CALL_PROGRESS:
            self.ignored += 1
            return None
        try:
            frame = decode_progress_frame(message.params, msgspec.Raw, max_bytes=self._max_bytes)
        except DecodeError as error:
            self._anomalies.append(_not_a_frame(error, index))
            return None
        if seq is not None and self._per_call:
            self._check_seq(seq, index, frame.tool_call_id)
        try:
            payload = json_codec.decode(frame.body, PartialResultPayload, max_bytes=self._max_bytes)
        except DecodeError as error:
            try:
                body = json_codec.decode(frame.body, max_bytes=self._max_bytes)
            except DecodeError:
                # Not even JSON text (invalid UTF-8 in a key): not a note either.
                body = None
            return self._absorb_other(
                frame.tool_call_id, frame.kind, body, _where(error, "$.params.body"), index
            )
        return self._absorb_decoded(
            frame.tool_call_id, frame.kind, payload, frame.dropped_count, index
        )


def _seq_fault(last: int, seq: int, index: int, call: str | None) -> Anomaly | None:
    # ``call`` names the counter in "call" scope (None: the connection's).
    if seq == last + 1:
        return None
    counter = "seq" if call is None else f"seq of call {call!r}"
    if seq > last:
        missing = seq - last - 1
        return Anomaly(
            "seq_gap",
            index,
            f"{counter} jumped from {last} to {seq}: {missing} frame(s) lost in transport",
        )
    if seq == last:
        return Anomaly(
            "seq_repeated", index, f"{counter} {seq} arrived twice in a row; absorbed again"
        )
    return Anomaly("seq_reordered", index, f"{counter} went back from {last} to {seq}")


def _seq_prefix(first: int, index: int, call: str | None) -> Anomaly:
    counter = "seq" if call is None else f"seq of call {excerpt(call)}"
    lost = "frame 0" if first == 1 else f"frames 0-{first - 1}"
    return Anomaly(
        "seq_gap",
        index,
        f"{counter} starts at {first}: {lost} never arrived (a missing prefix)",
    )


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
