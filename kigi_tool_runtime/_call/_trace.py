"""``CallTrace``: what one call's OpenTelemetry span says about its output
(sans-IO: frames in, attributes and events out; nothing here imports
OpenTelemetry).

Invariants:

Rule 1. The span reports the output its host was handed: a frame the call's
        queue dropped (a stalled host) is not delivered, so its bytes are
        lost, as the host's own consumer counts them (an inferred gap).
        A host without a queue (``ServedCall``) is handed every frame.
Rule 2. The attributes are the GenAI tool-execution ones
        (``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name``,
        ``gen_ai.tool.call.id``, ``error.type`` on failure) and ours under
        ``kigi.output.``: bytes produced, bytes delivered, frames, gaps,
        bytes lost (``bytes_lost_min`` to ``bytes_lost``: equal when exact),
        frames dropped, truncated, complete. ``complete`` is false whenever
        anything was lost: a loss is never silent in a trace either.
Rule 3. One ``kigi.gap`` event per gap, with where it was (stream, frame,
        text offset, the stream's total there) and how many bytes it lost
        (a range when the frames cannot say exactly).
Rule 4. Memory is bounded: the fold keeps no text, and the frames still in
        the call's queue (already bounded by its budget) are all it holds.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from kigi_tool_protocol import ToolCallProgressFrame

from .._consumer._loss import LossReport
from .._consumer._reassembler import Reassembler
from .._tools._errors import ToolError
from .._tools._result import ToolResult

# Plumbing for the call core, not exported.
__all__: tuple[str, ...] = ()

#: An attribute value OpenTelemetry takes.
AttributeValue = str | bool | int

#: The span's name is this and the tool's name (the GenAI conventions' own).
OPERATION: Final = "execute_tool"
#: The event each gap adds to the span (Rule 3).
GAP_EVENT: Final = "kigi.gap"


class CallTrace:
    """One call's output as its span reports it (see the module's rules).

    Feed it each frame handed to the host with :meth:`delivered`, or, for a
    host behind a :class:`~kigi_tool_runtime._call._queue.CallQueue`, each
    frame offered with :meth:`offered` and the queue's figures right after
    each offer with :meth:`queue_moved`, then :meth:`flush` at the end.
    """

    __slots__ = ("_dropped_seen", "_fold", "_pending", "_seq", "frames_dropped")

    def __init__(self, call_id: str) -> None:
        self._fold = Reassembler(known_calls=[call_id], keep_text=False)
        self._pending: deque[ToolCallProgressFrame[Any]] = deque()
        self._seq = 0
        self._dropped_seen = 0
        #: Frames the call's queue dropped before the host took them.
        self.frames_dropped = 0

    def delivered(self, frame: ToolCallProgressFrame[Any]) -> None:
        """``frame`` was handed to the host (the next ``seq``)."""
        self._fold.appended(frame, self._seq)
        self._seq += 1

    def offered(self, frame: ToolCallProgressFrame[Any]) -> None:
        """``frame`` was offered to the call's queue."""
        self._pending.append(frame)

    def queue_moved(self, queued: int, dropped: int) -> None:
        """The call's queue holds ``queued`` items and has dropped ``dropped``
        in all, as seen right after an offer returned (before anything else
        could take from it). Of the frames that left it since the last look,
        the takes came first and the drop, which only an offer makes, last."""
        pending = self._pending
        leaving = max(len(pending) - queued, 0)
        drops = min(max(dropped - self._dropped_seen, 0), leaving)
        self._dropped_seen = dropped
        for _ in range(leaving - drops):
            self.delivered(pending.popleft())
        for _ in range(drops):
            pending.popleft()
        self.frames_dropped += drops

    def flush(self) -> None:
        """The call's last frame was offered: what is still queued goes to the host."""
        while self._pending:
            self.delivered(self._pending.popleft())

    def reports(self) -> list[LossReport]:
        """The loss reports of the output handed on, one per stream (the call ended)."""
        return self._fold.reports(ended=True)


def span_name(tool_id: str) -> str:
    """The span's name: ``execute_tool {tool}``."""
    return f"{OPERATION} {tool_id}"


def start_attributes(tool_id: str, call_id: str) -> dict[str, AttributeValue]:
    """The attributes a call's span starts with (Rule 2)."""
    return {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.tool.name": tool_id,
        "gen_ai.tool.call.id": call_id,
    }


def end_attributes(
    terminal: ToolResult | ToolError, reports: list[LossReport], *, frames_dropped: int = 0
) -> dict[str, AttributeValue]:
    """The attributes a call's span ends with (Rule 2)."""
    produced = sum(report.total_bytes or 0 for report in reports)
    attributes: dict[str, AttributeValue] = {
        "kigi.output.bytes_produced": produced,
        "kigi.output.bytes_delivered": sum(report.delivered_bytes for report in reports),
        "kigi.output.frames": sum(report.frames for report in reports),
        "kigi.output.frames_dropped": frames_dropped,
        "kigi.output.gaps": sum(len(report.gaps) for report in reports),
        "kigi.output.bytes_lost_min": sum(
            report.lost_bytes_min + report.unseen_bytes for report in reports
        ),
        "kigi.output.bytes_lost": sum(
            report.lost_bytes + report.unseen_bytes for report in reports
        ),
        "kigi.output.truncated": any(report.truncated for report in reports),
        "kigi.output.complete": not frames_dropped and all(r.complete for r in reports),
    }
    least = sum(report.delivered_bytes_min for report in reports)
    if least != attributes["kigi.output.bytes_delivered"]:
        attributes["kigi.output.bytes_delivered_min"] = least
    if isinstance(terminal, ToolError):
        attributes["error.type"] = terminal.kind.value
    return attributes


def gap_events(reports: list[LossReport]) -> list[dict[str, AttributeValue]]:
    """One event's attributes per gap (Rule 3), in stream order."""
    events: list[dict[str, AttributeValue]] = []
    for report in reports:
        for gap in report.gaps:
            events.append(
                {
                    "kigi.gap.stream": report.key[1],
                    "kigi.gap.frame": gap.index,
                    "kigi.gap.text_offset": gap.offset,
                    "kigi.gap.total_bytes": gap.total_bytes,
                    "kigi.gap.bytes_lost_min": gap.lost_bytes_min,
                    "kigi.gap.bytes_lost": gap.lost_bytes,
                    "kigi.gap.inferred": gap.inferred,
                }
            )
    return events
