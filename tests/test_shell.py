"""Tests for the shell tool, with real child processes (``sys.executable -c``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import signal
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from processes import group_running

from kigi_tool_protocol import CustomProgress, PartialResultPayload, ToolProgress
from kigi_tool_runtime import (
    CommandNotStarted,
    ShellArgs,
    ShellOutcome,
    ShellTool,
    ToolContext,
    ToolError,
    ToolErrorKind,
    ToolResult,
    run_tool,
)
from kigi_tool_runtime._producer._output import LIMIT_MARKER, OMISSION_MARKER
from kigi_tool_runtime._tools._shell import (
    CHILD_PIPE_BYTES,
    DEFAULT_COMMAND_TIMEOUT_MS,
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_TAIL_CAPACITY,
    MAX_COMMAND_TIMEOUT_MS,
    MAX_OUTPUT_LIMIT,
    MIN_OUTPUT_LIMIT,
    MIN_READ_CHUNK_BYTES,
    READ_CHUNK_BYTES,
    SHELL_SPEC,
    WAKEUP_READ_BYTES,
)
from kigi_tool_runtime.testing import Collected, collect_async

PY = sys.executable
CAP = 16 * 1024
#: Every wait in these tests is bounded by this, far above what any of them needs.
PATIENCE_S = 60.0


def shell_outcome(got: Collected) -> ShellOutcome:
    value = got.result
    assert isinstance(value, ShellOutcome), value
    return value


def payload(item: object) -> PartialResultPayload:
    assert isinstance(item, CustomProgress)
    assert item.subkind == "bash_output_chunk"
    assert isinstance(item.payload, PartialResultPayload)
    return item.payload


async def call_shell(
    args: dict[str, Any],
    tool: ShellTool | None = None,
    *,
    wants_progress: bool = True,
    on_frame: Callable[[PartialResultPayload], Awaitable[None]] | None = None,
    keep: bool = True,
) -> Collected:
    """The kit's ``collect_async`` on the shell tool, bounded by PATIENCE_S: every
    frame must be a ``bash_output_chunk`` payload, and nothing may follow the
    terminal."""

    async def check(item: ToolProgress) -> None:
        chunk = payload(item)
        if on_frame is not None:
            await on_frame(chunk)

    async with asyncio.timeout(PATIENCE_S):
        got = await collect_async(
            tool or ShellTool(), args, wants_progress=wants_progress, on_frame=check, keep=keep
        )
    assert got.dropped_after_terminal == 0, "nothing may follow the terminal"
    return got


def run(args: dict[str, Any], tool: ShellTool | None = None, **kw: Any) -> Collected:
    return asyncio.run(call_shell(args, tool, **kw))


def py(script: str) -> dict[str, Any]:
    return {"command": [PY, "-c", script]}


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def assert_group_gone(pgid: int) -> None:
    """Nothing of the group runs (orphans left to init may still be zombies)
    and its leader, the tool's child, was reaped."""
    assert not group_running(pgid)
    assert not Path(f"/proc/{pgid}").exists(), "the child was not reaped (zombie)"


# -- output, byte for byte -----------------------------------------------------------

SPLIT_SCRIPT = """
import os, sys, time
for part in sys.argv[1:]:
    first, _, second = part.partition(",")
    os.write(1, bytes.fromhex(first))
    time.sleep(float(os.environ["PAUSE"]))
    os.write(1, bytes.fromhex(second))
"""


def test_characters_split_across_ticks_are_reassembled_whole() -> None:
    """2-, 3- and 4-byte characters whose bytes arrive in two writes with more than a
    tick between them come out whole: no U+FFFD, equal to the source."""
    halves: list[tuple[bytes, bytes]] = []
    for char in ["é", "€", "😀"]:
        data = char.encode()
        halves += [(b"<" + data[:cut], data[cut:] + b">") for cut in range(1, len(data))]
    source = b"".join(a + b for a, b in halves).decode()
    args = {
        "command": [PY, "-c", SPLIT_SCRIPT, *(f"{a.hex()},{b.hex()}" for a, b in halves)],
        "env": {"PAUSE": "0.05"},
    }
    got = run(args, ShellTool(tick=0.02))
    assert shell_outcome(got).exit_code == 0
    assert "\ufffd" not in got.text
    assert got.text == source
    assert shell_outcome(got).output == source
    assert not any(p.gap or p.truncated for p in got.payloads)
    assert got.payloads[-1].total_bytes == len(source.encode())


def test_stderr_flood_keeps_arrival_order_with_stdout() -> None:
    """stdout and stderr share one pipe: a stderr flood interleaved with stdout lines
    arrives exactly in the order written."""
    script = (
        "import os\n"
        "for i in range(3000):\n"
        "    os.write(1, b'out %d\\n' % i)\n"
        "    os.write(2, b'err %d ' % i + b'e' * 1000 + b'\\n')\n"
    )
    expected = "".join(f"out {i}\nerr {i} " + "e" * 1000 + "\n" for i in range(3000))
    got = run(py(script))
    assert shell_outcome(got).exit_code == 0
    assert got.text == expected
    assert shell_outcome(got).total_bytes == len(expected)


def test_binary_output_decodes_like_python_replace() -> None:
    """Arbitrary bytes (every byte value, truncated and invalid sequences) reassemble
    to exactly ``source.decode('utf-8', 'replace')``."""
    tricky = b"\xf0\x9f\x98" + b"ok\xc3" + b"\xed\xa0\x80" + b"\xe2\x82"
    source = bytes(range(256)) * 300 + tricky
    script = f"import sys; sys.stdout.buffer.write(bytes(range(256)) * 300 + {tricky!r})"
    got = run(py(script))
    assert got.text == source.decode("utf-8", "replace")
    assert shell_outcome(got).total_bytes == len(source)
    assert shell_outcome(got).exit_code == 0


def test_a_silent_command_streams_nothing_and_succeeds() -> None:
    """A command that prints nothing yields no progress and an empty output."""
    got = run({"command": "true"})
    assert got.payloads == []
    assert shell_outcome(got) == ShellOutcome(
        exit_code=0,
        signal=None,
        timed_out=False,
        duration_ms=shell_outcome(got).duration_ms,
        total_bytes=0,
        truncated=False,
        omitted_bytes=0,
        output="",
    )


def test_a_non_zero_exit_is_a_result_with_its_code() -> None:
    """A failing command is a result (not an error) carrying its exit code and output."""
    got = run({"command": "echo failing; exit 7"})
    assert shell_outcome(got).exit_code == 7
    assert shell_outcome(got).signal is None
    assert shell_outcome(got).output == "failing\n"


def test_a_command_killed_by_a_signal_reports_the_signal() -> None:
    """A child killed by a signal has no exit code; the outcome names the signal."""
    got = run(py("import os, signal; print('bye', flush=True); os.kill(os.getpid(), 9)"))
    assert shell_outcome(got).exit_code is None
    assert shell_outcome(got).signal == "SIGKILL"
    assert got.text == "bye\n"


def test_cwd_and_env_reach_the_child(tmp_path: Path) -> None:
    """``cwd`` sets the working directory; ``env`` adds to the inherited environment."""
    script = "import os; print(os.getcwd()); print(os.environ['KIGI_X'], 'PATH' in os.environ)"
    got = run({**py(script), "cwd": str(tmp_path), "env": {"KIGI_X": "yes"}})
    assert shell_outcome(got).output == f"{tmp_path}\nyes True\n"


def test_a_shell_string_runs_through_the_shell() -> None:
    """A string command is a shell command line (pipes and redirections work)."""
    got = run({"command": "printf 'a\\nb\\n' | tr a-z A-Z; echo oops 1>&2"})
    assert shell_outcome(got).output == "A\nB\noops\n"


def test_a_missing_program_is_an_execution_error() -> None:
    """A program that does not exist ends in an ``execution`` error naming it, and
    leaks no file descriptor."""

    async def main() -> tuple[Collected, set[str], set[str]]:
        before = open_fds()
        got = await call_shell({"command": ["/nonexistent/kigi-prog", "x"]})
        return got, before, open_fds()

    got, before, after = asyncio.run(main())
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.EXECUTION
    assert "cannot start '/nonexistent/kigi-prog'" in got.terminal.message
    assert before == after


def test_a_missing_working_directory_is_an_execution_error(tmp_path: Path) -> None:
    """A ``cwd`` that does not exist ends in an ``execution`` error naming it."""
    missing = tmp_path / "nope"
    got = run({"command": "true", "cwd": str(missing)})
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.EXECUTION
    assert str(missing) in got.terminal.message


def test_a_command_that_cannot_start_is_told_apart_by_type(tmp_path: Path) -> None:
    """A program or working directory the system refuses ends in CommandNotStarted
    (so the CLI's 127 needs no message text); a command that starts and fails,
    or a bad argument, does not."""
    for args in (
        {"command": ["/nonexistent/kigi-prog"]},
        {"command": "true", "cwd": str(tmp_path / "nope")},
    ):
        assert isinstance(run(args).terminal, CommandNotStarted), args
    started = run({"command": "exit 3"}).terminal
    assert not isinstance(started, CommandNotStarted)
    refused = run({"command": ["a\0b"]}).terminal
    assert isinstance(refused, ToolError)
    assert not isinstance(refused, CommandNotStarted)


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"command": ""}, "$.command"),
        ({"command": []}, "$.command"),
        ({"command": ["ls", ""]}, "$.command[1]"),
        ({"command": "true", "timeout_ms": 0}, "$.timeout_ms"),
        ({"command": "true", "timeout_ms": MAX_COMMAND_TIMEOUT_MS + 1}, "$.timeout_ms"),
        ({"command": "true", "output_limit": MIN_OUTPUT_LIMIT - 1}, "$.output_limit"),
        ({"command": "true", "output_limit": MAX_OUTPUT_LIMIT + 1}, "$.output_limit"),
        ({"command": "true", "env": {"A": 1}}, "$.env[...]"),
    ],
)
def test_bad_arguments_name_the_field(args: dict[str, Any], path: str) -> None:
    """Arguments outside the bounds are an ``invalid_params`` error naming the field."""
    got = run(args)
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.INVALID_PARAMS
    assert f"at `{path}`" in got.terminal.message
    assert got.terminal.details["path"] == path


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"command": "echo \x00"}, "embedded null byte"),
        ({"command": "true", "env": {"A=B": "1"}}, "illegal environment variable name"),
    ],
)
def test_arguments_no_process_can_take_are_invalid_params(
    args: dict[str, Any], reason: str
) -> None:
    """A NUL byte in the command or a ``=`` in a variable name is ``invalid_params``,
    and leaks no file descriptor."""

    async def main() -> tuple[Collected, set[str], set[str]]:
        before = open_fds()
        got = await call_shell(args)
        return got, before, open_fds()

    got, before, after = asyncio.run(main())
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.INVALID_PARAMS
    assert reason in got.terminal.message
    assert before == after


def test_unknown_argument_fields_are_rejected() -> None:
    """An argument the tool does not know is an error, not silently ignored."""
    got = run({"command": "true", "comand": "rm -rf /"})
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.INVALID_PARAMS
    assert "unknown field `comand`" in got.terminal.message


def test_tool_bounds_are_checked_at_construction() -> None:
    """Nonsense tuning is refused when the tool is made, with the reason."""
    with pytest.raises(ValueError, match="tick must be > 0"):
        ShellTool(tick=0)
    with pytest.raises(ValueError, match="grace must be > 0"):
        ShellTool(grace=-1)
    with pytest.raises(ValueError, match="exit_drain must be > 0 seconds, got nan"):
        ShellTool(exit_drain=float("nan"))
    with pytest.raises(ValueError, match="below one frame"):
        ShellTool(tail_capacity=CAP - 1)
    with pytest.raises(ValueError, match=f"read_chunk 4095 is below {MIN_READ_CHUNK_BYTES} bytes"):
        ShellTool(read_chunk=MIN_READ_CHUNK_BYTES - 1)


def test_the_shell_tool_declares_its_stream() -> None:
    """The tool is ``bash``, streams ``bash_output_chunk`` at 16 KiB, supports cancel."""
    tool = ShellTool()
    assert tool.id == "bash"
    assert tool.capabilities.streaming == SHELL_SPEC
    assert SHELL_SPEC.subkind == "bash_output_chunk"
    assert SHELL_SPEC.max_delta_bytes == CAP
    assert tool.capabilities.supports_cancel
    assert tool.capabilities.timeout_ms is not None
    assert tool.capabilities.timeout_ms > MAX_COMMAND_TIMEOUT_MS
    schema = tool.input_schema()
    assert schema["$defs"]["ShellArgs"]["required"] == ["command"]


# -- the model's output: head, marker, tail ------------------------------------------


def test_long_output_keeps_head_and_tail_around_a_marker() -> None:
    """Over ``output_limit`` the result keeps the head and the tail around a marker
    saying how much is left out; the marker never enters the stream."""
    lines = "".join(f"line {i:05d}\n" for i in range(2000))
    script = f"import sys; sys.stdout.write({lines!r})"
    got = run({**py(script), "output_limit": MIN_OUTPUT_LIMIT})
    outcome = shell_outcome(got)
    assert outcome.truncated
    assert outcome.total_bytes == len(lines)
    head, tail = outcome.output.split(OMISSION_MARKER.format(omitted=outcome.omitted_bytes))
    assert lines.startswith(head)
    assert lines.endswith(tail)
    assert len(head) + len(tail) + outcome.omitted_bytes == len(lines)
    assert len(head) + len(tail) <= MIN_OUTPUT_LIMIT
    assert got.text == lines
    assert "omitted" not in got.text


def test_output_within_the_limit_is_whole() -> None:
    """Output up to ``output_limit`` is returned whole, without a marker."""
    text = "x" * 1000
    got = run({**py(f"print({text!r}, end='')"), "output_limit": 1000})
    assert shell_outcome(got).output == text
    assert not shell_outcome(got).truncated
    assert shell_outcome(got).omitted_bytes == 0


def test_without_progress_the_full_result_still_arrives() -> None:
    """``wants_progress=False``: no progress at all, and the same full result."""
    script = "import sys; sys.stdout.write('abc' * 100000)"
    got = run(py(script), wants_progress=False)
    assert got.payloads == []
    assert shell_outcome(got).total_bytes == 300000
    assert shell_outcome(got).truncated
    assert shell_outcome(got).output.startswith("abc")
    # The default limit: its first half and its last half of the output are kept.
    assert shell_outcome(got).omitted_bytes == 300000 - DEFAULT_OUTPUT_LIMIT


# -- volume: every byte accounted for, memory flat ------------------------------------

RECORD = 4096
FILLER = b"x" * (RECORD - 17) + b"\n"
FLOOD_SCRIPT = """
import os, sys
records = int(sys.argv[1])
filler = b"x" * 4079 + b"\\n"
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
for start in range(0, records, 16):
    stop = min(start + 16, records)
    block = b"".join(b"%015d\\n" % (k * 4096) + filler for k in range(start, stop))
    os.write(1, block)
"""
HEADER = re.compile(r"(\d{15})\n")


def expected_bytes(offset: int, size: int) -> str:
    """The flood's bytes ``[offset, offset + size)``."""
    first, last = offset // RECORD, (offset + size - 1) // RECORD
    block = b"".join(b"%015d\n" % (k * RECORD) + FILLER for k in range(first, last + 1))
    start = offset - first * RECORD
    return block[start : start + size].decode()


class Accounting:
    """Checks each delta against the flood as it arrives and counts every byte,
    keeping nothing: surfaced bytes, skipped bytes (found two ways) and gaps."""

    def __init__(self) -> None:
        self.position = 0  # source offset the next delta continues from
        self.surfaced = 0
        self.skipped = 0
        self.gaps = 0
        self.group_total = 0  # frames of one drain share a total_bytes
        self.group_bytes = 0
        self.group_gap_start = -1
        self.skipped_by_wire = 0
        self.wire_position = 0

    def absorb(self, frame: PartialResultPayload) -> None:
        delta = frame.delta
        assert len(delta) <= CAP
        if frame.total_bytes != self.group_total:
            self._close_group()
            self.group_total, self.group_bytes, self.group_gap_start = frame.total_bytes, 0, -1
        if frame.gap:
            self.gaps += 1
            match = HEADER.search(delta)
            assert match is not None, "a gap delta must hold a whole record header"
            start = int(match[1]) - match.start()
            assert start > self.position
            self.skipped += start - self.position
            self.position = start
            self.group_gap_start = self.group_bytes
        assert delta == expected_bytes(self.position, len(delta))
        self.position += len(delta)
        self.surfaced += len(delta)
        self.group_bytes += len(delta)

    def _close_group(self) -> None:
        # ASCII source: a drain ends caught up, so its frames end at its total;
        # a gap's size is then what the wire alone says is missing before it.
        if self.group_gap_start >= 0:
            gap_start = self.group_total - (self.group_bytes - self.group_gap_start)
            self.skipped_by_wire += gap_start - self.wire_position
        self.wire_position = self.group_total

    def finish(self) -> None:
        self._close_group()


def flood_args(records: int, *extra: str) -> dict[str, Any]:
    return {"command": [PY, "-c", FLOOD_SCRIPT, str(records), *extra]}


@pytest.mark.slow
def test_a_100_mb_flood_accounts_for_every_byte_in_flat_memory() -> None:
    """100 MB of output: every byte is a verified delta or inside a gap whose size
    the frames give; this process's memory stays flat (far below the output)."""
    records = 100 * 1000 * 1000 // RECORD + 1
    total = records * RECORD
    accounting = Accounting()

    async def on_frame(frame: PartialResultPayload) -> None:
        accounting.absorb(frame)

    async def main() -> tuple[Collected, int]:
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            got = await call_shell(flood_args(records), on_frame=on_frame, keep=False)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return got, peak - baseline

    got, growth = asyncio.run(main())
    accounting.finish()
    assert shell_outcome(got).exit_code == 0
    assert shell_outcome(got).total_bytes == total
    assert accounting.position == total
    assert accounting.surfaced + accounting.skipped == total
    assert accounting.skipped == accounting.skipped_by_wire
    # The tail (twice its capacity at most), the channel's frames and the head:
    # a few MiB, whatever the output's size.
    assert growth < 8 * DEFAULT_TAIL_CAPACITY, f"memory grew by {growth} bytes"


@pytest.mark.slow
def test_a_stalled_consumer_gets_a_gap_that_says_how_much(tmp_path: Path) -> None:
    """A consumer that stalls while the child floods loses the middle: the stream
    says so with gap frames, and the bytes still add up exactly."""
    records = 4096  # 16 MiB: far more than the tail and the channel hold
    pid_file = tmp_path / "pid"
    accounting = Accounting()
    stalled: list[bool] = []

    async def on_frame(frame: PartialResultPayload) -> None:
        accounting.absorb(frame)
        if stalled:
            return
        stalled.append(True)
        # Stall until the child has written everything and exited: by then the
        # tail has overflowed whatever the machine's speed.
        async with asyncio.timeout(PATIENCE_S):
            while not pid_file.exists() or not pid_file.read_text():
                await asyncio.sleep(0.01)
            pid = int(pid_file.read_text())
            while Path(f"/proc/{pid}").exists():
                await asyncio.sleep(0.01)

    tool = ShellTool(tail_capacity=4 * CAP)
    got = run(flood_args(records, str(pid_file)), tool, on_frame=on_frame, keep=False)
    accounting.finish()
    total = records * RECORD
    assert shell_outcome(got).total_bytes == total
    assert accounting.gaps >= 1
    assert accounting.skipped > 0
    assert accounting.position == total
    assert accounting.surfaced + accounting.skipped == total
    assert accounting.skipped == accounting.skipped_by_wire


def _pipe_wait(pid: int) -> str:
    """Whether process ``pid`` sleeps in a write to a full pipe, from Linux's
    ``wchan``: ``"blocked"``, ``"no"`` (it runs, or sleeps elsewhere), or
    ``"hidden"`` (it sleeps and the kernel hides where: ``wchan`` reads 0,
    which it also reads while the process runs)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return "no"
    if wchan.endswith("pipe_write"):
        return "blocked"
    return "hidden" if state == "S" and wchan == "0" else "no"


async def _stall_until_the_child_blocks(pid_file: Path) -> None:
    """Wait until the child whose pid ``pid_file`` holds is blocked on its full
    pipe (where the kernel hides that, a second's stall stands in for the
    proof)."""
    async with asyncio.timeout(PATIENCE_S):
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.01)
        pid = int(pid_file.read_text())
        while (seen := _pipe_wait(pid)) == "no":
            await asyncio.sleep(0.01)
        if seen == "hidden":
            await asyncio.sleep(1.0)


def test_waiting_for_the_reader_a_stalled_consumer_loses_nothing(tmp_path: Path) -> None:
    """``wait_for_reader``: a consumer that stalls until the child is blocked on
    its full pipe (the reading paused: the tail was full of bytes not yet
    surfaced), twice, gets every byte as a delta, no gap, in flat memory."""
    records = 2048  # 8 MiB through a 64 KiB tail
    pid_file = tmp_path / "pid"
    accounting = Accounting()
    frames: list[int] = []

    async def on_frame(frame: PartialResultPayload) -> None:
        accounting.absorb(frame)
        frames.append(len(frame.delta))
        if len(frames) in (1, 200):
            await _stall_until_the_child_blocks(pid_file)

    async def main() -> tuple[Collected, int]:
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            tool = ShellTool(tail_capacity=4 * CAP, wait_for_reader=True)
            args = flood_args(records, str(pid_file))
            got = await call_shell(args, tool, on_frame=on_frame, keep=False)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return got, peak - baseline

    got, growth = asyncio.run(main())
    accounting.finish()
    total = records * RECORD
    assert len(frames) > 200
    assert shell_outcome(got).total_bytes == total
    assert accounting.gaps == 0
    assert accounting.surfaced == accounting.position == total
    # The tail, the channel's frames and the head: far below the output.
    assert growth < total // 2, f"memory grew by {growth} bytes"


def test_waiting_for_the_reader_without_progress_still_reads_everything() -> None:
    """Without progress nothing drains, so nothing is waited for: the command
    runs to its end and the result counts all of its output."""
    tool = ShellTool(tail_capacity=4 * CAP, wait_for_reader=True)
    got = run(flood_args(512), tool, wants_progress=False)
    assert shell_outcome(got).exit_code == 0
    assert shell_outcome(got).total_bytes == 512 * RECORD


#: Floods until SIGTERM; then writes far more than a pipe holds, cleans up
#: (writes the file its argument names) and exits 3.
FLOOD_THEN_LAST_WORDS = """
import os, pathlib, signal, sys
def stop(*_):
    sys.stdout.buffer.write(b"s" * 2_000_000)
    sys.stdout.flush()
    pathlib.Path(sys.argv[1]).write_text("cleaned up")
    os._exit(3)
signal.signal(signal.SIGTERM, stop)
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
while True:
    sys.stdout.buffer.write(b"x" * 65535 + b"\\n")
"""


def test_waiting_for_the_reader_a_stopped_command_is_read_as_it_stops(tmp_path: Path) -> None:
    """A call cancelled while its reading waits on a stalled consumer: the
    pipe is read again during the grace, so a command that writes 2 MB as it
    stops is not blocked on it, and finishes its cleanup before the SIGKILL."""
    done, pid_file = tmp_path / "cleaned", tmp_path / "pid"
    ctx = ToolContext("call-stop")

    async def main() -> ToolResult | ToolError | None:
        terminal: ToolResult | ToolError | None = None
        tool = ShellTool(tail_capacity=4 * CAP, grace=PATIENCE_S / 4, wait_for_reader=True)
        args = {"command": [PY, "-c", FLOOD_THEN_LAST_WORDS, str(done), str(pid_file)]}
        async with asyncio.timeout(PATIENCE_S):
            async for item in run_tool(tool, args, ctx=ctx):
                if isinstance(item, ToolResult | ToolError):
                    terminal = item
                elif not ctx.cancelled:
                    await _stall_until_the_child_blocks(pid_file)
                    ctx.cancel()
        return terminal

    terminal = asyncio.run(main())
    assert isinstance(terminal, ToolError)
    assert terminal.kind == ToolErrorKind.CANCELLED
    assert done.read_text() == "cleaned up"
    assert_group_gone(int(pid_file.read_text()))


# -- stopping: timeout, cancellation, stray grandchildren -----------------------------

TICKER = """
import os, signal, sys, time
if len(sys.argv) > 1:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(os.getpid(), os.getpgid(0), flush=True)
i = 0
while True:
    print("tick", i, flush=True)
    i += 1
    time.sleep(0.01)
"""


#: The same ticker in ``sh`` (which starts in a millisecond or two, where
#: Python takes tens): its pid and group from ``/proc``, then a tick every
#: 10 ms; with ``ignore-term`` it (and the ``sleep`` it runs) ignores SIGTERM
#: before saying its pid.
SH_TICKER = (
    'if [ "$1" = ignore-term ]; then trap "" TERM; fi\n'
    "read -r pid comm state ppid pgrp rest < /proc/$$/stat\n"
    'echo "$pid $pgrp"\n'
    "i=0\n"
    'while :; do echo "tick $i"; i=$((i + 1)); sleep 0.01; done\n'
)


def sh(script: str, *args: str) -> dict[str, Any]:
    return {"command": ["sh", "-c", script, "sh", *args]}


#: Deadline of the stopping tests, whose command is ``sh`` (SH_TICKER): long
#: enough that the shell has printed its pid (and set its SIGTERM trap) before
#: it fires, a hundred times what that takes on an idle machine.
DEADLINE_MS = 300


def pid_line(text: str) -> int:
    pid, pgid = map(int, text.splitlines()[0].split())
    assert pid == pgid, "the child must lead its own process group"
    return pid


async def stop_after_output(
    args: dict[str, Any],
    tool: ShellTool,
    stop: Callable[[ToolContext, asyncio.Task[Any]], None] | None = None,
    **run_kw: Any,
) -> tuple[list[PartialResultPayload], ToolResult | ToolError | None, set[str], set[str]]:
    """Run ``args``; once two lines are out, call ``stop`` (if any). Returns the
    payloads, the terminal, and the open fds before and after."""
    before = open_fds()
    ctx = ToolContext("call-stop")
    payloads: list[PartialResultPayload] = []
    terminal: list[ToolResult | ToolError] = []
    stopped: list[bool] = []

    async def consume() -> None:
        async for item in run_tool(tool, args, ctx=ctx, **run_kw):
            if isinstance(item, (ToolResult, ToolError)):
                terminal.append(item)
            else:
                payloads.append(payload(item))
                lines = "".join(p.delta for p in payloads).count("\n")
                if stop is not None and not stopped and lines >= 2:
                    stopped.append(True)
                    stop(ctx, task)

    task = asyncio.get_running_loop().create_task(consume())
    async with asyncio.timeout(PATIENCE_S):
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return payloads, (terminal[0] if terminal else None), before, open_fds()


def test_a_command_timeout_kills_the_group_and_keeps_the_output() -> None:
    """At ``timeout_ms`` the group gets SIGTERM; the result says timed out, keeps the
    output so far, and no process, zombie or descriptor is left."""
    payloads, terminal, before, after = asyncio.run(
        stop_after_output({**sh(SH_TICKER), "timeout_ms": DEADLINE_MS}, ShellTool())
    )
    assert payloads, "the output streamed before the deadline"
    assert isinstance(terminal, ToolResult)
    outcome = terminal.value
    assert isinstance(outcome, ShellOutcome)
    assert outcome.timed_out
    assert outcome.signal == "SIGTERM"
    assert outcome.exit_code is None
    assert "tick 0\n" in outcome.output
    assert_group_gone(pid_line(outcome.output))
    assert before == after


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    """A child that ignores SIGTERM is SIGKILLed once the grace period is over."""
    args = {**sh(SH_TICKER, "ignore-term"), "timeout_ms": DEADLINE_MS}
    _, terminal, before, after = asyncio.run(stop_after_output(args, ShellTool(grace=0.3)))
    assert isinstance(terminal, ToolResult)
    outcome = terminal.value
    assert isinstance(outcome, ShellOutcome)
    assert outcome.timed_out
    assert outcome.signal == "SIGKILL"
    assert_group_gone(pid_line(outcome.output))
    assert before == after


def test_the_call_deadline_is_a_timeout_error_and_kills_the_group() -> None:
    """The runner's deadline (shorter than the command's) ends the call with a
    ``timeout`` error; the group is gone, nothing leaks."""
    payloads, terminal, before, after = asyncio.run(
        stop_after_output(sh(SH_TICKER), ShellTool(), timeout_ms=DEADLINE_MS)
    )
    assert isinstance(terminal, ToolError)
    assert terminal.kind is ToolErrorKind.TIMEOUT
    assert terminal.tool_id == "bash"
    assert_group_gone(pid_line("".join(p.delta for p in payloads)))
    assert before == after


def test_ctx_cancel_mid_stream_kills_the_group() -> None:
    """``ctx.cancel()`` mid-stream ends the call with a ``cancelled`` error after the
    group is gone: no process, zombie or descriptor is left."""

    def stop(ctx: ToolContext, task: asyncio.Task[Any]) -> None:
        ctx.cancel()

    payloads, terminal, before, after = asyncio.run(
        stop_after_output(py(TICKER), ShellTool(), stop)
    )
    assert isinstance(terminal, ToolError)
    assert terminal.kind is ToolErrorKind.CANCELLED
    assert_group_gone(pid_line("".join(p.delta for p in payloads)))
    assert before == after


def test_cancelling_the_calls_task_kills_the_group() -> None:
    """Cancelling the task that iterates the call propagates ``CancelledError`` and
    still stops the group: no process, zombie or descriptor is left."""

    def stop(ctx: ToolContext, task: asyncio.Task[Any]) -> None:
        task.cancel()

    payloads, terminal, before, after = asyncio.run(
        stop_after_output(py(TICKER), ShellTool(), stop)
    )
    assert terminal is None
    assert_group_gone(pid_line("".join(p.delta for p in payloads)))
    assert before == after


#: A child that, on SIGTERM, says so on its output, then cleans up (writes the
#: file named by its argument) and exits 3: a well-behaved command.
CLEANER = """
import os, pathlib, signal, sys, time
def stop(*_):
    print("stopping", flush=True)
    pathlib.Path(sys.argv[1]).write_text("cleaned up")
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print(os.getpid(), os.getpgid(0), flush=True)
print("tick 0", flush=True)
print("tick 1", flush=True)
time.sleep(PATIENCE)
""".replace("PATIENCE", str(PATIENCE_S))


@pytest.mark.parametrize("how", ["ctx.cancel", "task.cancel"])
def test_a_cancelled_command_may_write_while_it_stops(how: str, tmp_path: Path) -> None:
    """A cancelled call's group gets its grace with its output still read: a child
    that prints on SIGTERM is not killed by SIGPIPE and finishes its cleanup."""
    done = tmp_path / "cleaned"

    def stop(ctx: ToolContext, task: asyncio.Task[Any]) -> None:
        if how == "ctx.cancel":
            ctx.cancel()
        else:
            task.cancel()

    args = {"command": [PY, "-c", CLEANER, str(done)]}
    payloads, _, before, after = asyncio.run(
        stop_after_output(args, ShellTool(grace=PATIENCE_S / 4), stop)
    )
    assert done.read_text() == "cleaned up"
    assert_group_gone(pid_line("".join(p.delta for p in payloads)))
    assert before == after


def test_a_grandchild_holding_the_pipe_does_not_hang_the_tool() -> None:
    """A grandchild that keeps stdout open after the child exits: the tool returns
    after its bounded drain, with the child's exit code and output."""
    script = (
        "import subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('grandchild', g.pid, flush=True)\n"
    )

    async def main() -> tuple[Collected, set[str], set[str]]:
        before = open_fds()
        got = await call_shell(py(script), ShellTool(exit_drain=0.3))
        return got, before, open_fds()

    got, before, after = asyncio.run(main())
    grandchild = int(shell_outcome(got).output.split()[1])
    try:
        assert shell_outcome(got).exit_code == 0
        assert shell_outcome(got).output == f"grandchild {grandchild}\n"
        assert before == after
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_reads_are_chunked_and_bounded() -> None:
    """With the smallest read size, a write larger than one wakeup's read budget
    arrives whole over several reads and wakeups."""
    size = WAKEUP_READ_BYTES * 3 + 5
    got = run(
        py(f"import os; os.write(1, b'q' * {size})"), ShellTool(read_chunk=MIN_READ_CHUNK_BYTES)
    )
    assert got.text == "q" * size
    assert all(len(p.delta) <= CAP for p in got.payloads)
    assert READ_CHUNK_BYTES > MIN_READ_CHUNK_BYTES


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_GETPIPE_SZ is Linux only")
def test_the_childs_pipe_is_widened_to_one_wakeups_budget() -> None:
    """Rule 7: the pipe the child writes to holds a whole wakeup's read budget
    (when the system allows a pipe that wide)."""
    allowed = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    got = run(py("import fcntl; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ))"))
    assert CHILD_PIPE_BYTES == WAKEUP_READ_BYTES
    if allowed >= CHILD_PIPE_BYTES:
        assert int(got.text) == CHILD_PIPE_BYTES


def test_the_result_is_the_json_output_value() -> None:
    """The outcome is the call's JSON output on the wire."""
    got = run({"command": "echo hi"})
    assert isinstance(got.terminal, ToolResult)
    wire = got.terminal.to_wire("call-1")
    assert msgspec.to_builtins(wire.output)["value"]["output"] == "hi\n"
    assert msgspec.to_builtins(wire.output)["kind"] == "json"


def test_shell_args_decode_both_command_forms() -> None:
    """``command`` is a string (shell) or a non-empty list (argv)."""
    assert msgspec.convert({"command": "ls"}, ShellArgs).command == "ls"
    assert msgspec.convert({"command": ["ls", "-l"]}, ShellArgs).command == ["ls", "-l"]


def test_a_stopped_process_is_continued_so_sigterm_reaches_it() -> None:
    """A child that stopped itself (SIGSTOP) still ends on SIGTERM: the group is
    continued after the signal, so the grace period is not wasted on it."""
    script = (
        'read -r pid comm state ppid pgrp rest < /proc/$$/stat\necho "$pid $pgrp"\nkill -STOP $$\n'
    )
    # Without the continue, SIGKILL would end it after this grace instead.
    _, terminal, before, after = asyncio.run(
        stop_after_output(
            {**sh(script), "timeout_ms": DEADLINE_MS}, ShellTool(grace=PATIENCE_S / 4)
        )
    )
    assert isinstance(terminal, ToolResult)
    outcome = terminal.value
    assert isinstance(outcome, ShellOutcome)
    assert outcome.timed_out
    assert outcome.signal == "SIGTERM"
    assert_group_gone(pid_line(outcome.output))
    assert before == after


def test_a_custom_cap_streams_small_whole_character_frames() -> None:
    """``max_delta_bytes`` sets this instance's stream cap: every frame consumes at
    most that many bytes (or one whole character), and the output is whole."""
    text = "grüße ✓ 😀 " * 20
    tool = ShellTool(max_delta_bytes=8)
    assert tool.capabilities.streaming is not None
    assert tool.capabilities.streaming.max_delta_bytes == 8
    assert ShellTool.capabilities.streaming == SHELL_SPEC, "the class default is untouched"
    got = run(py(f"import sys; sys.stdout.write({text!r})"), tool)
    assert got.text == text
    assert all(len(p.delta.encode()) <= 8 or len(p.delta) == 1 for p in got.payloads)
    assert len(got.payloads) >= len(text.encode()) // 8


def test_the_hard_limit_drops_and_counts_what_is_past_it() -> None:
    """``limit``: the stream stops at the limit and says ``truncated``; the child is
    still read to the end, and the result counts and announces the dropped bytes."""
    script = "import sys; sys.stdout.write('a' * 3000 + 'b' * 3000)"
    got = run(py(script), ShellTool(limit=1000))
    assert got.text == "a" * 1000
    assert got.payloads[-1].truncated
    assert got.payloads[-1].total_bytes == 1000
    outcome = shell_outcome(got)
    assert outcome.exit_code == 0
    assert outcome.total_bytes == 6000
    assert outcome.truncated
    assert outcome.omitted_bytes == 5000
    assert outcome.output == "a" * 1000 + LIMIT_MARKER.format(dropped=5000)


@pytest.mark.parametrize("limit", [0, 5])
def test_output_stopping_exactly_at_the_limit_ends_with_the_truncation_notice(limit: int) -> None:
    """Output that reaches ``limit`` exactly and writes more after a tick (or a
    limit of 0): no delta frame can say ``truncated``, so the frames end with the
    truncation notice, once; the result still counts the dropped bytes."""
    script = "import os,time; os.write(1, b'abcde'); time.sleep(0.1); os.write(1, b'fgh')"
    got = run(py(script), ShellTool(tick=0.02, limit=limit))
    assert got.text == "abcde"[:limit]
    notices = [p for p in got.payloads if not p.delta and not p.gap]
    assert notices == [PartialResultPayload(delta="", total_bytes=limit, truncated=True)]
    assert got.payloads[-1] is notices[0]
    assert not any(p.truncated for p in got.payloads[:-1])
    outcome = shell_outcome(got)
    assert (outcome.total_bytes, outcome.truncated) == (8, True)
    assert outcome.output == "abcde"[:limit] + LIMIT_MARKER.format(dropped=8 - limit)


def test_negative_caps_and_limits_are_refused() -> None:
    """A negative cap or limit, or a cap larger than the tail, is refused."""
    with pytest.raises(ValueError, match="max_delta_bytes must be >= 0 or None, got -1"):
        ShellTool(max_delta_bytes=-1)
    with pytest.raises(ValueError, match="limit must be >= 0 or None, got -1"):
        ShellTool(limit=-1)
    with pytest.raises(ValueError, match="tail_capacity 16384 is below one frame"):
        ShellTool(tail_capacity=CAP, max_delta_bytes=CAP + 1)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"command": 5}, TypeError, "ShellArgs.command: Expected `str | array`, got `int`"),
        ({"command": "true", "timeout_ms": -5}, ValueError, "ShellArgs.timeout_ms: .* got -5"),
        ({"command": "true", "timeout_ms": 0}, ValueError, "ShellArgs.timeout_ms: .* got 0"),
        ({"command": "true", "timeout_ms": "5"}, TypeError, "ShellArgs.timeout_ms"),
        ({"command": ""}, ValueError, "ShellArgs.command"),
        ({"command": ["ls", ""]}, ValueError, "ShellArgs.command"),
        ({"command": "true", "env": {"A": 1}}, TypeError, "ShellArgs.env"),
        ({"command": "true", "cwd": 3}, TypeError, "ShellArgs.cwd"),
        ({"command": "true", "output_limit": MAX_OUTPUT_LIMIT + 1}, ValueError, "output_limit"),
    ],
)
def test_shell_args_built_directly_are_checked_like_their_json(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    """ShellArgs made in Python meets the constraints of its JSON schema on
    construction (a negative deadline does not kill at once, a number is not a
    command), with the field named."""
    with pytest.raises(error, match=message):
        ShellArgs(**fields)
    assert isinstance(run(fields).terminal, ToolError)  # the JSON form is refused too


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tick": "fast"}, "tick"),
        ({"grace": None}, "grace"),
        ({"tail_capacity": "64"}, "tail_capacity"),
        ({"read_chunk": 4096.0}, "read_chunk"),
        ({"max_delta_bytes": "8"}, "max_delta_bytes"),
        ({"limit": "10"}, "limit"),
        ({"shell": 1}, "shell"),
        ({"default_timeout_ms": 1.5}, "default_timeout_ms"),
    ],
)
def test_shell_tool_names_an_argument_of_the_wrong_type(kwargs: dict[str, Any], name: str) -> None:
    """A wrong-typed argument raises TypeError naming it, not a comparison error."""
    with pytest.raises(TypeError, match=f"^{name} must be "):
        ShellTool(**kwargs)


# -- the default deadline ------------------------------------------------------------


def test_the_default_deadline_is_stated_in_the_description_and_the_schema() -> None:
    """What a model reads says when its command is stopped: the description and the
    ``timeout_ms`` field's schema state the default (2 minutes) and the ceiling."""
    assert DEFAULT_COMMAND_TIMEOUT_MS == 120_000
    tool = ShellTool()
    assert "stopped after 2 minutes unless `timeout_ms`" in tool.description
    assert "at most 10 minutes" in tool.description
    field = tool.input_schema()["$defs"]["ShellArgs"]["properties"]["timeout_ms"]
    assert "(default: 120000, 2 minutes)" in field["anyOf"][0]["description"]
    assert field["anyOf"][0]["maximum"] == MAX_COMMAND_TIMEOUT_MS
    assert (
        "(default: 120000, 2 minutes)"
        in msgspec.json.schema(ShellArgs)["$defs"]["ShellArgs"]["properties"]["timeout_ms"][
            "anyOf"
        ][0]["description"]
    )


def test_an_instance_default_deadline_is_what_it_states_and_applies() -> None:
    """``default_timeout_ms`` is applied to a call that sets none, stated in that
    instance's description and schema, and lifts the call deadline past itself;
    ``None`` states no deadline of the command's own; below 1 is refused."""
    hour = ShellTool(default_timeout_ms=3_600_000)
    assert "stopped after 60 minutes" in hour.description
    assert hour.capabilities.timeout_ms is not None
    assert hour.capabilities.timeout_ms > 3_600_000
    assert ShellTool.description != hour.description  # the class keeps its own
    none = ShellTool(default_timeout_ms=None)
    assert "no deadline of its own unless `timeout_ms` sets one" in none.description
    field = none.input_schema()["$defs"]["ShellArgs"]["properties"]["timeout_ms"]
    assert "(default: no deadline)" in field["anyOf"][0]["description"]
    for bad in (0, -5):
        with pytest.raises(ValueError, match="default_timeout_ms must be >= 1 or None"):
            ShellTool(default_timeout_ms=bad)
    _, terminal, before, after = asyncio.run(
        stop_after_output(sh(SH_TICKER), ShellTool(default_timeout_ms=DEADLINE_MS))
    )
    assert isinstance(terminal, ToolResult)
    outcome = terminal.value
    assert isinstance(outcome, ShellOutcome)
    assert outcome.timed_out
    assert_group_gone(pid_line(outcome.output))
    assert before == after


def test_no_default_deadline_and_no_call_deadline_let_a_command_run_on() -> None:
    """With ``default_timeout_ms=None`` and the call deadline lifted
    (``timeout_ms=math.inf``), a command outlives what both would have been."""

    async def body() -> ToolResult | ToolError:
        tool = ShellTool(default_timeout_ms=None)
        tool.capabilities = msgspec.structs.replace(tool.capabilities, timeout_ms=100)
        ctx = ToolContext("call-long")
        terminal: list[ToolResult | ToolError] = []
        async with asyncio.timeout(PATIENCE_S):
            run = run_tool(tool, {"command": "sleep 0.3; echo done"}, ctx=ctx, timeout_ms=math.inf)
            async for item in run:
                if isinstance(item, (ToolResult, ToolError)):
                    terminal.append(item)
        return terminal[0]

    terminal = asyncio.run(body())
    assert isinstance(terminal, ToolResult), terminal
    outcome = terminal.value
    assert isinstance(outcome, ShellOutcome)
    assert (outcome.exit_code, outcome.timed_out, outcome.output) == (0, False, "done\n")


def test_the_tail_capacity_asked_for_is_the_tail_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """ShellTool(tail_capacity=N) (kigi-stream run --tail N) streams through a
    tail of exactly N bytes, even below the excerpt's half of the output limit;
    the result's excerpt then keeps less of the output's end, and says so."""
    import kigi_tool_runtime._tools._paced as paced  # where a call's output is made

    made: list[int] = []
    real = paced.OutputStream

    def recording(spec: Any, *, capacity: int, **kw: Any) -> Any:
        made.append(capacity)
        return real(spec, capacity=capacity, **kw)

    monkeypatch.setattr(paced, "OutputStream", recording)
    tool = ShellTool(tail_capacity=4096, max_delta_bytes=1024)
    got = run(py("import sys; sys.stdout.write('x' * 100000)"), tool)
    assert made == [4096]
    outcome = shell_outcome(got)
    assert outcome.total_bytes == 100_000
    assert "bytes of output omitted" in outcome.output
