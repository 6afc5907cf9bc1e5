"""``MarkerHold`` and ``kigi-stream run``'s loss markers: a gap's marker waits
for the frame that proves its bounds, so a flood's markers say how many bytes
each gap lost (not "1-N"), nothing is reordered or dropped, and a command that
falls silent after a gap still has its output printed."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from processes import reap

from kigi_tool_runtime import Reassembler
from kigi_tool_runtime._consumer._loss import MAX_HELD_BYTES
from kigi_tool_runtime._consumer._marker_hold import MarkerHold
from kigi_tool_runtime._consumer._reassembler import Appended
from kigi_tool_runtime.testing._consumer_strategies import producer_runs, progress_line

KIGI = (sys.executable, "-m", "kigi_tool_runtime")
MARKER = re.compile(r"\[\.\.\. (\d+)(?:-(\d+))? bytes lost \.\.\.\]")
#: A marker as ``run`` prints it, a line of its own: the newline put before it
#: when the output so far ends mid-line, and the one after it (for output of
#: no newlines of its own, such as FLOOD's, both are the printer's).
MARKER_LINE = re.compile(r"\n?\[\.\.\. (\d+)(?:-(\d+))? bytes lost \.\.\.\]\n")


def _held_print(run: Any, give_up: list[bool]) -> tuple[list[Appended], list[Appended]]:
    """Push each frame of ``run`` through a hold (giving up after the frames
    ``give_up`` marks), release at the end; the items printed, and the live
    items as each frame landed."""
    reassembler = Reassembler(keep_text=False)
    hold = MarkerHold(reassembler)
    printed: list[Appended] = []
    live: list[Appended] = []
    for at, frame in enumerate(run.frames):
        item = reassembler.appended(progress_line(run.tool_call_id, run.subkind, frame))
        live.append(item)
        printed.extend(hold.push(item))
        if give_up[at % len(give_up)]:
            printed.extend(hold.release())
    printed.extend(hold.release(ended=True))
    assert not hold.holding
    return printed, live


@given(producer_runs(), st.lists(st.booleans(), min_size=1, max_size=5))
def test_held_markers_keep_order_and_hold_the_truth(run: Any, give_up: list[bool]) -> None:
    """Whenever the printer gives up waiting: every item comes out once, in
    order; each gap's printed bounds hold the bytes truly lost there and are
    never looser than the frame alone proved."""
    printed, live = _held_print(run, give_up)
    assert [item.text for item in printed] == [item.text for item in live]
    assert [item.gap is None for item in printed] == [item.gap is None for item in live]
    truths = [loss for loss, frame in zip(run.losses, run.frames, strict=True) if frame.gap]
    shown = [item.gap for item in printed if item.gap is not None and not item.gap.inferred]
    proved = [item.gap for item in live if item.gap is not None and not item.gap.inferred]
    assert len(shown) == len(proved) == len(truths)
    for gap, alone, truth in zip(shown, proved, truths, strict=True):
        assert alone.lost_bytes_min <= gap.lost_bytes_min <= gap.lost_bytes <= alone.lost_bytes
        if truth is not None:
            assert gap.lost_bytes_min <= truth <= gap.lost_bytes


@given(producer_runs())
def test_held_to_the_end_each_marker_is_what_check_says(run: Any) -> None:
    """Never giving up, each printed gap is the gap of the ended fold
    (``check``'s), its held bytes resolved where the stream's end proves them."""
    printed, _ = _held_print(run, [False])
    lines = [progress_line(run.tool_call_id, run.subkind, frame) for frame in run.frames]
    state = Reassembler.fold(lines).stream(run.tool_call_id, run.subkind)
    if state is None:
        return
    folded = [gap for gap in state.gaps if not gap.inferred]
    shown = [item.gap for item in printed if item.gap is not None and not item.gap.inferred]
    assert [gap.index for gap in shown] == [gap.index for gap in folded]
    for gap, whole in zip(shown, folded, strict=True):
        assert whole.lost_bytes_min <= gap.lost_bytes_min <= gap.lost_bytes == whole.lost_bytes


#: An ASCII source whose every byte says where it is (period 26), written fast
#: enough to overflow a small tail many times.
FLOOD = (
    "import sys\n"
    "source = bytes(97 + i % 26 for i in range(26 * 1000)) * 200\n"
    "out = sys.stdout.buffer\n"
    "for at in range(0, len(source), 65536):\n"
    "    out.write(source[at : at + 65536])\n"
)
FLOOD_BYTES = 26 * 1000 * 200
PY = sys.executable
PYTHON_FLOOD = (PY, "-c", FLOOD)
DASH_FLOOD = ("--", *PYTHON_FLOOD)


def test_run_marks_each_gap_of_a_flood_with_what_it_lost() -> None:
    """A real 5 MB flood through a 4 KiB tail: every marker gives the gap's
    size to within the bytes a character could hold back (never "1-N"), the
    text between markers is the source at the place the markers put it, and
    the summary gives the exact total lost beside the gap count."""
    done = subprocess.run(
        [*KIGI, "run", "--drop", "--cap", "1024", "--tail", "4096", "--tick", "20", *DASH_FLOOD],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("ascii")
    summary = done.stderr.decode()
    found = re.search(r"(\d+) bytes, \d+ frames, (\d+) gaps? \((\d+) bytes lost\)", summary)
    assert found, summary
    total, gaps, lost = map(int, found.groups())
    assert total == FLOOD_BYTES
    markers = list(MARKER_LINE.finditer(out))
    assert len(markers) == gaps > 1
    for marker in markers:  # each a line of its own
        assert marker.start() == 0 or marker[0].startswith("\n"), marker[0]
    pieces = MARKER_LINE.split(out)[::3]
    text = "".join(pieces)
    assert lost == total - len(text)
    # Walk the source: each piece is where the marker before it says.
    source = bytes(97 + i % 26 for i in range(26 * 1000)).decode() * 200
    assert source.startswith(pieces[0])
    at = len(pieces[0])
    for marker, piece in zip(markers, pieces[1:], strict=True):
        low, high = int(marker[1]), int(marker[2] or marker[1])
        assert high - low <= 2 * MAX_HELD_BYTES, marker[0]
        assert low > 1, marker[0]
        (skip,) = (n for n in range(low, high + 1) if source.startswith(piece, at + n))
        at += skip + len(piece)
    assert at == total


def test_run_prints_the_output_after_a_gap_when_the_command_falls_silent(
    tmp_path: Path,
) -> None:
    """A command that floods, prints a last line and then waits: its last line
    is printed while it waits (the held marker is given up on after a moment),
    not when it exits."""
    go = tmp_path / "go"
    command = (
        "import os, sys, time\n"
        "out = sys.stdout.buffer\n"
        "for _ in range(50):\n"
        "    out.write(b'x' * 65535 + b'\\n')\n"
        "out.flush(); time.sleep(0.5)\n"
        "# One write: the last drain overflows the tail, and its run ends nowhere.\n"
        "out.write(b'y' * 16383 + b'\\nTHE LAST LINE\\n'); out.flush()\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        [*KIGI, "run", "--drop", "--cap", "1024", "--tail", "4096", "--", PY, "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 60
        while b"THE LAST LINE\n" not in seen:
            left = deadline - time.monotonic()
            assert left > 0, (
                f"the last line was not printed while the command waited: {seen[-200:]!r}"
            )
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                assert chunk, "kigi-stream closed its output before the command ended"
                seen += chunk
        assert proc.poll() is None
        go.touch()
        rest, err = proc.communicate(timeout=60)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 0, err
    assert MARKER.search((seen + rest).decode()), seen[-300:]
    assert b" gaps (" in err or b" gap (" in err
