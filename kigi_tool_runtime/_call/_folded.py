"""A tool call folded from a host's events, the one type behind every host's
folder (LangGraph ``ToolEventFolder``, pydantic-ai ``ToolOutputFolder``, ADK
``AdkEventFolder``, MCP ``ProgressFolder``): its text, its loss report and one
meaning of ``complete``.

Invariants:

Rule 1. A call's frames are folded by a ``Reassembler`` as the stdio client
        folds them (:func:`call_reassembler`, :func:`fold_frame`: the frame as
        the ``tool_call_progress`` notification the stdio transport would have
        carried, same ``seq``), so its text, report and ``Appended`` events are
        the stdio client's.
Rule 2. A call's report is final once the call has ended (its end or result
        arrived): from then on every byte the last total names that no frame
        delivered counts as lost.
Rule 3. ``complete`` means one thing on every host (:func:`is_complete`): the
        call ended, with a result (not a kigi error), and nothing of its
        output was lost (no gap, drop, truncation or anomaly in its reports)
        and nothing meant for it was refused or went missing.

Nothing here imports a framework or an event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kigi_tool_protocol import JsonRpcNotification
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS

from .._consumer._loss import LossReport
from .._consumer._reassembler import Appended, Reassembler
from .._consumer._stream_state import StreamState

__all__: tuple[str, ...] = ()


def is_complete(
    *, ended: bool, failed: bool, reports: Iterable[LossReport], refused: bool = False
) -> bool:
    """Rule 3."""
    return ended and not failed and not refused and all(report.complete for report in reports)


def call_reassembler(call_id: str, *, keep_text: bool, max_text_bytes: int | None) -> Reassembler:
    """The reassembler of one call's frames (Rule 1)."""
    return Reassembler(
        known_calls=[call_id],
        keep_text=keep_text,
        max_text_bytes=max_text_bytes if keep_text else None,
    )


def fold_frame(reassembler: Reassembler, frame: Any, seq: Any) -> Appended:
    """Fold one frame, as JSON values, numbered ``seq`` (Rule 1): a ``seq``
    that is not a count is taken as missing. Never raises for bad input."""
    if not (isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0):
        seq = None
    note = JsonRpcNotification(method=METHOD_TOOL_CALL_PROGRESS, seq=seq, params=frame)
    return reassembler.appended(note)


class FoldedCall:
    """What every host's folded call shares (Rules 2, 3). A host's call gives
    ``stream``, ``ended`` and ``failed``; ``refused`` (anything meant for the
    call the fold refused that is not in its stream's report) is false unless
    it says otherwise."""

    __slots__ = ()

    @property
    def stream(self) -> StreamState | None:
        """The call's output stream (``None``: no frame arrived)."""
        raise NotImplementedError

    @property
    def ended(self) -> bool:
        """Whether the call's end or result arrived (Rule 2)."""
        raise NotImplementedError

    @property
    def failed(self) -> bool:
        """Whether the call ended with a kigi error, not a result."""
        raise NotImplementedError

    @property
    def refused(self) -> bool:
        return False

    @property
    def text(self) -> str | None:
        """The call's reassembled output (``None``: no frame, or text not kept)."""
        stream = self.stream
        return None if stream is None else stream.text

    def report(self) -> LossReport | None:
        """The call's loss report, final once it ended (``None``: no frame)."""
        stream = self.stream
        return None if stream is None else stream.report(ended=self.ended)

    @property
    def complete(self) -> bool:
        """The call ended with a result and nothing of its output was lost
        (Rule 3)."""
        report = self.report()
        return is_complete(
            ended=self.ended,
            failed=self.failed,
            reports=() if report is None else (report,),
            refused=self.refused,
        )


class ReassembledCall(FoldedCall):
    """A folded call with a reassembler of its own (``reassembler``, made by
    :func:`call_reassembler`): its stream is the one it folded, and a frame
    it refused (not a kigi frame) counts against ``complete``."""

    __slots__ = ()

    reassembler: Reassembler

    @property
    def stream(self) -> StreamState | None:
        """The call's output stream (``None``: no frame arrived)."""
        streams = list(self.reassembler.streams.values())
        return streams[0] if streams else None

    @property
    def refused(self) -> bool:
        """A frame meant for the call was refused."""
        return bool(self.reassembler.anomalies)
