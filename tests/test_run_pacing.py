"""``kigi-stream run`` and a slow reader: into a pipe or a file it waits for
its reader (the command's pipe is read only as fast as the output is taken, so
nothing is lost); with ``--drop`` (a terminal's default) it skips what the
reader fell behind on and marks it on a line of its own. Real processes."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import reap

from kigi_tool_runtime import Reassembler
from kigi_tool_runtime._cli._parser import build_parser
from kigi_tool_runtime._cli._run import _shell_tool

KIGI = (sys.executable, "-m", "kigi_tool_runtime")

#: Bound on any one run: a hang fails the test instead of stalling the suite.
RUN_WAIT_S = 120.0

#: Lines of `seq`: 6.9 MB, several times what the buffers between the command
#: and the reader hold (its pipe, the tail, the frames waiting, the writer's
#: buffer, the reader's pipe), so a reader that stalls must be waited for.
SEQ_LINES = 1_000_000

MARKER = re.compile(r"\[\.\.\. \d+(?:-\d+)? bytes lost \.\.\.\]")


def _seq_bytes(lines: int) -> bytes:
    return "".join(f"{n}\n" for n in range(1, lines + 1)).encode()


def _read_after_a_stall(proc: subprocess.Popen[bytes], stall: float) -> bytes:
    """Read nothing for ``stall`` seconds (the command floods meanwhile), then
    everything to the end."""
    assert proc.stdout is not None
    time.sleep(stall)
    chunks = []
    deadline = time.monotonic() + RUN_WAIT_S
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "kigi-stream run did not end"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _run_slowly_read(*options: str, stall: float = 1.0) -> tuple[bytes, str, int]:
    with subprocess.Popen(
        [*KIGI, "run", *options, "--", "seq", "1", str(SEQ_LINES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            out = _read_after_a_stall(proc, stall)
            assert proc.stderr is not None
            err = proc.stderr.read().decode()
            code = proc.wait(timeout=RUN_WAIT_S)
        finally:
            reap(proc)
    return out, err, code


def test_run_into_a_pipe_waits_for_a_slow_reader_and_loses_nothing() -> None:
    """`run -- seq ... | (sleep 1; cat)`: the output is seq's, byte for byte,
    and the summary says no gap (main lost the middle of it)."""
    out, err, code = _run_slowly_read()
    assert code == 0, err
    assert out == _seq_bytes(SEQ_LINES)
    assert " 0 gaps, not truncated, exit 0" in err


def test_run_json_into_a_slow_pipe_is_a_log_without_gaps(tmp_path: Path) -> None:
    """`--json` waits too: its frames reassemble to the whole output."""
    out, err, code = _run_slowly_read("--json", "--cap", "65536")
    assert code == 0, err
    [report] = Reassembler.fold(out.splitlines()).reports(ended=True)
    assert report.complete, report.summary()
    assert report.total_bytes == len(_seq_bytes(SEQ_LINES))


def test_run_into_a_file_through_a_small_tail_loses_nothing(tmp_path: Path) -> None:
    """A 4 KiB tail is no loss into a file: the pipe is read no faster than
    the frames are cut (main skipped most of this output)."""
    target = tmp_path / "out.txt"
    command = "import sys; sys.stdout.write('x' * 300000 + '\\n')"
    with target.open("wb") as out:
        done = subprocess.run(
            [*KIGI, "run", "--cap", "1024", "--tail", "4096", "--", sys.executable, "-c", command],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=RUN_WAIT_S,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"x" * 300000 + b"\n"
    assert b" 0 gaps, " in done.stderr


def test_run_drop_marks_each_gap_on_a_line_of_its_own() -> None:
    """`--drop` is the live view: a reader that stalls loses the middle, and
    each marker starts a line and ends it, never splitting one of seq's lines
    (main printed `352[... 19481024 bytes lost ...]2868929`)."""
    out, err, code = _run_slowly_read("--drop", "--tail", "65536")
    assert code == 0, err
    text = out.decode()
    markers = list(MARKER.finditer(text))
    assert markers, err
    assert re.search(r" [1-9]\d* gaps? \(", err), err
    for marker in markers:
        assert marker.start() == 0 or text[marker.start() - 1] == "\n", marker[0]
        assert text[marker.end()] == "\n", marker[0]
    # Every other line is one of seq's, or the part of one a gap cut (a gap
    # that ends right before a newline leaves that newline's line empty).
    lines = text.splitlines()
    assert all(MARKER.fullmatch(line) or line.isdigit() or not line for line in lines)


@pytest.mark.parametrize(
    ("options", "terminal", "waits"),
    [
        ((), False, True),  # a pipe or a file: waits
        ((), True, False),  # a terminal: the live view
        (("--drop",), False, False),
        (("--wait",), True, True),
    ],
)
def test_run_waits_unless_stdout_is_a_terminal_or_drop_is_given(
    monkeypatch: pytest.MonkeyPatch, options: tuple[str, ...], terminal: bool, waits: bool
) -> None:
    class Stdout(io.StringIO):
        def isatty(self) -> bool:
            return terminal

    monkeypatch.setattr(sys, "stdout", Stdout())
    args = build_parser().parse_args(["run", *options, "--", "true"])
    assert _shell_tool(args).wait_for_reader is waits


def test_wait_and_drop_cannot_both_be_given() -> None:
    done = subprocess.run(
        [*KIGI, "run", "--wait", "--drop", "--", "true"],
        capture_output=True,
        timeout=RUN_WAIT_S,
        check=False,
    )
    assert done.returncode == 2
    assert b"not allowed with argument" in done.stderr
