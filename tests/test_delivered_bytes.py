"""A report counts the *source* bytes its frames delivered, not the UTF-8 bytes
of their text: each U+FFFD (3 bytes of text) stands for 1 to 3 bytes of the
command's output, so a binary command's log never shows more bytes delivered
than its total counts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given

from kigi_tool_runtime import Reassembler
from kigi_tool_runtime.testing._consumer_strategies import (
    byte_sources,
    producer_runs,
    progress_line,
)

KIGI = (sys.executable, "-m", "kigi_tool_runtime")


@given(producer_runs())
def test_the_delivered_range_holds_the_source_bytes_delivered(run: Any) -> None:
    """Any source, any schedule, any tail: the delivered range is within the
    total, and holds the true count when the wire shows the losses (valid UTF-8,
    which may itself hold U+FFFD); a stream with no gap delivered its whole
    source, exactly, once it has ended."""
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    state = Reassembler.fold(lines).stream(run.tool_call_id, run.subkind)
    if state is None:
        return
    for ended in (False, True):
        report = state.report(ended=ended)
        assert report.delivered_bytes_min <= report.delivered_bytes <= len(run.source)
        assert report.delivered_bytes <= report.text_bytes
        if None not in run.losses:
            truth = len(run.source) - sum(loss for loss in run.losses if loss is not None)
            if ended or not report.gaps:
                assert report.delivered_bytes_min <= truth <= report.delivered_bytes
    if not report.gaps and not report.truncated:
        assert (report.delivered_bytes_min, report.delivered_bytes) == (len(run.source),) * 2
        assert report.summary().startswith(f"{run.tool_call_id}/{run.subkind}: {len(run.source)} ")


@given(producer_runs(byte_sources()))
def test_invalid_bytes_never_count_as_more_than_was_produced(run: Any) -> None:
    """Invalid bytes arrive as U+FFFD: the text may be three times the source,
    the bytes delivered never exceed it."""
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    state = Reassembler.fold(lines).stream(run.tool_call_id, run.subkind)
    if state is None:
        return
    report = state.report(ended=True)
    assert report.delivered_bytes <= report.total_bytes == len(run.source)
    assert report.lost_bytes_min <= report.undelivered_bytes <= report.lost_bytes or (
        not report.gaps and report.undelivered_bytes == 0
    )


def test_check_of_a_binary_commands_log_counts_source_bytes(tmp_path: Path) -> None:
    """A real command writing 2 MB of every byte value, through ``kigi-stream run
    --json`` into ``check``: the log passes and its report says exactly 2000000
    bytes delivered of total 2000000, although the text holds far more UTF-8
    bytes; with a small tail, the delivered bytes and the bytes lost are each
    a range, and their sum holds the total."""
    writer = (
        "import sys\n"
        "block = bytes(range(256)) * 4096\n"
        "out = sys.stdout.buffer\n"
        "written = 0\n"
        "while written < 2_000_000:\n"
        "    piece = block[: 2_000_000 - written]\n"
        "    out.write(piece); written += len(piece)\n"
    )

    def run_and_check(*options: str) -> tuple[str, int]:
        log = tmp_path / "frames.jsonl"
        with log.open("wb") as out:
            ran = subprocess.run(
                [*KIGI, "run", "--json", *options, "--", sys.executable, "-c", writer],
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=120,
                check=False,
            )
        assert ran.returncode == 0, ran.stderr
        checked = subprocess.run(
            [*KIGI, "check", str(log)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout
        (summary,) = (line for line in checked.stdout.splitlines() if "run-1/" in line)
        text_bytes = Reassembler.fold(log.read_bytes().splitlines()).reports()[0].text_bytes
        return summary, text_bytes

    whole, text_bytes = run_and_check()
    assert text_bytes > 2_000_000
    assert whole.startswith("run-1/bash_output_chunk: 2000000 bytes in "), whole
    assert "(total 2000000), no gaps" in whole
    lossy, _ = run_and_check("--drop", "--tail", "4096", "--cap", "1024")
    found = re.search(
        r": (\d+)(?:-(\d+))? bytes in \d+ frames \(total 2000000\), \d+ gaps?"
        r" \((\d+)(?:-(\d+))? bytes lost",
        lossy,
    )
    assert found, lossy
    delivered_low, delivered_high, lost_low, lost_high = (
        int(found[at] or found[at - 1]) for at in (1, 2, 3, 4)
    )
    assert delivered_high <= 2_000_000
    assert delivered_low + lost_high >= 2_000_000 >= delivered_high + lost_low
