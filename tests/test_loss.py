"""Loss values: gap bounds and their clamping, markers, and the one-line summary."""

from __future__ import annotations

from kigi_tool_runtime import Anomaly, Gap, LossReport
from kigi_tool_runtime._consumer._loss import (
    DEFAULT_GAP_MARKER,
    MAX_HELD_BYTES,
    StreamKey,
    render_gap_marker,
)

KEY = StreamKey("call-1", "bash_output_chunk")


def gap(upper: int, lower: int, held: int = MAX_HELD_BYTES) -> Gap:
    return Gap(offset=0, index=0, total_bytes=100, upper=upper, lower=lower, held=held)


def test_gap_bounds_are_exact_only_when_they_meet() -> None:
    """A held-back allowance makes a range; ruling it out makes the count exact."""
    assert (gap(10, 10).lost_bytes_min, gap(10, 10).lost_bytes) == (7, 10)
    assert not gap(10, 10).exact
    assert gap(10, 10).describe() == "7-10"
    assert gap(10, 10, held=0).exact
    assert gap(10, 10, held=0).describe() == "10"


def test_gap_bounds_never_go_below_one_byte() -> None:
    """A gap lost at least one byte, whatever the raw arithmetic says."""
    assert (gap(0, -5).lost_bytes_min, gap(0, -5).lost_bytes) == (1, 1)
    assert gap(2, 2).lost_bytes_min == 1
    assert gap(3, 9, held=0).lost_bytes_min == 3


def test_gap_marker_is_a_template_or_a_function() -> None:
    """Templates get ``{lost}``; functions get the gap."""
    assert render_gap_marker(DEFAULT_GAP_MARKER, gap(5, 5, 0)) == "[... 5 bytes lost ...]"
    assert render_gap_marker(lambda g: f"#{g.total_bytes}", gap(5, 5)) == "#100"


def test_report_summary_counts_and_plurals() -> None:
    """The summary pluralises, bounds and lists every kind of anomaly once."""
    report = LossReport(
        key=KEY,
        frames=1,
        text_bytes=3,
        total_bytes=20,
        gaps=(gap(10, 10), gap(4, 4, 0)),
        truncated=False,
        anomalies=(
            Anomaly("seq_gap", 1, "x"),
            Anomaly("seq_gap", 2, "y"),
            Anomaly("dropped_frames", 2, "z", KEY),
        ),
    )
    assert report.summary() == (
        "call-1/bash_output_chunk: 3 bytes in 1 frame (total 20), 2 gaps (11-14 bytes lost), "
        "3 anomalies (dropped_frames, seq_gap)"
    )
    assert (report.lost_bytes, report.lost_bytes_min, report.undelivered_bytes) == (14, 11, 17)
    assert not report.complete


def test_a_single_lost_byte_is_singular() -> None:
    """One gap of exactly one byte reads "1 byte lost", not "1 bytes"."""
    report = LossReport(KEY, 2, 2, 3, (gap(1, 1, 0),), False, ())
    assert report.summary().endswith(", 1 gap (1 byte lost)")


def test_empty_report_is_complete() -> None:
    """No frames yet: nothing lost, nothing undelivered."""
    report = LossReport(KEY, 0, 0, None, (), False, ())
    assert report.complete
    assert report.undelivered_bytes == 0
    assert (
        report.summary() == "call-1/bash_output_chunk: 0 bytes in 0 frames (no total yet), no gaps"
    )
