"""``LiveText``: one call's frames as the text a host shows, every loss said
where it happened (sans-IO).

Invariants:

Rule 1. Each frame added gives one :class:`LiveDelta` whose ``text`` is what a
        host that reads only text appends: the frame's delta, preceded by a
        one-line marker when the frame opened a gap (or proved bytes lost
        before it), or says the sender dropped frames just before it
        (``dropped_count``: the bytes those held are counted at the end).
        Concatenated, the texts are the output exactly when nothing was lost.
Rule 2. A marker is a line of its own: it starts a line (a newline is put
        before it when the text so far does not end with one) and ends with a
        newline, so a host that shows the latest message, or appends them, shows
        it whole and apart from the output.
Rule 3. :meth:`LiveText.finish` gives the closing text once the call has ended:
        a marker for bytes the last total counts that no frame delivered, and
        the truncation marker when the output stopped at the tool's limit (the
        frames that follow a refusal still deliver what came before it, so the
        text stops there only at the end); ``""`` when there is nothing to say.
Rule 4. Memory is a fixed set of counters: no text is kept (the fold under it
        keeps figures and losses only).

No I/O and no event loop: frames in, text out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, WireError

from .._consumer._loss import DEFAULT_GAP_MARKER, TRUNCATION_MARKER, Gap, LossReport
from .._consumer._reassembler import Appended, Reassembler
from .._text import plural

__all__ = ("LOSS_MARKER", "LiveDelta", "LiveText")

#: The line said where bytes were lost; ``{lost}`` is the count (``"12"``, or
#: ``"9-12"`` when the frames only bound it). One string with the marker
#: ``Reassembler.render`` puts where bytes were lost, so every text marks a
#: loss the same way.
LOSS_MARKER: Final = DEFAULT_GAP_MARKER

#: The line said at a frame the sender dropped frames before; ``{frames}`` is
#: their count (``"1 frame"``, ``"3 frames"``).
DROPPED_MARKER: Final = "[... {frames} dropped here ...]"

#: The line said at the end for bytes counted that no frame delivered.
UNDELIVERED_MARKER: Final = "[... {lost} never delivered ...]"


@dataclass(frozen=True, slots=True)
class LiveDelta:
    """One frame of a call, as a host maps it (see :class:`LiveText` Rule 1).

    ``frame`` is the exact kigi frame and ``seq`` its number in the call (from
    0); ``delta`` the frame's delta text alone (``""`` when it has none);
    ``marker`` the loss line(s) said at this frame, if any; ``text`` what a
    text-only host appends; ``appended`` what the fold made of the frame (gap
    bounds, truncation, anomalies); ``total_bytes`` its stream's byte count so
    far (``None`` when the frame landed in no stream)."""

    frame: ToolCallProgressFrame[Any]
    seq: int
    delta: str
    marker: str | None
    text: str
    appended: Appended
    total_bytes: int | None = None

    @property
    def gap(self) -> Gap | None:
        """The loss this frame showed, if any."""
        return self.appended.gap


def frame_json(frame: ToolCallProgressFrame[Any]) -> dict[str, Any]:
    """``frame`` as JSON values, as the kigi JSON codec writes it (the codec is
    a plain msgspec JSON encoder, so these values encode to the same bytes):
    what a host carries when its own messages hold the exact frame.

    Raises:
        WireError: the frame holds a value JSON cannot carry.
    """
    try:
        value = msgspec.to_builtins(frame)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise WireError(f"cannot encode {type(frame).__name__}: {exc}") from exc
    assert isinstance(value, dict)
    return value


class LiveText:
    """Fold one call's frames into host text (see the module's rules).

    ``call_id`` is the call's ``tool_call_id``; frames of another call are
    folded but reported (``unknown_call``) in the :meth:`report`.
    """

    __slots__ = ("_at_line_start", "_call_id", "_fold", "_frames", "_said_truncated")

    def __init__(self, call_id: str) -> None:
        self._call_id = call_id
        self._fold = Reassembler(known_calls=[call_id], keep_text=False)
        self._at_line_start = True
        self._said_truncated = False
        self._frames = 0

    @property
    def call_id(self) -> str:
        return self._call_id

    @property
    def frames(self) -> int:
        """Frames added so far."""
        return self._frames

    @property
    def reassembler(self) -> Reassembler:
        """The fold under the text (figures and losses, no text)."""
        return self._fold

    def add(self, frame: ToolCallProgressFrame[Any], seq: int) -> LiveDelta:
        """Fold ``frame``, the call's ``seq``-th, and say what a host shows for it."""
        appended = self._fold.appended(frame, seq)
        self._frames += 1
        body = frame.body
        delta = body.delta if isinstance(body, PartialResultPayload) else appended.text or ""
        parts: list[str] = []
        marker = None
        if appended.gap is not None:
            marker = self._line(LOSS_MARKER.format(lost=appended.gap.describe()))
            parts.append(marker)
        dropped = frame.dropped_count
        if dropped:
            line = self._line(DROPPED_MARKER.format(frames=plural(dropped, "frame", "frames")))
            marker = line if marker is None else marker + line
            parts.append(line)
        if delta:
            parts.append(delta)
            self._at_line_start = delta.endswith("\n")
        key = appended.key
        state = None if key is None else self._fold.streams.get(key)
        total = None if state is None else state.total_bytes
        return LiveDelta(frame, seq, delta, marker, "".join(parts), appended, total)

    def finish(self) -> str:
        """The closing text (Rule 3); call once, after the call's last frame."""
        parts = []
        for report in self._fold.reports(ended=True):
            if report.unseen_bytes:
                lost = plural(report.unseen_bytes, "byte", "bytes")
                parts.append(self._line(UNDELIVERED_MARKER.format(lost=lost)))
            if report.truncated and not self._said_truncated:
                self._said_truncated = True
                parts.append(self._line(TRUNCATION_MARKER))
        return "".join(parts)

    def report(self, *, ended: bool = True) -> LossReport | None:
        """The loss report of the call's output (its first stream), ``None``
        before any frame; ``ended``: the call has ended (the figures are final)."""
        reports = self._fold.reports(ended=ended)
        return reports[0] if reports else None

    def _line(self, text: str) -> str:
        start = "" if self._at_line_start else "\n"
        self._at_line_start = True
        return f"{start}{text}\n"
