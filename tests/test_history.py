"""History repair after a failed turn."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime import (
    Message,
    MessageTextBlock,
    ToolResultBlock,
    ToolUseBlock,
    history_is_valid,
    repair_history_after_failure,
)


def user(content: Any) -> Message:
    return Message("user", content)


def assistant(content: Any) -> Message:
    return Message("assistant", content)


# -- history repair ------------------------------------------------------------------


def test_repair_keeps_the_prompt_that_started_the_turn() -> None:
    """A pre-existing trailing user message is never removed by repair."""
    messages = [user("hello")]
    assert repair_history_after_failure(messages, 1) == []
    assert messages == [user("hello")]


def test_repair_keeps_partial_assistant_output_and_tool_results() -> None:
    """Text the assistant managed to say and completed tool results survive."""
    messages = [
        user("do the thing"),
        assistant(
            (MessageTextBlock("working on it"), ToolUseBlock(id="tu_1", name="bash", input={}))
        ),
        user((ToolResultBlock(tool_use_id="tu_1", content="ok"),)),
        assistant((MessageTextBlock("partial answer before the failure"),)),
    ]
    before = list(messages)
    assert repair_history_after_failure(messages, 1) == []
    assert messages == before


def test_repair_drops_a_turn_appended_unanswered_tool_use() -> None:
    """A trailing assistant tool request the turn appended is invalid: removed."""
    request = assistant((ToolUseBlock(id="tu_1", name="bash", input={}),))
    messages = [user("do the thing"), request]
    assert repair_history_after_failure(messages, 1) == [request]
    assert messages == [user("do the thing")]


def test_repair_removes_empty_assistant_content_back_to_valid_history() -> None:
    """Empty assistant messages and trailing tool requests go, oldest kept first."""
    messages = [
        user("go"),
        assistant((MessageTextBlock("fine"),)),
        assistant(""),
        assistant(()),
        assistant((MessageTextBlock("x"), ToolUseBlock(id="t", name="n", input=1))),
    ]
    removed = repair_history_after_failure(messages, 1)
    assert messages == [user("go"), assistant((MessageTextBlock("fine"),))]
    assert removed == [
        assistant(""),
        assistant(()),
        assistant((MessageTextBlock("x"), ToolUseBlock(id="t", name="n", input=1))),
    ]


def test_repair_never_reaches_before_the_baseline() -> None:
    """An invalid message from before the turn is not the turn's to remove."""
    stale = assistant((ToolUseBlock(id="old", name="bash", input={}),))
    messages = [user("a"), stale]
    assert repair_history_after_failure(messages, 2) == []
    assert messages == [user("a"), stale]
    assert repair_history_after_failure(messages, 5) == []


def test_repair_refuses_a_negative_baseline() -> None:
    """A baseline below zero is a caller error, named in the message."""
    with pytest.raises(ValueError, match="turn_baseline must not be negative, got -1"):
        repair_history_after_failure([], -1)


_blocks = st.one_of(
    st.builds(MessageTextBlock, st.text(max_size=3)),
    st.builds(ToolUseBlock, st.text(max_size=2), st.just("bash"), st.none()),
    st.builds(ToolResultBlock, st.text(max_size=2), st.text(max_size=2)),
)
_messages = st.builds(
    Message,
    st.sampled_from(["user", "assistant"]),
    st.one_of(st.text(max_size=3), st.lists(_blocks, max_size=3).map(tuple)),
)


@given(st.lists(_messages, max_size=8), st.data())
def test_repair_only_trims_the_turn_and_leaves_valid_history(
    history: list[Message], data: st.DataObject
) -> None:
    """Repair removes a suffix of the turn's messages only, stops at the first
    valid trailing message, and leaves history valid unless what is left is
    all from before the turn."""
    baseline = data.draw(st.integers(0, len(history) + 1))
    messages = list(history)
    removed = repair_history_after_failure(messages, baseline)
    assert messages + removed == history
    assert len(messages) >= min(baseline, len(history))
    assert history_is_valid(messages) or len(messages) <= baseline
    if removed:
        assert not history_is_valid([removed[-1]])


def test_history_validity_of_trailing_messages() -> None:
    """Users may end a history; assistants only with something said and no request."""
    assert history_is_valid([])
    assert history_is_valid([user("")])
    assert history_is_valid([assistant("hi")])
    assert not history_is_valid([assistant("")])
    assert not history_is_valid([assistant(())])
    assert not history_is_valid([user("q"), assistant((ToolUseBlock("t", "n", None),))])
