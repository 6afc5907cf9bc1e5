"""``StatusLine`` and ``ProgressMessages``: the progress ``message`` as hosts that
overwrite it show it (the newest complete line, short, clean, never a split
character, the loss marker whenever bytes were lost since the last message),
and as hosts that append it read it (the delta)."""

from __future__ import annotations

import re
import unicodedata

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime._call._heartbeat import Beat
from kigi_tool_runtime._call._live import LiveText
from kigi_tool_runtime._call._status import (
    LINE_KEEP_CHARS,
    STATUS_MAX_CHARS,
    ProgressMessages,
    StatusLine,
    boundary,
    clean,
    cut_to,
    format_seconds,
)

# Awkward characters: controls, line ends, escapes, combining marks, emoji
# sequences, flags, bidirectional overrides, wide and 4-byte characters.
AWKWARD = (
    "a",
    " ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\x00",
    "\x1b",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u0301",
    "e\u0301",
    "\u200d",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001f44d\U0001f3fd",
    "\u2764\ufe0f",
    "\U0001f1eb\U0001f1f7",
    "\U0001f1e6",
    "\u202e",
    "\u2028",
    "é",
    "日本",
    "\U0001f600",
)

texts = st.lists(st.one_of(st.sampled_from(AWKWARD), st.text(max_size=30)), max_size=60).map(
    "".join
)

MARKER = "[... 12 bytes lost ...]"


def _bad(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cs") or char in "\u202e\u2028\u2029"


def _joins(char: str) -> bool:
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char == "\u200d"
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
    )


def _newest_line(text: str) -> str | None:
    """The reference: the last non-blank line the whole text completed."""
    lines = [clean(line).strip() for line in re.split(r"\r\n|\r|\n", text)[:-1]]
    lines = [line for line in lines if line]
    return lines[-1] if lines else None


def _check_message(message: str) -> None:
    assert len(message) <= STATUS_MAX_CHARS
    assert not any(_bad(char) for char in message), message


@given(text=texts, cuts=st.lists(st.integers(0, 2000), max_size=10))
def test_the_message_is_the_newest_complete_line_whatever_the_split(
    text: str, cuts: list[int]
) -> None:
    """Fed in any pieces, the message is the newest complete line, at most 200
    characters, with no control character; a cut one is a prefix ending ``…``."""
    status = StatusLine(0.0)
    at = 0
    for point in sorted({min(c, len(text)) for c in cuts} | {len(text)}):
        status.write(text[at:point])
        at = point
        _check_message(status.message(1.0))
    expected = _newest_line(text)
    message = status.message(1.0)
    if expected is None or any(len(line) > LINE_KEEP_CHARS for line in text.splitlines()):
        return
    if len(expected) <= STATUS_MAX_CHARS:
        assert message == expected
    else:
        assert message.endswith("…")
        kept = message[:-1]
        assert expected.startswith(kept)
        after = expected[len(kept)]  # the cut was here, or in the blanks from here
        assert after.isspace() or not _joins(after)


@given(text=st.text(min_size=1, max_size=400).map(lambda t: t * 3), limit=st.integers(1, 300))
def test_a_cut_never_splits_a_character(text: str, limit: int) -> None:
    """``boundary`` never cuts before a combining mark, a joiner, a selector or a
    skin tone, nor after a joiner, nor between a flag's two letters."""
    at = boundary(text, limit)
    assert 0 <= at <= min(limit, len(text)) or at == len(text) <= limit
    if at < len(text):
        assert not _joins(text[at])
        assert at == 0 or text[at - 1] != "\u200d"
        run = 0
        while at - run > 0 and 0x1F1E6 <= ord(text[at - run - 1]) <= 0x1F1FF:
            run += 1
        if 0x1F1E6 <= ord(text[at]) <= 0x1F1FF:
            assert run % 2 == 0  # a flag's two letters stay together
    assert len(cut_to(text, limit)) <= limit


def test_cut_examples() -> None:
    """Combining sequences, emoji sequences and flags stay whole or go whole."""
    assert cut_to("abcde\u0301f", 6) == "abcd…"
    assert cut_to("ab\U0001f468\u200d\U0001f469xyz", 5) == "ab…"
    assert cut_to("a\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", 4) == "a\U0001f1eb\U0001f1f7…"
    assert cut_to("a\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", 3) == "a…"


@given(
    steps=st.lists(
        st.one_of(
            texts.map(lambda t: ("write", t)),
            st.just(("lost", MARKER)),
            st.just(("message", "")),
        ),
        max_size=40,
    )
)
def test_the_loss_marker_whenever_loss_happened_since_the_last_message(
    steps: list[tuple[str, str]],
) -> None:
    """A message starts with the loss marker exactly when a loss was said
    since the message before it."""
    status = StatusLine(0.0)
    lost = False
    for action, value in steps:
        if action == "write":
            status.write(value)
        elif action == "lost":
            status.lost(value)
            lost = True
        else:
            message = status.message(2.0)
            _check_message(message)
            assert message.startswith(MARKER) == lost
            lost = False


def test_before_any_line_the_bytes_and_the_time() -> None:
    """With no complete line yet, the message says the bytes counted and the time run."""
    status = StatusLine(10.0)
    status.count(1024)
    status.write("no newline yet")
    assert status.message(13.25) == "1024 bytes of output, running 3.2 s"
    status.write(" done\n")
    assert status.message(14.0) == "no newline yet done"


def test_progress_bars_redraw_and_colours_go() -> None:
    """A carriage return completes a line as a redraw; colour sequences, tabs
    and controls are cleaned; blank lines keep the line before."""
    status = StatusLine(0.0)
    status.write("\x1b[1;32mCompiling\x1b[0m\tfoo v0.1\n\n   \n")
    assert status.message(0.0) == "Compiling foo v0.1"
    status.write("[##   ] 40%\r[#### ] 80%\r")
    assert status.message(0.0) == "[#### ] 80%"
    status.write("a\x00b\u202ec\x07\r\n")
    assert status.message(0.0) == "abc"


def test_a_line_longer_than_what_is_kept_is_cut_and_says_so() -> None:
    """A huge line costs at most ``LINE_KEEP_CHARS`` and is shown cut, ending ``…``."""
    status = StatusLine(0.0)
    for _ in range(100):
        status.write("x" * 1000)
    assert len(status._partial) <= LINE_KEEP_CHARS
    status.write("\n")
    message = status.message(0.0)
    assert len(message) == STATUS_MAX_CHARS
    assert message == "x" * (STATUS_MAX_CHARS - 1) + "…"


def test_several_losses_say_the_newest_and_how_many_more() -> None:
    """Two losses between messages: the newest marker, and that there was one more."""
    status = StatusLine(0.0)
    status.write("line\n")
    status.lost("[... 3 bytes lost ...]\n")
    status.lost("[... 9 bytes lost ...]\n")
    assert status.message(0.0) == "[... 9 bytes lost ...] (+1 more) line"
    assert status.message(0.0) == "line"


def test_a_heartbeat_says_time_run_and_silence_then_the_line() -> None:
    """The heartbeat status: ``running 6m 12s, no output for 45 s`` then the newest line."""
    status = StatusLine(0.0)
    assert status.heartbeat(Beat(372.0, 45.0)) == "running 6m 12s, no output for 45 s"
    status.write("Compiling foo\n")
    assert status.heartbeat(Beat(0.5, 0.5)) == "running 0.5 s, no output for 0.5 s · Compiling foo"


def test_format_seconds() -> None:
    """Durations read as a person says them."""
    assert [format_seconds(s) for s in (0, 0.5, 9.96, 45.2, 372, 7500)] == [
        "0.0 s",
        "0.5 s",
        "10.0 s",
        "45 s",
        "6m 12s",
        "2h 05m",
    ]


def _frame(delta: str, total: int, gap: bool = False) -> ToolCallProgressFrame[object]:
    payload = PartialResultPayload(delta=delta, total_bytes=total, gap=gap)
    return ToolCallProgressFrame(
        tool_call_id="c", kind="shell_output", body=msgspec.to_builtins(payload)
    )


def test_progress_messages_status_and_delta_modes() -> None:
    """Status mode: the newest line with its loss; delta mode: the live text;
    a heartbeat has a message only in status mode."""
    frames = [_frame("one\ntw", 6), _frame("o\n", 20, gap=True)]
    status, delta = ProgressMessages("status", 0.0), ProgressMessages("delta", 0.0)
    live_s, live_d = LiveText("c"), LiveText("c")
    said_s = [status.frame(live_s.add(f, i), 1.0) for i, f in enumerate(frames)]
    said_d = [delta.frame(live_d.add(f, i), 1.0) for i, f in enumerate(frames)]
    assert said_s == ["one", "[... 1-12 bytes lost ...] o"]
    assert said_d == ["one\ntw", "\n[... 1-12 bytes lost ...]\no\n"]
    assert status.heartbeat(Beat(40.0, 35.0)) == "running 40 s, no output for 35 s · o"
    assert delta.heartbeat(Beat(40.0, 35.0)) is None
    assert status.closing("[... 5 bytes never delivered ...]\n", 2.0) == (
        "[... 5 bytes never delivered ...] o"
    )
    assert delta.closing("x\n", 2.0) == "x\n"
    assert status.closing("", 2.0) == ""
    with pytest.raises(ValueError, match="'status' or 'delta'"):
        ProgressMessages("append", 0.0)  # type: ignore[arg-type]
