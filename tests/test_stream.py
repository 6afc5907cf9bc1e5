"""StreamState: one stream's text and figures, kept as a value, counted lazily."""

from __future__ import annotations

import pytest

from kigi_tool_runtime import Reassembler, StreamState
from kigi_tool_runtime.testing import progress_line

KIND = "bash_output_chunk"


def fold(*bodies: dict[str, object]) -> StreamState:
    state = Reassembler.fold([progress_line("c", KIND, body) for body in bodies]).stream("c", KIND)
    assert state is not None
    return state


def test_steady_frames_are_counted_when_a_figure_is_read() -> None:
    """Frames that only append are measured lazily, and the figures come out right."""
    state = fold(
        {"delta": "é", "total_bytes": 2},
        {"delta": "😀", "total_bytes": 6},
        {"delta": "\ufffdz", "total_bytes": 8},
    )
    assert state.text == "é😀\ufffdz"
    assert state.text_bytes == 2 + 4 + 3 + 1
    assert state.report().undelivered_bytes == 0


def test_a_gap_after_steady_frames_sits_at_the_right_offset() -> None:
    """The cursor is measured before a gap, so its offset and count are exact."""
    state = fold(
        {"delta": "ab", "total_bytes": 2},
        {"delta": "cd", "total_bytes": 4},
        {"delta": "e", "total_bytes": 10, "gap": True},
        {"delta": "f", "total_bytes": 11},
    )
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact) == (4, 5, True)


def test_text_is_joined_once_and_stays_equal() -> None:
    """Reading the text joins the chunks; equality does not depend on that."""
    first = fold({"delta": "a", "total_bytes": 1}, {"delta": "b", "total_bytes": 2})
    second = fold({"delta": "a", "total_bytes": 1}, {"delta": "b", "total_bytes": 2})
    assert first.text == "ab"
    assert first == second
    assert first.text is first.text


def test_state_is_unhashable_and_describes_itself() -> None:
    """A mutable value: not hashable; its repr is its summary."""
    state = fold({"delta": "a", "total_bytes": 1})
    with pytest.raises(TypeError):
        hash(state)
    summary = "c/bash_output_chunk: 1 byte in 1 frame (total 1), no gaps"
    assert repr(state) == f"StreamState({summary!r})"
    assert state.render() == "a"
    assert state.notes == ()


def test_reading_the_text_counts_what_it_joined() -> None:
    """Joining the text counts the chunks it joined (free for ASCII), so no
    chunk is held twice, and later figures still come out right."""
    first = [{"delta": "ab", "total_bytes": 2}, {"delta": "cd", "total_bytes": 4}]
    later = [{"delta": "z", "total_bytes": 20, "gap": True}, {"delta": "y", "total_bytes": 21}]
    reassembler = Reassembler.fold([progress_line("c", KIND, body) for body in first])
    state = reassembler.stream("c", KIND)
    assert state is not None
    assert state.text == "abcd"
    assert state.text_bytes == 4
    for body in later:
        reassembler.absorb_line(progress_line("c", KIND, body))
    (gap,) = state.gaps
    assert (gap.offset, gap.lost_bytes, gap.exact) == (4, 15, True)
    assert state == fold(*first, *later)
    assert state.text == "abcdzy"
