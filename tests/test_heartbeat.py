"""``HeartbeatRule``: a silent call says it is alive every interval, never
sooner, saying how long it has run and been silent; a punctual driver never
leaves its host idle longer than the interval."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime._call._heartbeat import Beat, HeartbeatRule

intervals = st.floats(0.5, 100.0)
gaps = st.lists(st.floats(0.0, 60.0), max_size=30)


def _drive(rule: HeartbeatRule, outputs: list[float], end: float) -> list[tuple[float, Beat]]:
    """A punctual driver: a beat asked at every due time until ``end``, the
    outputs at their times (a beat due at the same moment goes first)."""
    beats: list[tuple[float, Beat]] = []
    for at in [*outputs, end]:
        while (due := rule.due_at()) is not None and due <= at:
            beat = rule.beat(due)
            assert beat is not None
            beats.append((due, beat))
        if at != end:
            rule.output(at)
    return beats


@given(interval=intervals, start=st.floats(0.0, 1e6), gaps=gaps, tail=st.floats(0.0, 200.0))
def test_never_idle_longer_than_the_interval(
    interval: float, start: float, gaps: list[float], tail: float
) -> None:
    """Between the start, each output and each beat, the host waits at most the
    interval; every beat says a silence of at least the interval, at most the
    time run."""
    rule = HeartbeatRule(interval, start)
    outputs, at = [], start
    for gap in gaps:
        at += gap
        outputs.append(at)
    end = at + tail
    beats = _drive(rule, outputs, end)
    moments = sorted([start, *outputs, *(t for t, _ in beats), end])
    for before, after in itertools.pairwise(moments):
        assert after - before <= interval * (1 + 1e-9) + 1e-9
    for when, beat in beats:
        assert math.isclose(beat.elapsed_s, when - start, abs_tol=1e-6)
        assert beat.silent_s >= interval * (1 - 1e-9) - 1e-9
        assert beat.silent_s <= beat.elapsed_s + 1e-9
    assert rule.beats == len(beats)


@given(interval=intervals, silence=st.floats(0.0, 500.0))
def test_a_silent_stretch_gets_one_beat_per_interval(interval: float, silence: float) -> None:
    """A call silent for ``silence`` seconds gets floor(silence / interval)
    beats, the k-th saying k intervals of silence."""
    rule = HeartbeatRule(interval, 0.0)
    beats = _drive(rule, [], silence)
    expected = math.floor(silence / interval + 1e-9)
    assert abs(len(beats) - expected) <= 1  # float rounding at the very edge
    for k, (_, beat) in enumerate(beats, start=1):
        assert math.isclose(beat.silent_s, k * interval, rel_tol=1e-6)


def test_no_beat_before_due_and_none_when_off() -> None:
    """A beat is refused before it is due; an interval of 0 never beats."""
    rule = HeartbeatRule(30.0, 100.0)
    assert rule.due_at() == 130.0
    assert rule.beat(129.9) is None
    rule.output(120.0)
    assert rule.due_at() == 150.0
    assert rule.beat(150.0) == Beat(50.0, 30.0)
    assert rule.due_at() == 180.0
    off = HeartbeatRule(0, 0.0)
    assert off.due_at() is None
    assert off.beat(1e9) is None
    with pytest.raises(ValueError, match=">= 0"):
        HeartbeatRule(-1, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        HeartbeatRule(math.nan, 0.0)


def test_a_six_minute_silent_call_is_never_idle_five_minutes() -> None:
    """The default interval: a call silent for six minutes after one line says
    it is alive twelve times, never leaving five minutes without a notification."""
    rule = HeartbeatRule(30.0, 0.0)
    beats = _drive(rule, [1.0], 361.0)
    assert len(beats) == 12
    assert beats[-1][1].text() == "running 6m 01s, no output for 6m 00s"
