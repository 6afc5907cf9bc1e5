"""``StreamState``: the reader's view of one ``(tool_call_id, subkind)`` stream.

The figures and the steps that fold a stream live in :class:`StreamFold`
(``_stream_fold.py``, whose docstring holds the fold's rules); a
``StreamState`` owns one and gives only the public reading.

Rule 1. A ``StreamState`` holds nothing but its fold: every figure it gives is
        read from the fold when asked, so a state the reassembler handed out
        stays live as more frames land.
Rule 2. The reassembler reaches the fold through the package-private functions
        at the end of this module, never through the state's fields: they are
        the only code here that reads a state other than ``self``, and
        only its fold.
"""

from __future__ import annotations

from typing import Any

from kigi_tool_protocol import PartialResultPayload

from ._loss import (
    DEFAULT_GAP_MARKER,
    MAX_HELD_BYTES,
    Anomaly,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
)
from ._stream_fold import StreamFold

__all__ = ("StreamState",)


class StreamState:
    """What one ``(tool_call_id, subkind)`` stream has said so far. A value:
    equal when everything it knows is equal.

    Public reading: :attr:`text` (``None`` until a delta landed), :attr:`frames`,
    :attr:`total_bytes` (the last one), :attr:`truncated`, :attr:`gaps`,
    :attr:`anomalies`, :attr:`notes` (non-delta progress bodies, verbatim),
    :meth:`report` and :meth:`render`. Without ``keep_text`` the figures are
    all there but :attr:`text` and :meth:`render` raise.
    """

    __slots__ = ("_fold",)

    def __init__(
        self,
        key: StreamKey,
        *,
        keep_text: bool = True,
        from_start: bool = True,
        max_text_bytes: int | None = None,
    ) -> None:
        self._fold = StreamFold(
            key, keep_text=keep_text, from_start=from_start, max_text_bytes=max_text_bytes
        )

    # -- reading -----------------------------------------------------------

    @property
    def key(self) -> StreamKey:
        """The stream's ``(tool_call_id, subkind)``."""
        return self._fold.key

    @property
    def frames(self) -> int:
        """How many partial-result frames landed."""
        return self._fold.frames

    @property
    def first_total(self) -> int | None:
        """The ``total_bytes`` of the first frame (``None``: none yet)."""
        return self._fold.first_total

    @property
    def total_bytes(self) -> int | None:
        """The last frame's ``total_bytes`` (``None``: none yet)."""
        return self._fold.total_bytes

    @property
    def truncated(self) -> bool:
        """Whether a frame said the producer cut the stream at its limit."""
        return self._fold.truncated

    @property
    def keeps_text(self) -> bool:
        """Whether this stream keeps its text (``Reassembler(keep_text=...)``)."""
        return self._fold.keep_text

    @property
    def text(self) -> str | None:
        """The reassembled text, or ``None`` when no delta has landed.

        Raises:
            ValueError: the stream keeps no text (see :attr:`keeps_text`).
        """
        return self._fold.read_text()

    @property
    def text_bytes(self) -> int:
        """The UTF-8 length of the text (0 while nothing landed)."""
        return self._fold.text_bytes

    @property
    def gaps(self) -> tuple[Gap, ...]:
        """Every gap, in stream order: the producer's gap frames, and the losses
        inferred from ``total_bytes`` (``Gap.inferred``)."""
        return tuple(self._fold.all_gaps())

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        """Every anomaly attributed to this stream, in record order (the first
        :data:`MAX_ANOMALIES_KEPT`; :meth:`report` counts the others)."""
        return self._fold.kept_anomalies()

    @property
    def notes(self) -> tuple[Any, ...]:
        """Bodies of frames that are progress but not a delta stream (kind
        ``"text"`` with ``{"text": ...}``, kind ``"content"`` with a block list)."""
        return tuple(self._fold.notes)

    @property
    def unseen_bytes(self) -> int:
        """Bytes the last ``total_bytes`` counts beyond what the frames delivered
        and the producer may still hold back: still in flight on a live stream,
        lost on one that has ended (0 when there are none)."""
        return self._fold.unseen(MAX_HELD_BYTES)

    def report(self, *, ended: bool = False) -> LossReport:
        """The :class:`LossReport` of this stream. ``ended``: the stream has
        ended (its call returned, its log is whole), so the producer holds
        nothing back: every byte its total counts was delivered or lost, which
        makes the lost count exact when no delta holds a U+FFFD."""
        return self._fold.report(ended=ended)

    def render(self, marker: GapMarker = DEFAULT_GAP_MARKER) -> str:
        """The text with ``marker`` inserted wherever bytes were lost ("" when
        nothing landed).

        Raises:
            ValueError: the stream keeps no text (see :attr:`keeps_text`).
        """
        return self._fold.render(marker)

    def __repr__(self) -> str:
        return f"StreamState({self._fold.report().summary()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamState):
            return NotImplemented
        return self._fold == fold_of(other)

    __hash__ = None  # type: ignore[assignment]  # mutable value: not hashable


# What the reassembler reads and adds: the fold's steps, package-private
# (``_reassembler`` imports them; none is part of StreamState's API).


def fold_of(state: StreamState) -> StreamFold:
    """The fold ``state`` owns (Rule 2: the one door to it)."""
    return state._fold


def _state_of(fold: StreamFold) -> StreamState:
    """A new state owning ``fold``."""
    state = StreamState.__new__(StreamState)
    state._fold = fold
    return state


def first_index_of(state: StreamState) -> int:
    """The record index of ``state``'s first delta (-1: none yet)."""
    return fold_of(state).first_index


def recorded_anomalies(state: StreamState) -> list[Anomaly]:
    """The anomalies recorded so far, as held (not yet cut to
    :data:`MAX_ANOMALIES_KEPT`); the caller must not change the list."""
    return fold_of(state).anomalies


def add_anomaly(state: StreamState, anomaly: Anomaly) -> None:
    """Report ``anomaly`` against ``state``'s stream."""
    fold_of(state).anomalies.append(anomaly)


def count_frame(state: StreamState) -> None:
    """Count a frame of ``state``'s stream that carries no delta."""
    fold_of(state).frames += 1


def add_note(state: StreamState, body: Any) -> None:
    """Keep ``body``, a progress body that is not a delta, as a note."""
    fold_of(state).notes.append(body)


def added_at(state: StreamState, index: int) -> tuple[list[Anomaly], Gap | None]:
    """What record ``index``, the last absorbed, added to ``state``
    (:meth:`StreamFold.added_at`)."""
    return fold_of(state).added_at(index)


def gap_opened_at(state: StreamState, index: int) -> Gap | None:
    """The gap the gap frame of record ``index`` opened in ``state``
    (:meth:`StreamFold.gap_opened_at`)."""
    return fold_of(state).gap_opened_at(index)


def absorb_payload(
    state: StreamState, payload: PartialResultPayload, index: int, dropped: int | None
) -> None:
    """Absorb into ``state`` the delta of record ``index`` (``dropped``: its
    frame's ``dropped_count``): the reassembler's step."""
    # The hot path: the fold read in place, one call less per frame.
    state._fold.absorb_payload(payload, index, dropped)


def absorb_loss(state: StreamState, total: int, index: int) -> None:
    """Absorb into ``state`` a loss its reader's transport learned of at record
    ``index``, ending at the stream's total ``total`` (``_stream_fold`` Rule 5)."""
    fold_of(state).absorb_loss(total, index)


def absorb_state(state: StreamState, later: StreamState, records: int) -> None:
    """Absorb into ``state`` the fold of its stream's later records
    (``records`` = how many records ``state``'s owner had absorbed before them)."""
    fold_of(state).absorb(fold_of(later), records)


def shifted_copy(state: StreamState, records: int, from_start: bool) -> StreamState:
    """A copy of ``state`` whose record indexes are ``records`` later, for
    a fold that began at the start or not (``from_start``)."""
    return _state_of(fold_of(state).shifted_copy(records, from_start))
