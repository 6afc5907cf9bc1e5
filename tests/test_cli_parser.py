"""``kigi-stream``'s argument parser on its own (``_cli/_parser.py``): every
number option, given any text, either takes the value that text means or exits
2 with the message that says why, as the command line would."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kigi_tool_runtime._cli._exits import EXIT_USAGE
from kigi_tool_runtime._cli._parser import MAX_POLL_INTERVAL_S, MAX_RUN_TIMEOUT_S, build_parser

#: (command's arguments before the option, the option, arguments after, the
#: least whole number it takes, the message below it, the attribute it sets).
WHOLE_NUMBER_OPTIONS = [
    (["run"], "--cap", ["--", "true"], 0, "must not be negative", "cap"),
    (["run"], "--tail", ["--", "true"], 1, "must be at least 1", "tail"),
    (["run"], "--limit", ["--", "true"], 0, "must not be negative", "limit"),
    (["follow"], "--from-offset", ["x"], 0, "must not be negative", "from_offset"),
    (["serve"], "--max-frame-bytes", [], 1, "must be at least 1", "max_frame_bytes"),
]

#: (command's arguments before the option, the option, arguments after, the
#: most seconds it takes (None: no bound), the attribute it sets).
SECONDS_OPTIONS = [
    (["run"], "--tick", ["--", "true"], None, "tick"),
    (["run"], "--timeout", ["--", "true"], MAX_RUN_TIMEOUT_S, "timeout"),
    (["follow"], "--interval", ["x"], MAX_POLL_INTERVAL_S, "interval"),
    (["serve"], "--stop-wait", [], MAX_POLL_INTERVAL_S, "stop_wait"),
]

#: Texts around the edges of what int() and float() take.
_tricky = st.sampled_from(
    ["", " ", "0", "-0", "+1", "1_000", " 7 ", "0x10", "1e3", "1.5", "nan", "inf", "-inf", "٣"]
)
_texts = st.one_of(_tricky, st.text(max_size=8), st.integers().map(str), st.floats().map(str))


def _parse(argv: list[str]) -> tuple[object, str]:
    """The parsed namespace, or the exit status, and what went to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return build_parser().parse_args(argv), err.getvalue()
        except SystemExit as exc:
            return exc.code, err.getvalue()


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@pytest.mark.parametrize(
    ("before", "option", "after", "least", "rule", "attribute"),
    WHOLE_NUMBER_OPTIONS,
    ids=[option for _, option, *_ in WHOLE_NUMBER_OPTIONS],
)
@given(text=_texts)
@example(text="abc")
@example(text="-1")
def test_a_whole_number_option_takes_its_number_or_says_why(
    before: list[str],
    option: str,
    after: list[str],
    least: int,
    rule: str,
    attribute: str,
    text: str,
) -> None:
    """A whole-number option takes what int() reads at or above its least; any
    other text exits 2 naming the text, a number below it exits 2 with its rule."""
    parsed, err = _parse([*before, f"{option}={text}", *after])
    value = _int_or_none(text)
    if value is None:
        assert parsed == EXIT_USAGE
        assert f"expected a whole number, got {text!r}" in err
    elif value < least:
        assert parsed == EXIT_USAGE
        assert f"{rule}, got {value}" in err
    else:
        assert getattr(parsed, attribute) == value
        assert err == ""


@pytest.mark.parametrize(
    ("before", "option", "after", "most", "attribute"),
    SECONDS_OPTIONS,
    ids=[option for _, option, *_ in SECONDS_OPTIONS],
)
@given(text=_texts)
@example(text="soon")
@example(text="0")
@example(text="1e30")
def test_a_seconds_option_takes_a_positive_finite_number_or_says_why(
    before: list[str], option: str, after: list[str], most: int | None, attribute: str, text: str
) -> None:
    """A number option takes a positive, finite number no larger than its
    bound; other text exits 2 naming the text; zero, a negative number, nan or
    infinity exits 2 as not positive; one past the bound exits 2 giving it."""
    parsed, err = _parse([*before, f"{option}={text}", *after])
    value = _float_or_none(text)
    if value is None:
        assert parsed == EXIT_USAGE
        assert f"expected a number, got {text!r}" in err
    elif not value > 0 or math.isinf(value):
        assert parsed == EXIT_USAGE
        assert f"must be a positive number, got {text}" in err
    elif most is not None and value > most:
        assert parsed == EXIT_USAGE
        assert f"must be at most {most} seconds" in err
    else:
        assert getattr(parsed, attribute) == value
        assert err == ""


@given(scope=st.text(max_size=12))
@example(scope="hub")
@example(scope="stream")
def test_seq_scope_takes_only_call_or_connection(scope: str) -> None:
    """``--seq-scope`` of ``follow`` and ``check`` takes ``call`` or
    ``connection``; anything else exits 2 naming the choice."""
    for command in ("follow", "check"):
        parsed, err = _parse([command, f"--seq-scope={scope}", "x"])
        if scope in ("call", "connection"):
            assert parsed.seq_scope == scope  # type: ignore[attr-defined]
        else:
            assert parsed == EXIT_USAGE
            assert f"invalid choice: {scope!r}" in err
