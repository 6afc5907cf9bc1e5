"""The kigi-stream CLI end to end: `python -m kigi_tool_runtime ...` in real processes."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import sysconfig
import termios
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cli_in_process import kigi_in_process
from mcp_raw import INITIALIZE, INITIALIZED, bash_call
from processes import group_running, reap

from kigi_tool_protocol import StreamingSpec, encode_progress_line
from kigi_tool_runtime import OutputStream
from kigi_tool_runtime._cli._exits import EXIT_TIMEOUT, EXIT_USAGE
from kigi_tool_runtime._cli._status import STATUS_AFTER_S
from kigi_tool_runtime._consumer._loss import TRUNCATION_MARKER
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime._transport._rpc_server import SERVED_METHODS
from kigi_tool_runtime.testing._consumer_strategies import progress_line as frame_line

CLI = [sys.executable, "-m", "kigi_tool_runtime"]

#: Generous bound on any one CLI run: a hang fails the test instead of blocking
#: the suite. Never a timing assertion.
RUN_WAIT_S = 120.0

# A child that writes a 2-, 3- and 4-byte character each split across two writes,
# sleeping past the tick (20 ms) between the halves.
SPLITTER = (
    "import os, time\n"
    "for ch in ['é', '€', '🎉']:\n"
    "    data = ch.encode()\n"
    "    os.write(1, b'<' + data[:1]); time.sleep(0.15)\n"
    "    os.write(1, data[1:] + b'>'); time.sleep(0.15)\n"
    "os.write(1, 'done\\n'.encode())\n"
)
SPLIT_TEXT = "<é><€><🎉>done\n"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, timeout=RUN_WAIT_S, check=False
    )


def _written(*deltas: str) -> bytes:
    """The frame lines ``run --json`` writes for a command whose output arrives
    as ``deltas``: call ``run-1``, ``bash_output_chunk``, seq from 0."""
    lines, total = [], 0
    for seq, delta in enumerate(deltas):
        total += len(delta.encode())
        payload = {"delta": delta, "total_bytes": total}
        lines.append(encode_progress_line("run-1", "bash_output_chunk", payload, seq=seq))
    return b"".join(lines)


def test_run_prints_split_multibyte_characters_whole() -> None:
    """2-, 3- and 4-byte characters split across slow writes come out whole, no U+FFFD."""
    done = kigi_in_process("run", "--tick", "20", "--", sys.executable, "-c", SPLITTER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == SPLIT_TEXT
    summary = done.stderr.decode()
    assert summary.startswith("kigi-stream: 20 bytes, ")
    assert "0 gaps, not truncated, exit 0" in summary


def test_run_propagates_a_non_zero_exit_code() -> None:
    """The command's exit code is kigi-stream's exit code."""
    done = kigi_in_process("run", "--", "echo out; exit 7")
    assert (done.returncode, done.stdout) == (7, b"out\n")
    assert "exit 7" in done.stderr.decode()


def test_run_reports_death_by_signal_as_128_plus_n() -> None:
    """A command killed by SIGKILL makes kigi-stream exit 137."""
    done = kigi_in_process("run", "--", "kill -KILL $$")
    assert done.returncode == 128 + signal.SIGKILL
    assert "killed by SIGKILL" in done.stderr.decode()


def test_run_times_out_with_124() -> None:
    """--timeout kills the command; the output so far is kept and the exit is 124."""
    done = kigi_in_process("run", "--timeout", "0.5", "--", "echo before; sleep 60")
    assert done.returncode == EXIT_TIMEOUT
    assert done.stdout == b"before\n"
    assert "timed out" in done.stderr.decode()


def test_run_has_no_deadline_without_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --timeout neither the shell tool's default deadline nor its call
    deadline stops the command (both shrunk to 0.3 s for this in-process run,
    so a deadline that still applied would show at once, not in two minutes)."""
    import kigi_tool_runtime._tools._shell as shell

    monkeypatch.setattr(shell, "DEFAULT_COMMAND_TIMEOUT_MS", 300)
    shrunk = msgspec.structs.replace(shell.ShellTool.capabilities, timeout_ms=300)
    monkeypatch.setattr(shell.ShellTool, "capabilities", shrunk)
    done = kigi_in_process("run", "--", "sleep 0.6; echo done")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"done\n"
    assert "exit 0" in done.stderr.decode()


def test_run_takes_a_timeout_past_ten_minutes() -> None:
    """--timeout has no ten-minute ceiling, and --help says there is no default."""
    done = kigi_in_process("run", "--timeout", "3600", "--", "echo fine")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"fine\n"
    usage = " ".join(kigi_in_process("run", "--help").stdout.decode().split())
    assert "(default: no deadline)" in usage


def test_run_json_checked_agrees_with_the_live_view(tmp_path: Path) -> None:
    """`run --json` frames pass `check` and reassemble (via `follow --once`) to the
    same text, byte for byte, as the live view of the same command (which
    test_run_prints_split_multibyte_characters_whole sees as SPLIT_TEXT)."""
    framed = kigi_in_process("run", "--json", "--tick", "20", "--", sys.executable, "-c", SPLITTER)
    assert framed.returncode == 0
    lines = framed.stdout.splitlines()
    assert all(json.loads(line)["method"] == "tool_call_progress" for line in lines)
    assert [json.loads(line)["seq"] for line in lines] == list(range(len(lines)))
    log = tmp_path / "frames.jsonl"
    log.write_bytes(framed.stdout)
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 0, checked.stdout
    report = checked.stdout.decode()
    assert "run-1/bash_output_chunk: 20 bytes in" in report
    assert "no gaps" in report
    assert report.rstrip().endswith(": ok")
    followed = kigi_in_process("follow", "--once", str(log))
    assert followed.stdout == SPLIT_TEXT.encode()


def test_check_fails_on_an_invalid_frame(tmp_path: Path) -> None:
    """A log with a bad line and a seq hole makes `check` exit 1, naming both."""
    good = _written("a\n", "b\n").splitlines()
    log = tmp_path / "bad.jsonl"
    log.write_bytes(b"not json\n" + good[1] + b"\n")
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 1
    report = checked.stdout.decode()
    assert "line 1: undecodable" in report
    assert "line 2: seq_gap: seq of call 'run-1' starts at 1: frame 0 never arrived" in report
    # The first frame's 2 bytes never arrived: the ended log counts them.
    assert "2 bytes counted but not delivered" in report
    assert "checked 2 records, 1 stream, 0 other messages: 3 violations\n" in report


def test_check_numbers_lines_as_the_file_does(tmp_path: Path) -> None:
    """Blank lines are no records but still count, so `check` names the line an
    editor shows."""
    log = tmp_path / "blank.jsonl"
    log.write_bytes(b"\n\nnot json\n\n[]\n")
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 1
    report = checked.stdout.decode()
    assert re.findall(r"^line (\d+): undecodable", report, re.MULTILINE) == ["3", "5"]
    assert "checked 2 records" in report


def test_follow_of_a_shrunk_log_says_so_without_a_resume_hint(tmp_path: Path) -> None:
    """A log shorter than --from-offset exits 2 naming the problem, and offers no
    offset to resume from (it would point into another file)."""
    log = tmp_path / "short.jsonl"
    log.write_bytes(b"{}\n")
    done = kigi_in_process("follow", "--once", "--from-offset", "99", str(log))
    assert done.returncode == EXIT_USAGE
    err = done.stderr.decode()
    assert "shorter than the saved offset 99" in err
    assert "resume with" not in err


def test_follow_resumes_from_an_offset(tmp_path: Path) -> None:
    """--from-offset skips what was already shown and prints the rest."""
    lines = _written("one\n", "two\n").splitlines()
    log = tmp_path / "frames.jsonl"
    log.write_bytes(b"\n".join(lines) + b"\n")
    offset = len(lines[0]) + 1
    followed = kigi_in_process("follow", "--once", "--from-offset", str(offset), str(log))
    assert followed.stdout == b"two\n"
    assert f"--from-offset {log.stat().st_size}" in followed.stderr.decode()


def test_follow_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    """A live follow prints what is appended and exits 0 on SIGINT with its offset."""
    log = tmp_path / "live.jsonl"
    log.write_bytes(b"")
    proc = subprocess.Popen(
        [*CLI, "follow", "--interval", "0.05", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        frames = kigi_in_process("run", "--json", "--", "echo live").stdout
        with log.open("ab") as handle:
            handle.write(frames)
        assert proc.stdout is not None
        assert proc.stdout.read(5) == b"live\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 0
    assert f"stopped at offset {len(frames)}" in err.decode()


#: A command for the status line: an unfinished line ("start", no newline)
#: that outlasts the status delay, then its newline, then a silence long enough
#: for several redraws, then "end".
STATUS_COMMAND = "printf start; sleep 1.3; echo; sleep 1.8; echo end"


def test_the_status_line_on_a_terminal_only_waits_for_a_line_end_and_keeps_time() -> None:
    """One run with stdout and stderr on one terminal: while the output's last
    line has no newline the status line is not drawn (it would wipe that line);
    after one it is, with the rate, and it is redrawn while the command is
    silent, the elapsed time going up. The same command piped (run in process
    meanwhile) gets only the summary on stderr, no status line."""
    assert STATUS_AFTER_S < 1.3  # the unfinished line outlasts the status delay
    main_fd, child_fd = pty.openpty()
    try:
        proc = subprocess.Popen(
            [KIGI_STREAM, "run", "--", STATUS_COMMAND], stdout=child_fd, stderr=child_fd
        )
        os.close(child_fd)
        try:
            piped = kigi_in_process("run", "--", STATUS_COMMAND)
            seen = b""
            while True:
                ready, _, _ = select.select([main_fd], [], [], RUN_WAIT_S)
                assert ready, seen
                try:
                    chunk = os.read(main_fd, 65536)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            assert proc.wait(timeout=RUN_WAIT_S) == 0
        finally:
            reap(proc)
    finally:
        os.close(main_fd)
    assert piped.stdout == b"start\nend\n"
    assert piped.stderr.decode().count("\n") == 1
    assert b"\r" not in piped.stderr
    assert b"[kigi-stream] " not in piped.stderr
    assert b"start\r\n" in seen, seen
    before, after = seen.split(b"start\r\n", 1)
    assert b"[kigi-stream] " not in before, seen
    assert b"end\r\n" in after
    draws = re.findall(rb"\[kigi-stream\] 6 B at [\d.]+ B/s, (\d+\.\d) s", after)
    elapsed = [float(value) for value in draws]
    assert len(set(elapsed)) >= 3, seen  # redrawn during the silence, not only per frame
    assert elapsed == sorted(elapsed)


def test_bad_usage_exits_2_with_a_message() -> None:
    """The installed command exits 2 and says why, on a value the parser refuses
    and on a usage error a command finds (the cases below run in process)."""
    for args, message in (
        (["run", "--tick", "0", "--", "true"], "must be a positive number, got 0"),
        (["run"], "no command given"),
    ):
        done = _cli(*args)
        assert done.returncode == EXIT_USAGE, (args, done.stderr)
        assert message in done.stderr.decode(), (args, done.stderr)


def test_bad_usage_cases_exit_2_with_a_message(tmp_path: Path) -> None:
    """Missing command, bad numbers, unknown options and missing files exit 2 and say why."""
    cases = [
        (["run"], "no command given"),
        (["run", "--tick", "0", "--", "true"], "must be a positive number, got 0"),
        (["run", "--tail", "abc", "--", "true"], "expected a whole number, got 'abc'"),
        (["run", "--timeout", "-1", "--", "true"], "must be a positive number, got -1"),
        (["run", "--timeout", "0", "--", "true"], "must be a positive number, got 0"),
        (["run", "--timeout", "nan", "--", "true"], "must be a positive number, got nan"),
        (["run", "--timeout", "inf", "--", "true"], "must be a positive number, got inf"),
        (["run", "--timeout", "soon", "--", "true"], "expected a number, got 'soon'"),
        (["run", "--timeout", "1e30", "--", "true"], "leave --timeout out for no deadline"),
        (["run", "--tail", "10", "--", "true"], "--tail 10 is below --cap (16384 bytes"),
        (["run", "--cap", "-1", "--", "true"], "must not be negative, got -1"),
        (["run", "--limit", "x", "--", "true"], "expected a whole number, got 'x'"),
        (["run", "--", ""], "the command is empty"),
        (["run", "--", "", "x"], "the command is empty"),
        (["check", str(tmp_path / "absent.jsonl")], "no such file"),
        (["follow", "--once", str(tmp_path / "absent.jsonl")], "no such file"),
        (["follow", "--from-offset", "-1", "x"], "must not be negative, got -1"),
        (["follow", "--interval", "1e10", "x"], "must be at most 86400 seconds (a day)"),
        (["follow", "--seq-scope", "hub", "x"], "invalid choice: 'hub'"),
        (["check", "--seq-scope", "stream", "x"], "invalid choice: 'stream'"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ]
    for args, message in cases:
        done = kigi_in_process(*args)
        assert done.returncode == EXIT_USAGE, (args, done.stderr)
        assert message in done.stderr.decode(), (args, done.stderr)


def test_serve_answers_over_stdio() -> None:
    """`serve` answers requests from stdin on stdout, then exits 0 at end of input."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tool.call",
        "params": {"tool_call_id": "c", "tool_id": "bash", "arguments": {"command": "echo hi"}},
    }
    proc = subprocess.Popen([*CLI, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        messages: list[dict[str, Any]] = []
        while not messages or "id" not in messages[-1]:
            line = proc.stdout.readline()
            assert line, "serve closed its output early"
            messages.append(json.loads(line))
        proc.stdin.close()
        assert proc.wait(timeout=RUN_WAIT_S) == 0
    finally:
        reap(proc)
        assert proc.stdout is not None
        proc.stdout.close()
    *progress, response = messages
    assert "".join(p["params"]["body"]["delta"] for p in progress) == "hi\n"
    assert response["result"]["output"]["value"]["output"] == "hi\n"


def test_cap_and_limit_reach_the_shell_tool() -> None:
    """--cap bounds every delta's bytes; --limit stops the output there, truncated."""
    done = kigi_in_process("run", "--json", "--cap", "4", "--", "printf abcdéfghij")
    assert done.returncode == 0
    deltas = [json.loads(line)["params"]["body"]["delta"] for line in done.stdout.splitlines()]
    assert "".join(deltas) == "abcdéfghij"
    assert max(len(d.encode()) for d in deltas) <= 4
    done = kigi_in_process("run", "--json", "--cap", "0", "--", "printf 'a€'")
    deltas = [json.loads(line)["params"]["body"]["delta"] for line in done.stdout.splitlines()]
    assert deltas == ["a", "€"]
    done = kigi_in_process("run", "--limit", "4", "--", "printf abcdefghij")
    assert done.stdout == b"abcd\n" + TRUNCATION_MARKER.encode() + b"\n"
    assert "4 bytes" in done.stderr.decode()
    assert ", truncated," in done.stderr.decode()


def test_a_limit_reached_exactly_at_a_write_still_reads_truncated() -> None:
    """Output that stops at --limit and resumes after a tick (or a limit of 0) is
    still summarised as truncated, with the bytes dropped past the limit."""
    writes = "import os,time; os.write(1, b'abcde'); time.sleep(0.3); os.write(1, b'fgh')"
    done = kigi_in_process(
        "run", "--tick", "20", "--limit", "5", "--", sys.executable, "-c", writes
    )
    assert (done.returncode, done.stdout) == (0, b"abcde\n" + TRUNCATION_MARKER.encode() + b"\n")
    summary = done.stderr.decode()
    assert summary.startswith("kigi-stream: 5 bytes, ")
    assert ", truncated, 3 bytes past the limit dropped, exit 0" in summary
    done = kigi_in_process("run", "--limit", "0", "--", "printf abc")
    assert (done.returncode, done.stdout) == (0, TRUNCATION_MARKER.encode() + b"\n")
    assert ", truncated, 3 bytes past the limit dropped, exit 0" in done.stderr.decode()


def test_check_of_a_limited_run_reports_the_truncation(tmp_path: Path) -> None:
    """`run --json --limit` whose output stops exactly at the limit, then writes
    more after a tick (or a limit of 0): the log ends with the truncation notice,
    and `check` reports the stream truncated, with no violation."""
    writes = "import os,time; os.write(1, b'abcde'); time.sleep(0.3); os.write(1, b'fgh')"
    cases = [("5", (sys.executable, "-c", writes), "5 bytes"), ("0", ("printf abc",), "0 bytes")]
    for limit, command, size in cases:
        framed = kigi_in_process("run", "--json", "--tick", "20", "--limit", limit, "--", *command)
        assert framed.returncode == 0, framed.stderr
        lines = framed.stdout.splitlines()
        last = json.loads(lines[-1])["params"]["body"]
        assert last == {"delta": "", "total_bytes": int(limit), "truncated": True, "gap": False}
        assert ", truncated, 3 bytes past the limit dropped, exit 0" in framed.stderr.decode()
        log = tmp_path / f"limit-{limit}.jsonl"
        log.write_bytes(framed.stdout)
        checked = kigi_in_process("check", str(log))
        assert checked.returncode == 0, checked.stdout
        report = checked.stdout.decode()
        assert f"run-1/bash_output_chunk: {size} in" in report
        assert "truncated at the output limit" in report
        assert report.rstrip().endswith(": ok")


def test_serve_stopped_by_sigterm_cancels_its_calls_and_their_commands() -> None:
    """SIGTERM ends `serve` like end of input: the call in flight is answered
    cancelled, its command's process group is gone, and the exit is 143."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tool.call",
        "params": {
            "tool_call_id": "c",
            "tool_id": "bash",
            "arguments": {"command": "echo $$; sleep 60"},
        },
    }
    proc = subprocess.Popen([*CLI, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    group = 0
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        group = int(json.loads(proc.stdout.readline())["params"]["body"]["delta"])
        proc.send_signal(signal.SIGTERM)
        reply = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=RUN_WAIT_S) == 128 + signal.SIGTERM
        assert reply["id"] == 1
        assert reply["error"]["data"]["code"] == "cancelled"
        assert reply["error"]["message"] == "tool call cancelled by server"
        assert not group_running(group)  # zombies left to init run nothing
    finally:  # a failure must not leave the server or the command behind
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)


def test_serve_works_with_regular_files_as_stdio(tmp_path: Path) -> None:
    """`serve < requests > replies` works on regular files (not pipes): bad lines are
    answered, and a call cut short by the end of input ends cancelled."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(
        b"garbage\n"
        b'{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool_call_id":"c",'
        b'"tool_id":"bash","arguments":{"command":"sleep 60"}}}\n'
    )
    replies = tmp_path / "replies.jsonl"
    with requests.open("rb") as stdin, replies.open("wb") as stdout:
        done = subprocess.run(
            [*CLI, "serve"], stdin=stdin, stdout=stdout, timeout=RUN_WAIT_S, check=False
        )
    assert done.returncode == 0
    lines = [json.loads(line) for line in replies.read_bytes().splitlines()]
    assert lines[0]["error"]["code"] == -32700
    assert lines[-1]["id"] == 1
    assert lines[-1]["error"]["data"] == {"code": "cancelled", "tool_id": "bash"}


@pytest.fixture(scope="module")
def served_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real ``serve`` log of two interleaved calls, read by the tests below
    (none of them changes it)."""
    return _served_log(tmp_path_factory.mktemp("served") / "served.jsonl")


def _served_log(path: Path) -> Path:
    """Write to ``path`` what a real `serve` answers to two calls run at once:
    c1 echoes a1..a3 and c2 b1..b3, a line every 0.2 s, so their progress
    interleaves, each call numbering its own seq from 0."""
    proc = subprocess.Popen([*CLI, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        for n, letter in ((1, "a"), (2, "b")):
            command = f"for i in 1 2 3; do echo {letter}$i; sleep 0.2; done"
            request = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tool.call",
                "params": {
                    "tool_call_id": f"c{n}",
                    "tool_id": "bash",
                    "arguments": {"command": command},
                },
            }
            proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        assert proc.stdout is not None
        log: list[bytes] = []
        while sum(b'"result"' in line for line in log) < 2:
            line = proc.stdout.readline()
            assert line, "serve closed its output early"
            log.append(line)
        proc.stdin.close()
        proc.wait(timeout=RUN_WAIT_S)
    finally:
        reap(proc)
        assert proc.stdout is not None
        proc.stdout.close()
    calls = [json.loads(line)["params"]["tool_call_id"] for line in log if b'"seq"' in line]
    switches = sum(one != two for one, two in itertools.pairwise(calls))
    assert switches >= 2, f"the calls did not interleave: {calls}"
    path.write_bytes(b"".join(log))
    return path


def test_check_takes_seq_per_call_in_a_served_log(served_log: Path) -> None:
    """A `serve` log of two interleaved calls passes `check`: each call's seq is
    its own; read as one connection counter (`--seq-scope connection`) it fails."""
    path = served_log
    checked = kigi_in_process("check", str(path))
    report = checked.stdout.decode()
    assert checked.returncode == 0, report
    assert "c1/bash_output_chunk: 9 bytes" in report
    assert "c2/bash_output_chunk: 9 bytes" in report
    assert "2 streams, 2 other messages: ok" in report
    as_hub = kigi_in_process("check", "--seq-scope", "connection", str(path))
    assert as_hub.returncode == 1
    assert "seq_repeated" in as_hub.stdout.decode()


def test_follow_prints_interleaved_served_calls_without_anomaly(served_log: Path) -> None:
    """`follow --once` on a `serve` log of two interleaved calls prints both
    calls' text and reports no anomaly; `--seq-scope connection` reports the
    per-call seqs as faults, with their line numbers, on stderr."""
    path = served_log
    followed = kigi_in_process("follow", "--once", str(path))
    assert followed.returncode == 0
    assert _text_by_label(followed.stdout.decode()) == {
        "c1/bash_output_chunk": ["a1", "a2", "a3"],
        "c2/bash_output_chunk": ["b1", "b2", "b3"],
    }
    assert followed.stderr.decode().splitlines() == [
        f"kigi-stream follow: stopped at offset {path.stat().st_size}"
        f" (resume with --from-offset {path.stat().st_size})"
    ]
    as_hub = kigi_in_process("follow", "--once", "--seq-scope", "connection", str(path))
    assert as_hub.stdout == followed.stdout
    faults = re.findall(r"kigi-stream follow: line \d+: (seq_\w+): ", as_hub.stderr.decode())
    assert faults
    assert set(faults) <= {"seq_repeated", "seq_reordered"}


def _text_by_label(printed: str) -> dict[str, list[str]]:
    """The lines ``follow`` printed, grouped under the ``==> CALL/SUBKIND <==``
    label before them (every text line must have one)."""
    groups: dict[str, list[str]] = {}
    label = None
    for line in printed.splitlines():
        heading = re.fullmatch(r"==> (.+) <==", line)
        if heading:
            label = heading[1]
            continue
        assert label is not None, f"text before any label: {printed!r}"
        groups.setdefault(label, []).append(line)
    return groups


def test_follow_marks_a_gap_where_bytes_were_lost(tmp_path: Path) -> None:
    """A gap frame in the log prints the gap marker with the lost byte count."""
    log = tmp_path / "gap.jsonl"
    log.write_bytes(
        encode_progress_line("c", "bash_output_chunk", {"delta": "ab", "total_bytes": 2}, seq=0)
        + encode_progress_line(
            "c", "bash_output_chunk", {"delta": "yz", "total_bytes": 10, "gap": True}, seq=1
        )
    )
    followed = kigi_in_process("follow", "--once", str(log))
    # The log may go on with more of the gap's run: what is certain is printed.
    assert followed.stdout.decode() == "ab[... 1-6 bytes lost ...]yz"
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 0
    # The whole log is there: nothing is still held back, so the count is exact.
    assert "1 gap (6 bytes lost)" in checked.stdout.decode()


def test_follow_prints_gap_counts_that_hold_the_exact_loss(tmp_path: Path) -> None:
    """Gaps whose runs go on for several frames (a 4 KiB tail drained at a 1 KiB
    cap) are printed with the figures their whole run proves: each marker
    holds the bytes truly lost there, to within a held character at each end,
    and check counts them exactly."""
    stream = OutputStream(
        StreamingSpec(subkind="bash_output_chunk", max_delta_bytes=1024), capacity=4096
    )
    lines = []
    seq = 0
    for _ in range(5):
        stream.write(b"x" * 60_000)
        data, frames = stream.drain_lines("c", seq=seq)
        lines.append(data)
        seq += frames
    stream.write(b"y" * 10)
    lines.append(stream.finish_lines("c", seq=seq).data)
    log = tmp_path / "gaps.jsonl"
    log.write_bytes(b"".join(lines))
    printed = kigi_in_process("follow", "--once", str(log)).stdout.decode()
    markers = re.findall(r"\[\.\.\. ([0-9-]+) bytes lost \.\.\.\]", printed)
    assert len(markers) == 5
    for marker in markers:  # each run: 60,000 bytes written, its last 4,096 kept
        low, _, high = marker.partition("-")
        assert int(low) <= 60_000 - 4096 <= int(high or low) <= int(low) + 6
    checked = kigi_in_process("check", str(log)).stdout.decode()
    assert "5 gaps (279520 bytes lost)" in checked


def test_run_stops_the_command_on_sigint_with_130() -> None:
    """Ctrl-C cancels the call (the command is killed) and kigi-stream exits 130."""
    proc = subprocess.Popen(
        [*CLI, "run", "--", "echo ready; sleep 60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 128 + signal.SIGINT
    assert "cancelled" in err.decode()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_run_stopped_by_a_signal_kills_the_commands_group_first(stop: signal.Signals) -> None:
    """SIGTERM (a plain kill) or SIGHUP (the terminal closed) stops the command's
    process group, which has a session of its own, before kigi-stream exits 128 + N."""
    proc = subprocess.Popen(
        [*CLI, "run", "--", "echo $$; sleep 60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        group = int(proc.stdout.readline())
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    try:
        assert proc.returncode == 128 + stop
        assert "cancelled" in err.decode()
        assert not group_running(group)  # zombies left to init run nothing
    finally:  # a failure must not leave the command behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_run_of_a_missing_program_exits_127() -> None:
    """A program that cannot be started makes kigi-stream exit 127 and say so."""
    done = kigi_in_process("run", "--", "/nonexistent/program", "arg")
    assert done.returncode == 127
    assert "cannot start" in done.stderr.decode()


def test_run_into_a_closed_pipe_exits_141_quietly() -> None:
    """When stdout's reader goes away, the command is stopped and the exit is 141,
    without a traceback."""
    flood = "import os\nwhile True: os.write(1, b'z' * 65536)\n"
    proc = subprocess.Popen(
        [*CLI, "run", "--", sys.executable, "-c", flood],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(10) == b"z" * 10
        proc.stdout.close()
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 128 + signal.SIGPIPE
    assert b"Traceback" not in err


def test_run_into_a_closed_pipe_leaves_no_descriptor_open() -> None:
    """The closed-pipe path points stdout at /dev/null, so the exit's flush is quiet,
    and leaves no descriptor open: `main` returns 141 with the fds it started with
    (and the lifeline's pipe, which the process keeps for its life once a command
    ran)."""
    flood = "import os\nwhile True: os.write(1, b'z' * 65536)\n"
    script = (
        "import json, os, sys\n"
        "from kigi_tool_runtime._cli._main import main\n"
        "before = sorted(os.listdir('/proc/self/fd'))\n"
        f"code = main(['run', '--', sys.executable, '-c', {flood!r}])\n"
        "from kigi_tool_runtime._process import _LIFELINE\n"
        "kept = {str(_LIFELINE._fd)}  # the lifeline's pipe: one per process, kept\n"
        "after = sorted(set(os.listdir('/proc/self/fd')) - kept)\n"
        "stdout = os.readlink('/proc/self/fd/1')\n"
        "sys.stderr.write('\\n' + json.dumps([code, before, after, stdout]) + '\\n')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(10) == b"z" * 10
        proc.stdout.close()
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 0, err.decode()
    code, before, after, stdout = json.loads(err.splitlines()[-1])
    assert (code, stdout) == (128 + signal.SIGPIPE, os.devnull)
    assert after == before


# -- the installed `kigi-stream` command ---------------------------------------------

#: The console script that `pip install` made for this interpreter: tests of the
#: command a user types run it, not only `python -m kigi_tool_runtime`.
KIGI_STREAM = str(Path(sysconfig.get_path("scripts")) / "kigi-stream")


def _kigi(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [KIGI_STREAM, *args], input=stdin, capture_output=True, timeout=RUN_WAIT_S, check=False
    )


def test_the_entry_point_reports_its_version_from_the_package_metadata() -> None:
    """`kigi-stream --version` is installed and prints the distribution's version."""
    done = _kigi("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"kigi-stream {version('kigi-tool-runtime')}\n"


def test_check_and_follow_read_standard_input() -> None:
    """`-` and /dev/stdin are standard input for `check` and `follow` (read to its
    end, with no resume offset), as in `kigi-stream run --json ... | kigi-stream check -`.
    `follow` and `check -` read a pipe (the installed command); `check
    /dev/stdin` and the refusal are the same parsing, run in this process."""
    frames = _written("one\n", "two\n")
    for name in ("-", "/dev/stdin"):
        real = name == "-"
        cli = _kigi if real else kigi_in_process
        checked = cli("check", name, stdin=frames)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.decode().endswith("1 stream, 0 other messages: ok\n")
        for once in ((), ("--once",)):
            followed = _kigi("follow", *once, name, stdin=frames)  # a pipe: no offset
            assert (followed.returncode, followed.stdout) == (0, b"one\ntwo\n"), followed
            assert followed.stderr == b""  # a stream has no offset to resume from
    refused = kigi_in_process("follow", "--from-offset", "3", "-", stdin=frames)
    assert refused.returncode == EXIT_USAGE
    assert "--from-offset needs a file" in refused.stderr.decode()


def test_follow_prints_a_pipe_live_as_frames_arrive() -> None:
    """`follow -` prints each frame's text as it comes down the pipe, before the
    input ends, then exits 0 at its end."""
    first, second = _written("one\n", "two\n").splitlines(keepends=True)
    proc = subprocess.Popen(
        [KIGI_STREAM, "follow", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(first)
        proc.stdin.flush()
        assert proc.stdout.read(4) == b"one\n"  # while the input is still open
        proc.stdin.write(second)
        proc.stdin.close()
        assert proc.wait(timeout=RUN_WAIT_S) == 0
        assert proc.stdout.read() == b"two\n"
        assert proc.stderr is not None
        assert proc.stderr.read() == b""
    finally:
        reap(proc)
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_a_directory_is_refused_as_a_directory(tmp_path: Path) -> None:
    """`check DIR` and `follow DIR` say it is a directory, not that it does not exist."""
    for args in (["check", str(tmp_path)], ["follow", "--once", str(tmp_path)]):
        done = kigi_in_process(*args)
        assert done.returncode == EXIT_USAGE
        assert f"{str(tmp_path)!r} is a directory" in done.stderr.decode()
        assert "no such file" not in done.stderr.decode()


def test_check_reports_an_unterminated_last_line(tmp_path: Path) -> None:
    """A last line without a newline (text, binary junk, or a frame whose newline
    was cut off) is a violation that names the line, never `ok`."""
    frames = _written("one\n", "two\n")
    junk = bytes(range(256)).replace(b"\n", b"") * 8
    cases = [
        (b"garbage without newline", 1, "23 bytes"),
        (junk[:2000], 1, "2000 bytes"),
        (frames.rstrip(b"\n"), 2, f"{len(frames.splitlines()[1])} bytes"),
    ]
    for data, line, size in cases:
        for args, stdin in (([str(tmp_path / "log")], None), (["-"], data)):
            (tmp_path / "log").write_bytes(data)
            checked = kigi_in_process("check", *args, stdin=stdin)
            report = checked.stdout.decode()
            assert checked.returncode == 1, report
            assert f"line {line}: unterminated: the last line ({size}) has no newline" in report
            assert report.endswith(": 1 violation\n"), report


def test_help_shows_defaults_descriptions_and_the_commands_stdin() -> None:
    """`--help` of each command describes it and shows each option's default."""
    top = kigi_in_process("--help").stdout.decode()
    for command in ("run", "serve", "follow", "check"):
        assert re.search(rf"^\s+{command}\s+\S", top, re.MULTILINE), (command, top)
    run = " ".join(kigi_in_process("run", "--help").stdout.decode().split())
    assert "default 16384, 16.0 KiB; 0: one character per delta" in run
    assert "default 1048576, 1.0 MiB" in run
    assert "pacing interval in milliseconds" in run
    assert "(default 20)" in run
    assert "exit 124 (default: no deadline)" in run
    assert "its stdin is /dev/null" in run
    follow = " ".join(kigi_in_process("follow", "--help").stdout.decode().split())
    assert "FILE the frame log; - (or a pipe) is standard input" in follow
    assert "--from-offset BYTES start at this byte offset" in follow
    assert "like tail -f" in follow
    check = " ".join(kigi_in_process("check", "--help").stdout.decode().split())
    assert "FILE the frame log; - is standard input" in check
    assert "unterminated last line" in check


def test_serve_help_names_the_methods() -> None:
    """`serve --help` lists every method the server answers and shows a request."""
    helped = kigi_in_process("serve", "--help").stdout.decode()
    for method in SERVED_METHODS:
        assert re.search(rf"^  {re.escape(method)}\s", helped, re.MULTILINE), method
    assert '"method":"tool.call"' in helped


def test_serve_on_a_terminal_prints_a_hint() -> None:
    """Typed at a terminal, `serve` says on stderr what it reads, then serves."""
    main_fd, child_fd = pty.openpty()
    try:
        proc = subprocess.Popen(
            [KIGI_STREAM, "serve"], stdin=child_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        os.close(child_fd)
        os.write(main_fd, b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}\n\x04')
        out, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
        os.close(main_fd)
    assert proc.returncode == 0
    hint = err.decode()
    assert hint.startswith("kigi-stream serve: reading JSON-RPC 2.0 requests on stdin")
    assert hint.count("\n") == 1
    assert "tools.list, tool.call" in hint
    assert json.loads(out)["result"]["tools"][0]["id"] == "bash"
    piped = _kigi("serve", stdin=b"")
    assert (piped.returncode, piped.stderr) == (0, b"")


def test_counts_are_singular_when_one() -> None:
    """1 byte, 1 frame, 1 gap, 1 record, 1 stream, 1 violation: no `1 frames`."""
    done = kigi_in_process("run", "--", "printf a")
    assert done.stderr.decode().startswith("kigi-stream: 1 byte, 1 frame, 0 gaps, ")
    frame = encode_progress_line("c", "bash_output_chunk", {"delta": "ab", "total_bytes": 2}, seq=0)
    checked = kigi_in_process("check", "-", stdin=frame + b"junk\n")
    report = checked.stdout.decode()
    assert "checked 2 records, 1 stream, 0 other messages: 1 violation\n" in report
    checked = kigi_in_process("check", "-", stdin=frame)
    assert checked.stdout.decode().endswith("checked 1 record, 1 stream, 0 other messages: ok\n")


def test_the_summary_starts_its_own_line_after_unterminated_output() -> None:
    """Output without a final newline, on the same file as the summary, is not
    glued to it; piped apart, the output stays byte for byte."""
    same = subprocess.run(
        [KIGI_STREAM, "run", "--", "printf abc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=RUN_WAIT_S,
        check=False,
    )
    assert same.stdout.decode().startswith("abc\nkigi-stream: 3 bytes, ")
    apart = _kigi("run", "--", "printf abc")
    assert apart.stdout == b"abc"
    assert apart.stderr.decode().startswith("kigi-stream: 3 bytes, ")


def test_follow_stopped_by_sigterm_prints_the_resume_offset(tmp_path: Path) -> None:
    """SIGTERM stops a live follow as Ctrl-C does: exit 0 and the offset to resume from."""
    log = tmp_path / "live.jsonl"
    frames = _written("live\n")
    log.write_bytes(frames)
    proc = subprocess.Popen(
        [KIGI_STREAM, "follow", "--interval", "0.05", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(5) == b"live\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 0
    assert f"stopped at offset {len(frames)} (resume with --from-offset {len(frames)})" in (
        err.decode()
    )


def test_follow_and_check_agree_on_line_numbers(tmp_path: Path) -> None:
    """With blank lines in the log, `follow` names the same lines as `check`."""
    log = tmp_path / "blank.jsonl"
    log.write_bytes(b"\n\nnot json\n\n[]\n")
    checked = kigi_in_process("check", str(log)).stdout.decode()
    followed = kigi_in_process("follow", "--once", str(log)).stderr.decode()
    from_check = re.findall(r"^line (\d+): undecodable", checked, re.MULTILINE)
    from_follow = re.findall(r"^kigi-stream follow: line (\d+): undecodable", followed, re.M)
    assert from_check == from_follow == ["3", "5"]
    piped = kigi_in_process("follow", "-", stdin=log.read_bytes()).stderr.decode()
    assert re.findall(r"line (\d+): undecodable", piped) == ["3", "5"]


def test_follow_labels_each_calls_text_in_a_live_served_log(served_log: Path) -> None:
    """A live follow of a `serve` log labels the calls' text once a second call
    appears: text that follows the label belongs to that call."""
    piped = kigi_in_process("follow", "-", stdin=served_log.read_bytes())
    assert _text_by_label(piped.stdout.decode()) == {
        "c1/bash_output_chunk": ["a1", "a2", "a3"],
        "c2/bash_output_chunk": ["b1", "b2", "b3"],
    }


def test_check_piped_into_head_exits_141_quietly(tmp_path: Path) -> None:
    """`kigi-stream check FILE | head -1` (a report far longer than the pipe
    holds): head gets its line, check exits 141 without a traceback."""
    log = tmp_path / "bad.jsonl"
    log.write_text("".join(f"not json {i}\n" for i in range(20_000)))
    script = '"$1" check "$2" | head -1; echo "status ${PIPESTATUS[0]}" >&2'
    done = subprocess.run(
        ["bash", "-c", script, "bash", KIGI_STREAM, str(log)],
        capture_output=True,
        timeout=RUN_WAIT_S,
    )
    assert done.stdout.decode().startswith("line 1: undecodable")
    assert done.stdout.count(b"\n") == 1
    assert done.stderr.decode().splitlines() == [f"status {128 + signal.SIGPIPE}"]


def test_check_into_a_closed_pipe_exits_141_quietly(tmp_path: Path) -> None:
    """A report short enough to sit in stdout's buffer until the end: the flush
    into a pipe already closed still exits 141 without a traceback."""
    log = tmp_path / "one.jsonl"
    log.write_text('{"jsonrpc":"2.0","method":"other","params":{}}\n')
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [*CLI, "check", str(log)], stdout=write_end, stderr=subprocess.PIPE, timeout=RUN_WAIT_S
        )
    finally:
        os.close(write_end)
    assert done.returncode == 128 + signal.SIGPIPE
    assert done.stderr == b""


def test_check_and_follow_report_lines_nested_too_deeply(tmp_path: Path) -> None:
    """Lines nested deeper than the decoder recurses, at every depth around where
    it stops, are undecodable records to check and follow, never a crash."""
    lines = []
    for depth in range(900, 1001):
        nested = b"[" * depth + b"]" * depth
        lines.append(
            b'{"jsonrpc":"2.0","method":"tool_call_progress","params":{"tool_call_id":"c",'
            b'"kind":"bash_output_chunk","body":' + nested + b"}}"
        )
        lines.append(b'{"jsonrpc":"2.0","seq":' + nested + b',"method":"x","params":{}}')
        lines.append(b"[" * depth)
    log = tmp_path / "deep.jsonl"
    log.write_bytes(b"\n".join(lines) + b"\n")
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 1, checked.stderr.decode()
    report = checked.stdout.decode().splitlines()
    assert report[-1].startswith(f"checked {len(lines)} records, ")
    assert report[-1].endswith(f": {len(lines)} violations")
    assert any("nested too deeply" in line for line in report)
    followed = kigi_in_process("follow", "--once", str(log))
    assert followed.returncode == 0, followed.stderr.decode()
    assert followed.stderr.decode().count("kigi-stream follow: line ") == len(lines)


# -- stopping with stdout not read ----------------------------------------------------

#: Bound on each wait in the stopping tests (a pipe filling, a file appearing, a
#: process exiting, a group going): far above what any takes, far below the
#: stalls they guard against (a wait that never ends, a 60 s grace).
STOP_WAIT_S = 30.0

#: `kigi-stream` with the shell tool's kill grace and the runner's and server's
#: stop waits raised to 60 s: a group that ignores SIGTERM then keeps a first
#: signal's stop waiting that long, so only a second signal ends it sooner.
PATIENT_CLI = """
import sys
from kigi_tool_runtime._tools import _runner, _shell
from kigi_tool_runtime._transport import _server
_shell.ShellTool.__init__.__kwdefaults__["grace"] = 60.0
_runner.run_tool.__kwdefaults__["stop_wait"] = 60.0
_server.Server.__init__.__kwdefaults__["stop_wait"] = 60.0
from kigi_tool_runtime._cli._main import main
sys.exit(main(sys.argv[1:]))
"""


def _until(what: str, ready: Any) -> None:
    deadline = time.monotonic() + STOP_WAIT_S
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {STOP_WAIT_S} s"
        time.sleep(0.05)


def _wait_until_full(fd: int) -> None:
    """Wait until the pipe read by ``fd`` holds at least half its size and stays
    put (the writer is blocked: nobody reads it)."""
    size = fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))
    seen = [-1]

    def full() -> bool:
        held = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        steady = held == seen[0]
        seen[0] = held
        time.sleep(0.2)
        return held >= size // 2 and steady

    _until("the pipe filled", full)


def _group_of(pidfile: Path) -> int:
    _until("the command wrote its pid", lambda: pidfile.exists() and pidfile.read_text())
    return int(pidfile.read_text())


def _group_gone(pgid: int) -> bool:
    return not group_alive(pgid)


def _stop_unread(
    argv: list[str], how: signal.Signals | None, stdin: bytes | None, pidfile: Path
) -> tuple[int, str]:
    """Start ``argv`` with stdout a pipe nobody reads (``stdin`` sent, then left
    open), wait until that pipe is full, then send ``how`` (None: close stdin).
    Returns the exit status and stderr; the command's group must be gone."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    group = 0
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        group = _group_of(pidfile)
        _wait_until_full(proc.stdout.fileno())
        if how is None:
            proc.stdin.close()
        else:
            proc.send_signal(how)
        code = proc.wait(timeout=STOP_WAIT_S)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        _until("the command's process group is gone", lambda: _group_gone(group))
        group = 0
        return code, err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _serve_calls(pidfile: Path, command: str) -> bytes:
    """A call that records its group and runs ``command``, and one that floods."""
    calls = [
        ("long", f"echo $$ > {pidfile}; {command}"),
        ("flood", "head -c 3000000 /dev/zero | tr '\\0' x"),
    ]
    return b"".join(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": number,
                "method": "tool.call",
                "params": {
                    "tool_call_id": call_id,
                    "tool_id": "bash",
                    "arguments": {"command": cmd},
                },
            }
        ).encode()
        + b"\n"
        for number, (call_id, cmd) in enumerate(calls, start=1)
    )


@pytest.mark.parametrize("how", [signal.SIGTERM, None])
def test_serve_with_stdout_not_read_stops_on_a_signal_or_end_of_input(
    tmp_path: Path, how: signal.Signals | None
) -> None:
    """`serve` whose stdout nobody reads (full) stops on a signal (128 + N) and
    at end of input (0): the final flush gives up, the calls' commands are
    stopped, and stderr counts the lines never written. SIGTERM stands for the
    stop signals: serve hands SIGINT and SIGHUP to the same stop (StopSignals,
    each signal's count and status tested in process in test_signals.py)."""
    pidfile = tmp_path / "pid"
    stdin = _serve_calls(pidfile, "exec sleep 60")
    code, err = _stop_unread([*CLI, "serve"], how, stdin, pidfile)
    assert code == (0 if how is None else 128 + how), err
    assert "stdout was not being read" in err
    assert "were never written" in err
    assert "Traceback" not in err


def _mcp_calls(pidfile: Path, command: str) -> bytes:
    """The MCP handshake, then the calls of :func:`_serve_calls` as tools/call."""
    calls = [
        ("long", f"echo $$ > {pidfile}; {command}"),
        ("flood", "head -c 30000000 /dev/zero | tr '\\0' x"),
    ]
    messages: list[dict[str, Any]] = [INITIALIZE, INITIALIZED]
    messages += [
        bash_call(number, cmd, call_id) for number, (call_id, cmd) in enumerate(calls, start=1)
    ]
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


@pytest.mark.parametrize("how", [signal.SIGTERM, None])
def test_serve_mcp_with_stdout_not_read_stops_on_a_signal_or_end_of_input(
    tmp_path: Path, how: signal.Signals | None
) -> None:
    """`serve --mcp` whose stdout nobody reads (full) stops at end of input (0)
    and on SIGTERM (143), its calls' commands stopped."""
    pidfile = tmp_path / "pid"
    stdin = _mcp_calls(pidfile, "exec sleep 60")
    code, err = _stop_unread([*CLI, "serve", "--mcp"], how, stdin, pidfile)
    assert code == (0 if how is None else 128 + how), err
    assert "Traceback" not in err


def test_run_with_stdout_not_read_stops_on_a_signal(tmp_path: Path) -> None:
    """`run` whose stdout nobody reads (full) stops on a signal with 128 + N:
    the command's group is stopped, the output left is given up after the flush
    deadline, and stderr says how much was never written. SIGTERM stands for
    the stop signals (one StopSignals path; SIGINT's 130 is seen in
    test_run_stops_the_command_on_sigint_with_130)."""
    how = signal.SIGTERM
    pidfile = tmp_path / "pid"
    argv = [*CLI, "run", "--", f"echo $$ > {pidfile}; exec yes"]
    code, err = _stop_unread(argv, how, None, pidfile)
    assert code == 128 + how, err
    assert re.search(r"stdout was not being read; \d+ bytes of output were never written", err)
    assert "cancelled" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_second_signal_forces_the_exit_and_still_kills_the_group(
    tmp_path: Path, command: str
) -> None:
    """A command group that ignores SIGTERM keeps a first SIGTERM's stop waiting
    (here 60 s); a second SIGTERM ends `run` and `serve` at once with 143, and
    the group is SIGKILLed on the way out, not orphaned."""
    pidfile = tmp_path / "pid"
    ignoring = f"trap '' TERM; echo $$ > {pidfile}; while :; do sleep 0.05; done"
    argv = [sys.executable, "-c", PATIENT_CLI, command]
    stdin = None
    if command == "run":
        argv += ["--", ignoring]
    else:
        stdin = _serve_calls(pidfile, ignoring)
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    group = 0
    try:
        assert proc.stdin is not None
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        group = _group_of(pidfile)
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # the first stop waits on the group
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_WAIT_S) == 128 + signal.SIGTERM
        _until("the command's process group is gone", lambda: _group_gone(group))
        group = 0
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        for pipe in (proc.stdin, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def test_run_cut_by_the_limit_inside_a_character_invents_no_replacement() -> None:
    """--limit 3 cuts the 3-byte ✓ in half: the output is the whole characters
    before the cut and the truncation marker, never a U+FFFD the command did
    not write."""
    done = kigi_in_process("run", "--limit", "3", "--", sys.executable, "-c", "print('a✓😀 hello')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "a\n" + TRUNCATION_MARKER + "\n"
    assert ", truncated," in done.stderr.decode()


def test_check_and_follow_say_the_bytes_of_a_lost_line(tmp_path: Path) -> None:
    """A log missing a middle line (no seq to tell): `check` names the loss the
    totals prove and exits 1; `follow` marks it in the text; a log missing its
    first lines fails `check` as a missing prefix."""
    kind = "bash_output_chunk"
    lines = [
        frame_line("c", kind, {"delta": "abc", "total_bytes": 3}) + b"\n",
        frame_line("c", kind, {"delta": "def", "total_bytes": 6}) + b"\n",
        frame_line("c", kind, {"delta": "ghi", "total_bytes": 9}) + b"\n",
        frame_line("c", kind, {"delta": "j", "total_bytes": 10}) + b"\n",
    ]
    log = tmp_path / "hole.jsonl"
    log.write_bytes(lines[0] + lines[2] + lines[3])
    checked = kigi_in_process("check", str(log))
    report = checked.stdout.decode()
    assert checked.returncode == 1, report
    assert "line 3: lost [c/bash_output_chunk]: total_bytes counts 3 bytes" in report
    assert "1 gap (3 bytes lost, 1 inferred from total_bytes)" in report
    assert report.rstrip().endswith("1 violation")
    followed = kigi_in_process("follow", "--once", str(log))
    assert followed.stdout.decode() == "abcghi[... 3 bytes lost ...]j"
    log.write_bytes(lines[2] + lines[3])
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 1
    assert "1 gap (6 bytes lost, 1 inferred from total_bytes)" in checked.stdout.decode()


def _with_closed(redirect: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`kigi-stream ARGS` started with a standard stream closed (`>&-`, `<&-`, `2>&-`)."""
    return subprocess.run(
        ["bash", "-c", f'"$@" {redirect}', "bash", KIGI_STREAM, *args],
        capture_output=redirect != "2>&-",
        stdout=subprocess.PIPE if redirect == "2>&-" else None,
        timeout=RUN_WAIT_S,
        check=False,
    )


@pytest.mark.parametrize(
    ("redirect", "args", "closed"),
    [
        (">&-", ("run", "--", "echo", "hi"), "output"),
        (">&-", ("run", "--json", "--", "echo", "hi"), "output"),
        (">&-", ("check", __file__), "output"),
        (">&-", ("follow", "--once", __file__), "output"),
        (">&-", ("serve",), "output"),
        ("<&-", ("serve",), "input"),
        ("<&-", ("check", "-"), "input"),
        ("<&-", ("follow", "-"), "input"),
    ],
)
def test_a_closed_standard_stream_is_refused_in_one_line(
    redirect: str, args: tuple[str, ...], closed: str
) -> None:
    """Started with the stdout (or the stdin) it needs closed, a command says so
    in one line and exits 1, before running anything."""
    done = _with_closed(redirect, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode() == f"kigi-stream {args[0]}: standard {closed} is closed\n"


def test_run_with_stderr_or_stdin_closed_still_prints_the_output() -> None:
    """`run` needs neither stdin (the command's is /dev/null) nor stderr (only the
    summary goes there): with either closed it prints the output and exits 0."""
    for redirect in ("2>&-", "<&-"):
        done = _with_closed(redirect, "run", "--", "echo", "hi")
        assert (done.returncode, done.stdout) == (0, b"hi\n"), done.stderr


def test_run_help_gives_each_stopping_signals_exit_status() -> None:
    """`run --help` names the status of each signal that stops kigi-stream, as
    the tests above observe it: 128 + N, one number per signal."""
    shown = " ".join(kigi_in_process("run", "--help").stdout.decode().split())
    expected = {"Ctrl-C": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
    for name, number in expected.items():
        assert f"{128 + number} on {name}" in shown, shown


def test_follow_of_standard_input_marks_the_bytes_missing_at_its_end() -> None:
    """`follow -` reads its input to the end, so the log has ended: bytes a
    stream's last total counts that no frame delivered (here a dropped middle
    line of the last run) are lost, and marked at the end of that stream's text,
    under its label when the log holds several."""
    kind = "bash_output_chunk"
    abc = frame_line("c", kind, {"delta": "abc", "total_bytes": 3}) + b"\n"
    ghi = frame_line("c", kind, {"delta": "ghi", "total_bytes": 9}) + b"\n"
    whole = frame_line("d", kind, {"delta": "xy\n", "total_bytes": 3}) + b"\n"
    followed = kigi_in_process("follow", "-", stdin=abc + ghi)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.decode() == "abcghi[... 3 bytes lost ...]"
    followed = kigi_in_process("follow", "-", stdin=abc + ghi + whole)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.decode() == (
        "==> c/bash_output_chunk <==\nabcghi\n==> d/bash_output_chunk <==\nxy\n"
        "==> c/bash_output_chunk <==\n[... 3 bytes lost ...]"
    )
    complete = kigi_in_process("follow", "-", stdin=abc)
    assert complete.stdout.decode() == "abc"


def test_check_names_the_bytes_missing_at_the_end_of_the_log(tmp_path: Path) -> None:
    """A log whose last run lacks a line (no later total proves it mid-log):
    `check` says on a line of its own what its violation is, the bytes the last
    total counts that no frame delivered, then the summary, and exits 1."""
    kind = "bash_output_chunk"
    log = tmp_path / "short.jsonl"
    log.write_bytes(
        frame_line("c", kind, {"delta": "abc", "total_bytes": 3})
        + b"\n"
        + frame_line("c", kind, {"delta": "ghi", "total_bytes": 9})
        + b"\n"
    )
    checked = kigi_in_process("check", str(log))
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.decode().splitlines() == [
        "end of log: lost [c/bash_output_chunk]: its last total_bytes counts 3 bytes"
        " that no frame delivered",
        "c/bash_output_chunk: 6 bytes in 2 frames (total 9), 3 bytes counted but not delivered",
        "checked 2 records, 1 stream, 0 other messages: 1 violation",
    ]


def test_check_fails_on_a_repeated_frame_without_seq(tmp_path: Path) -> None:
    """A frame repeated on a wire without seq delivers more than total_bytes
    counts: `check` says so and exits 1, and follow's stream is not complete."""
    frames = [("hello wo", 27), ("rld \u00e9", 27), ("rld \u00e9", 27), ("\u2713\U0001f600 ", 27)]
    log = tmp_path / "repeated.jsonl"
    log.write_bytes(
        b"".join(
            frame_line("run-1", "bash_output_chunk", {"delta": d, "total_bytes": t}) + b"\n"
            for d, t in frames
        )
    )
    checked = kigi_in_process("check", str(log))
    report = checked.stdout.decode()
    assert checked.returncode == 1, report
    assert "1 byte delivered past total_bytes (total_overrun)" in report
    assert (
        "end of log: total_overrun [run-1/bash_output_chunk]: its last frames delivered" in report
    )
    assert report.endswith(": 1 violation\n")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_follow_stops_on_sigint_even_when_started_with_it_ignored(tmp_path: Path) -> None:
    """A follow started as a background job of a non-interactive shell (SIGINT
    ignored) still stops cleanly on SIGINT, as run and serve do."""
    log = tmp_path / "live.jsonl"
    log.write_bytes(b"")
    proc = subprocess.Popen(
        [*CLI, "follow", "--interval", "0.05", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ignore_sigint,  # the test sets a disposition only
    )
    try:
        log.write_bytes(_written("live\n"))
        assert proc.stdout is not None
        assert proc.stdout.read(5) == b"live\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("follow ignored SIGINT")
    finally:
        reap(proc, drain=True)
    assert proc.returncode == 0
    assert "stopped at offset" in err.decode()


def test_run_passes_an_empty_argument_through() -> None:
    """`run -- printf '[%s]' '' "a b"` runs the command with its empty argument
    (and the others whole)."""
    done = kigi_in_process("run", "--", "printf", "[%s]", "", "a b", "$HOME")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"[][a b][$HOME]"


#: A producer that writes its own wire with `OutputStream.drain_lines`: a text of
#: quotes, backslashes and 2-, 3- and 4-byte characters, written in pieces that
#: split characters, drained every `every` writes, then `finish_lines`. Its
#: arguments: cap, tail capacity, limit (0: none), every.
PRODUCE = """
from kigi_tool_protocol import StreamingSpec
from kigi_tool_runtime import OutputStream
def produce(source, cap, capacity, limit, every, write):
    spec = StreamingSpec(subkind="bash_output_chunk", max_delta_bytes=cap)
    stream = OutputStream(spec, capacity=capacity, limit=limit or None)
    seq = at = writes = 0
    step = 1
    while at < len(source):
        stream.write(source[at : at + step])
        at, step, writes = at + step, step * 7 % 1013 + 1, writes + 1
        if writes % every == 0:
            data, frames = stream.drain_lines('call "1" é\\\\', seq=seq, session_id="s%d")
            write(data)
            seq += frames
    write(stream.finish_lines('call "1" é\\\\', seq=seq, session_id="s%d").data)
"""

#: :data:`PRODUCE` as a real process: its stdin the source, its stdout the wire.
LINES_PRODUCER = (
    PRODUCE
    + """
import sys
args = (int(arg) for arg in sys.argv[1:])
produce(memoryview(sys.stdin.buffer.read()), *args, sys.stdout.buffer.write)
"""
)

LINES_SOURCE = ('grüße € 😀 "quoted" back\\slash %d\n' * 3000).encode()


def _produced(producer_args: list[str]) -> bytes:
    """What :data:`PRODUCE` writes for ``producer_args``, run in this process."""
    namespace: dict[str, Any] = {}
    exec(PRODUCE, namespace)  # the producer above, shared with the real one
    written: list[bytes] = []
    args = (int(arg) for arg in producer_args)
    namespace["produce"](memoryview(LINES_SOURCE), *args, written.append)
    return b"".join(written)


def _consumed(
    real: bool, producer_args: list[str], *consumer: str
) -> subprocess.CompletedProcess[bytes]:
    """The producer's wire read by `kigi-stream CONSUMER...`: piped between two
    real processes, or (``real`` false) both run in this process."""
    if real:
        return _piped(producer_args, *consumer)
    return kigi_in_process(*consumer, stdin=_produced(producer_args))


def _piped(producer_args: list[str], *consumer: str) -> subprocess.CompletedProcess[bytes]:
    """The producer's stdout piped into `kigi-stream CONSUMER...`, both real processes."""
    producer = subprocess.Popen(
        [sys.executable, "-c", LINES_PRODUCER, *producer_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert producer.stdin is not None
    try:
        with producer.stdin:
            producer.stdin.write(LINES_SOURCE)
        done = subprocess.run(
            [KIGI_STREAM, *consumer],
            stdin=producer.stdout,
            capture_output=True,
            timeout=RUN_WAIT_S,
            check=False,
        )
    finally:
        if producer.stdout is not None:
            producer.stdout.close()
        assert producer.wait(RUN_WAIT_S) == 0
    return done


@pytest.mark.parametrize("cap", ["0", "5", "16384"])
def test_a_drain_lines_producer_piped_into_check_and_follow_is_whole(cap: str) -> None:
    """A producer writing `drain_lines` output, piped into `check -` and
    `follow --once -`: check says ok with no gaps, follow prints the source text
    exactly. At cap 5 both are real processes joined by a pipe; the other caps
    differ only in the frames' sizes and run in this process."""
    args = [cap, str(1 << 20), "0", "3"]
    real = cap == "5"
    checked = _consumed(real, args, "check", "-")
    assert checked.returncode == 0, checked.stderr
    report = checked.stdout.decode()
    assert f"{len(LINES_SOURCE)} bytes in " in report
    assert f"(total {len(LINES_SOURCE)}), no gaps" in report
    assert report.endswith("1 stream, 0 other messages: ok\n")
    if cap == "0":  # one character a frame
        assert f"in {len(LINES_SOURCE.decode())} frames" in report
    followed = _consumed(real, args, "follow", "--once", "-")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == LINES_SOURCE


def test_a_drain_lines_producer_with_gaps_and_a_limit_checks_ok() -> None:
    """The same producer with a small tail drained rarely and a hard limit: check
    says ok, counts every byte up to the limit as delivered or lost in a gap, and
    says the stream was truncated. (Run in this process: the real pipe is
    test_a_drain_lines_producer_piped_into_check_and_follow_is_whole[5].)"""
    limit = len(LINES_SOURCE) // 2
    checked = _consumed(False, ["5", "64", str(limit), "40"], "check", "-")
    assert checked.returncode == 0, checked.stderr
    report = checked.stdout.decode()
    assert re.search(rf"\(total {limit}\), \d+ gaps \(\d+(-\d+)? bytes lost\)", report), report
    assert "truncated at the output limit" in report
    assert report.endswith("1 stream, 0 other messages: ok\n")


def test_follow_from_an_offset_inside_a_line_says_it_must_be_a_line_start(
    tmp_path: Path,
) -> None:
    """An offset inside a line is refused with why (exit 2), not read as a log
    of undecodable records; one at a line's start still resumes there."""
    log = tmp_path / "frames.jsonl"
    frames = _written("one\n", "two\n")
    log.write_bytes(frames)
    inside = frames.index(b"\n") - 5
    for once in (["--once"], []):
        done = kigi_in_process("follow", *once, "--from-offset", str(inside), str(log))
        err = done.stderr.decode()
        assert done.returncode == EXIT_USAGE, err
        assert f"--from-offset {inside} is inside a line" in err
        assert "line's start" in err
        assert "undecodable" not in err
        assert done.stdout == b""
    at_a_start = kigi_in_process(
        "follow", "--once", "--from-offset", str(frames.index(b"\n") + 1), str(log)
    )
    assert (at_a_start.returncode, at_a_start.stdout) == (0, b"two\n")


def test_follow_on_a_terminal_says_what_ends_it(tmp_path: Path) -> None:
    """A finished `run --json` log says nothing of its end, so a live follow of
    it goes on: on a terminal it says so as it starts (and what stops it);
    SIGTERM then stops it with the offset. Piped, stderr gets no such line."""
    log = tmp_path / "done.jsonl"
    frames = _written("finished\n")
    log.write_bytes(frames)
    main_fd, child_fd = pty.openpty()
    try:
        with subprocess.Popen(
            [KIGI_STREAM, "follow", "--interval", "0.05", str(log)],
            stdout=subprocess.PIPE,
            stderr=child_fd,
        ) as proc:
            os.close(child_fd)
            try:
                assert proc.stdout is not None
                assert proc.stdout.read(9) == b"finished\n"
                said = b""
                deadline = time.monotonic() + RUN_WAIT_S
                while b"--once reads to its end" not in said:
                    assert time.monotonic() < deadline, said
                    ready, _, _ = select.select([main_fd], [], [], 1.0)
                    if ready:
                        said += os.read(main_fd, 4096)
                assert proc.poll() is None  # a finished log is followed on
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=RUN_WAIT_S) == 0
            finally:
                reap(proc)
    finally:
        os.close(main_fd)
    text = said.decode().replace("\r\n", "\n")
    assert "until Ctrl-C, SIGTERM or SIGHUP" in text
    assert "does not say when its run has ended" in text
    piped = subprocess.Popen(
        [KIGI_STREAM, "follow", "--interval", "0.05", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert piped.stdout is not None
        assert piped.stdout.read(9) == b"finished\n"
        piped.send_signal(signal.SIGTERM)
        _, err = piped.communicate(timeout=RUN_WAIT_S)
    finally:
        reap(piped, drain=True)
    assert b"does not say" not in err
    assert f"stopped at offset {len(frames)}".encode() in err
