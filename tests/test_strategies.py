"""Tests for ``kigi_tool_runtime.testing``'s strategies: each draws what it
promises, and the runtime itself never imports Hypothesis."""

from __future__ import annotations

import itertools
import subprocess
import sys

from hypothesis import find, given
from hypothesis import strategies as st

from kigi_tool_protocol import PartialResultPayload, StreamingSpec, json_codec
from kigi_tool_runtime._producer._tail import MIN_TAIL_CAPACITY
from kigi_tool_runtime.testing import byte_sources, caps, schedules, utf8_text_sources
from kigi_tool_runtime.testing._strategies import (
    ScheduleStep,
    output_limits,
    partial_payloads,
    streaming_specs,
    tail_sizes,
)


def test_runtime_never_imports_hypothesis() -> None:
    """Importing kigi_tool_runtime loads neither Hypothesis nor the testing package."""
    code = (
        "import sys, kigi_tool_runtime\n"
        "assert 'hypothesis' not in sys.modules\n"
        "assert 'kigi_tool_runtime.testing' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@given(source=utf8_text_sources())
def test_text_sources_are_valid_utf8(source: bytes) -> None:
    """utf8_text_sources draws bytes that decode strictly."""
    source.decode("utf-8")


@given(source=byte_sources(), data=st.data())
def test_schedules_concatenate_to_the_source(source: bytes, data: st.DataObject) -> None:
    """A schedule's writes concatenate to its source; ticks are None."""
    steps: list[ScheduleStep] = data.draw(schedules(source))
    assert b"".join(step for step in steps if step is not None) == source
    assert all(step is None or isinstance(step, bytes) for step in steps)


def test_byte_sources_reach_invalid_and_split_characters() -> None:
    """byte_sources draws invalid bytes and sources ending mid-character."""
    seen = {"invalid": False, "split end": False}

    @given(byte_sources())
    def look(source: bytes) -> None:
        try:
            source.decode("utf-8")
        except UnicodeDecodeError as exc:
            seen["invalid"] = True
            if exc.reason == "unexpected end of data":
                seen["split end"] = True

    look()
    assert seen == {"invalid": True, "split end": True}


def test_text_sources_reach_every_length_controls_and_long_runs() -> None:
    """utf8_text_sources draws characters of 1, 2, 3 and 4 bytes, control
    characters, and runs of one character longer than a small tail."""
    seen: set[str] = set()

    @given(utf8_text_sources())
    def look(source: bytes) -> None:
        text = source.decode("utf-8")
        seen.update(f"{len(char.encode())} bytes" for char in text)
        if any(char < " " or "\x7f" <= char <= "\x9f" for char in text):
            seen.add("control")
        run = max((len(list(group)) for _, group in itertools.groupby(text)), default=0)
        if run > 512:
            seen.add("long run")

    look()
    assert seen == {"1 bytes", "2 bytes", "3 bytes", "4 bytes", "control", "long run"}


def test_caps_reach_none_zero_and_one() -> None:
    """caps draws the default (None), 0 and 1 among others."""
    seen: set[int | None] = set()

    @given(caps())
    def look(cap: int | None) -> None:
        seen.add(cap)

    look()
    assert {None, 0, 1} <= seen


@given(size=tail_sizes())
def test_tail_sizes_start_at_the_minimum(size: int) -> None:
    """tail_sizes never draws a capacity below MIN_TAIL_CAPACITY."""
    assert size >= MIN_TAIL_CAPACITY


@given(spec=streaming_specs())
def test_streaming_specs_round_trip(spec: StreamingSpec) -> None:
    """streaming_specs draws specs the wire carries unchanged."""
    assert json_codec.decode(json_codec.encode(spec), StreamingSpec) == spec


@given(payload=partial_payloads())
def test_partial_payloads_round_trip(payload: PartialResultPayload) -> None:
    """partial_payloads draws payloads the wire carries unchanged."""
    assert json_codec.decode(json_codec.encode(payload), PartialResultPayload) == payload


SCHEDULE: list[ScheduleStep] = [b"ab", None, b"cde", None]


@given(limit=output_limits(SCHEDULE))
def test_output_limits_stay_near_the_source(limit: int | None) -> None:
    """Limits are None or between 0 and a few bytes past the source's end."""
    assert limit is None or 0 <= limit <= 5 + 4


def test_output_limits_reach_every_write_boundary() -> None:
    """No limit, and a limit exactly at each write boundary (0, 2, 5), are all
    drawn: those are where a write is refused whole."""
    for boundary in (None, 0, 2, 5):

        def hits(limit: int | None, wanted: int | None = boundary) -> bool:
            return limit == wanted

        assert find(output_limits(SCHEDULE), hits) == boundary
