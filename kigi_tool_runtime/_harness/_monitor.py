"""``ToolCallMonitor``: a harness's tool calls as renderer-agnostic events.

Invariants:

Rule 1. Events say what happened, never how to show it: a terminal UI, a line
        printer and a web view all render the same :data:`HarnessEvent` stream.
Rule 2. Output is only ever appended; a loss is its own event
        (:class:`GapReported`), placed exactly where the bytes went missing.

Sans-IO: nothing here reads or writes; a harness feeds records in and renders
the events that come out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kigi_tool_protocol import JsonRpcNotification, JsonRpcResponse, ToolCallProgressFrame

from .._consumer._loss import Anomaly, Gap, LossReport
from .._consumer._reassembler import Reassembler, Record

__all__ = (
    "AnomalyReported",
    "GapReported",
    "HarnessEvent",
    "OutputAppended",
    "ProgressNoted",
    "ToolCallMonitor",
    "ToolCompleted",
    "ToolFailed",
    "ToolStarted",
)


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The harness started call ``tool_call_id`` of tool ``tool_id``."""

    tool_call_id: str
    tool_id: str


@dataclass(frozen=True, slots=True)
class OutputAppended:
    """``text`` was appended to the ``subkind`` stream of call ``tool_call_id``."""

    tool_call_id: str
    subkind: str
    text: str


@dataclass(frozen=True, slots=True)
class GapReported:
    """Bytes were lost here in the ``subkind`` stream of ``tool_call_id`` (the
    producer's tail overflowed); ``gap`` bounds how many, as known at this frame."""

    tool_call_id: str
    subkind: str
    gap: Gap


@dataclass(frozen=True, slots=True)
class ProgressNoted:
    """A progress frame that is not a delta stream (a ``text`` line, ``content``
    blocks), with its body verbatim."""

    tool_call_id: str
    subkind: str
    body: Any


@dataclass(frozen=True, slots=True)
class AnomalyReported:
    """The wire broke its contract (see :class:`~kigi_tool_runtime.Anomaly`);
    display it, never hide it."""

    anomaly: Anomaly


@dataclass(frozen=True, slots=True)
class ToolCompleted:
    """Call ``tool_call_id`` returned ``output``; ``reports`` say what, if
    anything, its streamed output lost. ``tool_id`` names the tool (``None`` for
    a call the monitor was not told about): a result restates no name, so a
    printer that has long scrolled past the start can still say what ended."""

    tool_call_id: str
    output: Any
    reports: tuple[LossReport, ...]
    tool_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolFailed:
    """Call ``tool_call_id`` failed with ``message`` (``code``: the JSON-RPC error
    code, when there was one); ``reports`` cover the output streamed before it;
    ``tool_id`` names the tool, as in :class:`ToolCompleted`."""

    tool_call_id: str
    message: str
    code: int | None
    reports: tuple[LossReport, ...]
    tool_id: str | None = None


HarnessEvent = (
    ToolStarted
    | OutputAppended
    | GapReported
    | ProgressNoted
    | AnomalyReported
    | ToolCompleted
    | ToolFailed
)
"""Everything a harness renders about tool calls."""


class ToolCallMonitor:
    """Turn one connection's tool-call traffic into :data:`HarnessEvent` s.

    Feed it the calls it starts, every progress record in order, and each
    call's outcome; it reassembles through ``reassembler`` (a fresh one by
    default) and answers with the events to render.
    """

    __slots__ = ("_reassembler", "_started")

    def __init__(self, reassembler: Reassembler | None = None) -> None:
        self._reassembler = reassembler if reassembler is not None else Reassembler()
        self._started: dict[str, str] = {}

    @property
    def reassembler(self) -> Reassembler:
        """The fold of every progress record seen."""
        return self._reassembler

    def started(self, tool_call_id: str, tool_id: str) -> ToolStarted:
        """Record that the harness started a call.

        Raises:
            ValueError: ``tool_call_id`` was already started (call ids are unique).
        """
        if tool_call_id in self._started:
            raise ValueError(f"tool call {tool_call_id!r} was already started")
        self._started[tool_call_id] = tool_id
        return ToolStarted(tool_call_id, tool_id)

    def progress(
        self,
        record: Record | ToolCallProgressFrame[Any] | JsonRpcNotification[Any],
        seq: int | None = None,
    ) -> list[HarnessEvent]:
        """Absorb one progress record (a line, a frame, a notification) and
        return what it adds, in order: a gap before the text that follows it."""
        added = self._reassembler.appended(record, seq)
        events: list[HarnessEvent] = [AnomalyReported(anomaly) for anomaly in added.anomalies]
        if added.key is None:
            return events
        call, subkind = added.key
        if added.gap is not None:
            events.append(GapReported(call, subkind, added.gap))
        if added.text:
            events.append(OutputAppended(call, subkind, added.text))
        if added.note is not None:
            events.append(ProgressNoted(call, subkind, added.note))
        return events

    def completed(self, tool_call_id: str, output: Any) -> ToolCompleted:
        """Call ``tool_call_id`` returned ``output``."""
        return ToolCompleted(
            tool_call_id, output, self._reports(tool_call_id), self._started.get(tool_call_id)
        )

    def failed(self, tool_call_id: str, message: str, code: int | None = None) -> ToolFailed:
        """Call ``tool_call_id`` failed."""
        return ToolFailed(
            tool_call_id,
            message,
            code,
            self._reports(tool_call_id),
            self._started.get(tool_call_id),
        )

    def outcome(
        self, tool_call_id: str, response: JsonRpcResponse[Any]
    ) -> ToolCompleted | ToolFailed:
        """The event for the JSON-RPC response to call ``tool_call_id``: its
        ``result`` completes it, its ``error`` fails it (message and code kept)."""
        if response.error is not None:
            return self.failed(tool_call_id, response.error.message, response.error.code)
        return self.completed(tool_call_id, response.result)

    def _reports(self, tool_call_id: str) -> tuple[LossReport, ...]:
        return tuple(
            state.report()
            for key, state in self._reassembler.streams.items()
            if key.tool_call_id == tool_call_id
        )
