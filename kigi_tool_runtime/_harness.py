"""Harness side of a tool call: renderer-agnostic events, and history repair
after a failed turn.

Invariants:

Rule 1. Events say what happened, never how to show it: a terminal UI, a line
        printer and a web view all render the same :data:`HarnessEvent` stream.
Rule 2. Output is only ever appended; a loss is its own event
        (:class:`GapReported`), placed exactly where the bytes went missing.
Rule 3. :func:`repair_history_after_failure` removes only messages the failed
        turn appended, and only while the trailing one is invalid history. Valid
        partial output and everything from before the turn survive.

Sans-IO: nothing here reads or writes; a harness feeds records in and renders
the events that come out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kigi_tool_protocol import JsonRpcNotification, JsonRpcResponse, ToolCallProgressFrame

from ._loss import Anomaly, Gap, LossReport
from ._reassembler import Reassembler, Record

__all__ = (
    "AnomalyReported",
    "GapReported",
    "HarnessEvent",
    "Message",
    "MessageBlock",
    "OutputAppended",
    "ProgressNoted",
    "TextBlock",
    "ToolCallMonitor",
    "ToolCompleted",
    "ToolFailed",
    "ToolResultBlock",
    "ToolStarted",
    "ToolUseBlock",
    "history_is_valid",
    "repair_history_after_failure",
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


# -- conversation history -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Text in a message."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """The assistant asks for tool ``name`` with ``input``; answered by a
    :class:`ToolResultBlock` with the same ``id`` in the next user message."""

    id: str
    name: str
    input: Any


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The answer to the :class:`ToolUseBlock` whose id is ``tool_use_id``."""

    tool_use_id: str
    content: str
    is_error: bool = False


MessageBlock = TextBlock | ToolUseBlock | ToolResultBlock
"""One block of a message's content."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation, in the shape LLM APIs share.

    ``role`` is ``"user"`` (prompts, and tool results as
    :class:`ToolResultBlock` s) or ``"assistant"`` (text, and tool requests as
    :class:`ToolUseBlock` s). ``content`` is plain text or a tuple of blocks.
    A history is a ``list[Message]``, oldest first.
    """

    role: Literal["user", "assistant"]
    content: str | tuple[MessageBlock, ...]


def _valid_trailing(message: Message) -> bool:
    """Whether a history may end with ``message``.

    A user message always may (a prompt, or completed tool results). An
    assistant message may when it says something and asks for no tool: a
    trailing tool request has no answer, and empty content is no answer.
    """
    if message.role == "user":
        return True
    if message.role != "assistant":
        return False
    content = message.content
    if isinstance(content, str):
        return bool(content)
    return bool(content) and not any(isinstance(block, ToolUseBlock) for block in content)


def history_is_valid(messages: Iterable[Message]) -> bool:
    """Whether a history ends in a valid state (an empty one does)."""
    last: Message | None = None
    for last in messages:  # noqa: B007 (only the last one matters)
        pass
    return last is None or _valid_trailing(last)


def repair_history_after_failure(messages: list[Message], turn_baseline: int) -> list[Message]:
    """Repair ``messages`` in place after a failed turn; return what was removed
    (oldest first).

    ``turn_baseline`` is ``len(messages)`` when the turn started. Only messages
    at or after it (the turn's own) may be removed, and only while the trailing
    message is invalid history: an assistant message with an unanswered
    :class:`ToolUseBlock` or with empty content. So valid partial output (text
    the assistant managed to say, completed tool results) and everything from
    before the turn, including the prompt that started it, survive. A baseline
    past the end (the history was replaced by a shorter one) removes nothing.

    Raises:
        ValueError: ``turn_baseline`` is negative.
    """
    if turn_baseline < 0:
        raise ValueError(f"turn_baseline must not be negative, got {turn_baseline}")
    removed: list[Message] = []
    while len(messages) > turn_baseline and not _valid_trailing(messages[-1]):
        removed.append(messages.pop())
    removed.reverse()
    return removed
