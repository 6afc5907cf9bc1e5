"""History repair after a failed turn: drop what the turn left unanswered.

Invariants:

Rule 1. :func:`repair_history_after_failure` removes only messages the failed
        turn appended, and only while the trailing one is invalid history. Valid
        partial output and everything from before the turn survive.

Sans-IO: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = (
    "Message",
    "MessageTextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "history_is_valid",
    "repair_history_after_failure",
)


@dataclass(frozen=True, slots=True)
class MessageTextBlock:
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


MessageBlock = MessageTextBlock | ToolUseBlock | ToolResultBlock
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
