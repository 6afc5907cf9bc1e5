"""``kigi-stream``: run a command with streamed output, serve tools, follow and
check frame logs.

Commands:

- ``run [options] -- CMD ...``: run CMD through the shell tool. One argument is
  a shell command line (run by bash); several are a program and its arguments.
  By default the reassembled output is printed live to stdout (a gap marker
  where bytes were lost) and a summary line goes to stderr; ``--json`` prints
  the ``tool_call_progress`` notification lines instead, byte for byte what
  ``serve`` would send. On a terminal, a run longer than a moment shows a live
  status line on stderr; piped, stderr only gets the summary.
- ``serve``: the built-in tools (``bash``) over stdin/stdout. SIGINT, SIGTERM
  or SIGHUP ends it like end of input (calls in flight are cancelled, their
  commands stopped and their replies written), then it exits 128 + N.
- ``follow FILE``: print a frame log's reassembled text as it grows, like
  ``tail -f``, and each anomaly on stderr with its line number (counted from
  where reading began); ``--from-offset`` resumes; Ctrl-C stops cleanly and
  prints the offset to resume from; ``--once`` reads what is there and exits.
- ``check FILE``: decode a frame log strictly and print each stream's loss
  report and every anomaly with its line number.

``follow`` and ``check`` take ``--seq-scope``: ``call`` (the default, as
``serve`` numbers ``seq``: each call from 0, so calls may interleave) or
``connection`` (one counter for the whole log, as a hub numbers it).

Exit status:

- ``run``: the command's exit code; 128 + N when signal N killed it; 124 when
  it timed out (``--timeout``); 127 when it could not be started; 128 + N when
  signal N (SIGINT: 130 on Ctrl-C, SIGTERM, SIGHUP) stopped kigi-stream, which
  first stops the command's whole process group; 141 when stdout was closed
  early; 1 for any other failure of the call.
- ``check``: 0 when every record is a valid frame and the protocol was kept
  (gaps, truncation and sender-reported drops are loss, not violations), 1
  otherwise. ``follow``: 0. ``serve``: 0 at end of input, 128 + N on signal N.
- 2 for bad usage (unknown options, bad numbers, missing files), with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import IO, Final, NoReturn, get_args

import msgspec

from kigi_tool_protocol import MAX_FRAME_BYTES_CEILING, progress_to_frame

from ._follow import DEFAULT_POLL_INTERVAL, Follower, read_from
from ._loss import DEFAULT_GAP_MARKER, Anomaly
from ._reassembler import Appended, Reassembler, SeqScope
from ._runner import run_tool
from ._server import progress_line, serve_stdio
from ._shell import (
    DEFAULT_TAIL_CAPACITY,
    DEFAULT_TICK_S,
    MAX_COMMAND_TIMEOUT_MS,
    ShellArgs,
    ShellOutcome,
    ShellTool,
)
from ._tool import ToolContext, ToolError, ToolResult

__all__ = (
    "EXIT_CANNOT_START",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PIPE_CLOSED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "STATUS_AFTER_S",
    "STATUS_INTERVAL_S",
    "main",
)

#: Exit status for bad usage (argparse's own convention).
EXIT_USAGE: Final = 2
#: Exit status when ``--timeout`` stopped the command (``timeout(1)``'s convention).
EXIT_TIMEOUT: Final = 124
#: Exit status when the command could not be started (the shell's convention).
EXIT_CANNOT_START: Final = 127
#: Exit status on Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
#: Exit status when our stdout was closed under us (128 + SIGPIPE).
EXIT_PIPE_CLOSED: Final = 128 + signal.SIGPIPE
#: Exit status for any other failed call.
EXIT_FAILED: Final = 1

#: A run shorter than this never shows a status line: it would only flicker.
STATUS_AFTER_S: Final = 1.0
#: How often the status line is redrawn: live enough to read, cheap to draw.
STATUS_INTERVAL_S: Final = 0.5

_CALL_ID: Final = "run-1"

# Signals that stop `run`: the command runs in a process group of its own, which
# the terminal's Ctrl-C, a closed terminal and a plain `kill` would not reach, so
# each cancels the call (the shell tool then stops the whole group) instead of
# ending kigi-stream at once and leaving the command running.
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SEQ_SCOPES: Final[tuple[SeqScope, ...]] = get_args(SeqScope)


class _UsageError(Exception):
    """Raised for bad usage the parser cannot see (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _whole_number(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1, "must be at least 1")


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0, "must not be negative")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kigi-stream",
        description="Stream a command's output as capped UTF-8 deltas, serve tools over"
        " JSON-RPC lines, and follow or check frame logs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run a command through the shell tool",
        description="Run CMD (one argument: a bash command line; several: a program and"
        " its arguments) and print its output live, reassembled from the streamed deltas.",
        epilog="exit status: the command's own; 128+N when signal N killed it; 124 when"
        " --timeout stopped it; 127 when it could not be started; 128+N when signal N"
        " (130 on Ctrl-C, SIGTERM, SIGHUP) stopped kigi-stream, which stops the command"
        " first; 141 when stdout closed early; 1 for any other failure; 2 for bad usage.",
    )
    run.add_argument(
        "--cap", type=_non_negative_int, help="most source bytes per delta (0: one character)"
    )
    run.add_argument(
        "--tail",
        type=_positive_int,
        default=DEFAULT_TAIL_CAPACITY,
        help="tail buffer bytes (a reader further behind sees a gap)",
    )
    run.add_argument("--limit", type=_non_negative_int, help="hard output limit in bytes")
    run.add_argument(
        "--tick",
        type=_positive_float,
        default=DEFAULT_TICK_S * 1000,
        help="milliseconds between drains (default 100)",
    )
    run.add_argument("--timeout", type=_positive_float, help="seconds before the command is killed")
    run.add_argument("--json", action="store_true", help="print frames as JSON-RPC lines")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ...")

    serve = commands.add_parser("serve", help="serve the built-in tools over stdin/stdout")
    serve.add_argument(
        "--max-frame-bytes",
        type=_positive_int,
        default=MAX_FRAME_BYTES_CEILING,
        help="longest input line accepted (default 16 MiB)",
    )

    follow = commands.add_parser("follow", help="follow a frame log like tail -f")
    follow.add_argument("file")
    follow.add_argument("--from-offset", type=_non_negative_int, default=0)
    follow.add_argument("--once", action="store_true", help="read what is there and exit")
    follow.add_argument(
        "--interval", type=_positive_float, default=DEFAULT_POLL_INTERVAL, help="poll seconds"
    )

    check = commands.add_parser("check", help="validate a frame log and print its loss report")
    check.add_argument("file")
    for log_command in (follow, check):
        log_command.add_argument(
            "--seq-scope",
            choices=_SEQ_SCOPES,
            default="call",
            help="what one seq counter numbers: each call (serve's logs, the default)"
            " or the whole connection (a hub's)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Raises:
        SystemExit: bad usage (status 2, with a message on stderr), ``--help``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            return asyncio.run(_serve(args.max_frame_bytes))
        if args.command == "follow":
            return _follow(args)
        return _check(args)
    except _UsageError as exc:
        parser.exit(EXIT_USAGE, f"kigi-stream {args.command}: error: {exc}\n")


# -- serve -----------------------------------------------------------------------------


async def _serve(max_frame_bytes: int) -> int:
    # A stop signal ends serving as end of input does: every call in flight is
    # cancelled (its command's process group stopped) and answered, then 128 + N.
    loop = asyncio.get_running_loop()
    serving = asyncio.current_task()
    assert serving is not None
    stopped_by: list[int] = []

    def on_signal(number: int) -> None:
        if not stopped_by:
            stopped_by.append(number)
            serving.cancel()

    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    try:
        await serve_stdio([ShellTool()], max_frame_bytes=max_frame_bytes)
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        serving.uncancel()
    finally:
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
    return 128 + stopped_by[0] if stopped_by else 0


# -- run -------------------------------------------------------------------------------


class _Status:
    """The live status line on a terminal's stderr (Rule: piped, never drawn)."""

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled
        self._shown = False
        self._started = time.monotonic()
        self._next = self._started + STATUS_AFTER_S

    def update(self, total: int) -> None:
        now = time.monotonic()
        if not self._enabled or now < self._next:
            return
        self._next = now + STATUS_INTERVAL_S
        rate = total / max(now - self._started, 1e-9)
        self._stream.write(f"\r\x1b[K[kigi-stream] {_size(total)}, {_size(rate)}/s")
        self._stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def _shell_tool(args: argparse.Namespace) -> ShellTool:
    try:
        return ShellTool(
            tick=args.tick / 1000,
            tail_capacity=args.tail,
            max_delta_bytes=args.cap,
            limit=args.limit,
        )
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise _UsageError("no command given; usage: kigi-stream run [options] -- CMD ...")
    if args.timeout is not None and args.timeout * 1000 > MAX_COMMAND_TIMEOUT_MS:
        raise _UsageError(
            f"--timeout {args.timeout:g} is past the shell tool's longest deadline"
            f" of {MAX_COMMAND_TIMEOUT_MS // 1000} s"
        )
    tool = _shell_tool(args)
    shell_args = ShellArgs(
        command=cmd[0] if len(cmd) == 1 else cmd,
        timeout_ms=None if args.timeout is None else max(round(args.timeout * 1000), 1),
    )
    try:
        return asyncio.run(_run_async(tool, shell_args, json_mode=args.json))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _run_async(tool: ShellTool, shell_args: ShellArgs, *, json_mode: bool) -> int:
    out = sys.stdout.buffer
    status = _Status(sys.stderr, sys.stderr.isatty() and not json_mode)
    # On a terminal, the status line shares the screen with the output: drawing
    # it (and clearing it) while the output's last line is unfinished would
    # erase that line, so it waits for a newline.
    out_on_terminal = sys.stdout.isatty()
    line_open = False
    reassembler = Reassembler(known_calls=[_CALL_ID])
    ctx = ToolContext(_CALL_ID)
    started = time.monotonic()
    seq = 0
    frames = 0
    terminal: ToolResult | ToolError | None = None
    loop = asyncio.get_running_loop()
    stopped_by: list[int] = []

    def on_signal(number: int) -> None:
        stopped_by.append(number)
        ctx.cancel()

    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    try:
        async with run_tool(tool, shell_args, ctx=ctx) as run:
            async for event in run:
                if isinstance(event, ToolResult | ToolError):
                    terminal = event
                    continue
                frame = progress_to_frame(_CALL_ID, event)
                appended = reassembler.appended(frame, seq)
                if json_mode:
                    out.write(progress_line(_CALL_ID, seq, frame.kind, frame.body))
                else:
                    text = appended.render(DEFAULT_GAP_MARKER)
                    if text:
                        status.clear()
                        out.write(text.encode("utf-8", "surrogateescape"))
                        line_open = out_on_terminal and not text.endswith("\n")
                out.flush()
                seq += 1
                frames += 1
                if not line_open:
                    status.update(getattr(frame.body, "total_bytes", 0))
    except BrokenPipeError:
        ctx.cancel()
        # stdout now writes to /dev/null, so the flush at exit cannot fail again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, out.fileno())
            finally:
                os.close(devnull)
        return EXIT_PIPE_CLOSED
    finally:
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
        status.clear()
    duration = time.monotonic() - started
    signalled = stopped_by[0] if stopped_by else None
    return _finish(terminal, reassembler, frames, duration, signalled)


def _finish(
    terminal: ToolResult | ToolError | None,
    reassembler: Reassembler,
    frames: int,
    duration: float,
    signalled: int | None,
) -> int:
    reports = reassembler.reports()
    gaps = sum(len(report.gaps) for report in reports)
    truncated = any(report.truncated for report in reports)
    total = sum(report.total_bytes or 0 for report in reports)
    outcome = (
        msgspec.convert(msgspec.to_builtins(terminal.value), ShellOutcome)
        if isinstance(terminal, ToolResult)
        else None
    )
    # Bytes the command wrote past --limit: the stream says `truncated` (by its
    # truncation notice when no delta frame carried it), but only the result
    # counts the bytes dropped.
    past_limit = 0 if outcome is None else max(outcome.total_bytes - total, 0)
    parts = [
        f"{total} bytes",
        f"{frames} frames",
        f"{gaps} gaps",
        "truncated" if truncated or past_limit else "not truncated",
    ]
    if past_limit:
        parts.append(f"{past_limit} bytes past the limit dropped")
    code: int
    if outcome is not None:
        if outcome.timed_out:
            code = EXIT_TIMEOUT
            parts.append(f"timed out ({outcome.signal or outcome.exit_code})")
        elif outcome.signal is not None:
            number = getattr(signal.Signals, outcome.signal, None)
            code = 128 + int(number) if number is not None else EXIT_FAILED
            parts.append(f"killed by {outcome.signal}")
        else:
            code = outcome.exit_code if outcome.exit_code is not None else EXIT_FAILED
            parts.append(f"exit {outcome.exit_code}")
    elif isinstance(terminal, ToolError):
        if signalled is not None:
            code = 128 + signalled
        elif terminal.kind == "execution" and "cannot start" in terminal.message:
            code = EXIT_CANNOT_START
        elif terminal.kind == "timeout":
            code = EXIT_TIMEOUT
        else:
            code = EXIT_FAILED
        parts.append(f"{terminal.kind.value}: {terminal.message}")
    else:  # pragma: no cover - run_tool always ends with a terminal
        code = EXIT_FAILED
        parts.append("no result")
    parts.append(f"{duration:.2f} s")
    sys.stderr.write(f"kigi-stream: {', '.join(parts)}\n")
    sys.stderr.flush()
    return code


# -- follow and check ------------------------------------------------------------------


def _describe(anomaly: Anomaly) -> str:
    where = f" [{anomaly.key.tool_call_id}/{anomaly.key.subkind}]" if anomaly.key else ""
    return f"{anomaly.kind}{where}: {anomaly.detail}"


def _print_appended(items: list[Appended], first: int, out: IO[bytes], err: IO[str]) -> None:
    # ``first``: the line number (from where reading began) of ``items[0]``.
    for number, item in enumerate(items, start=first):
        text = item.render(DEFAULT_GAP_MARKER)
        if text:
            out.write(text.encode("utf-8", "surrogateescape"))
        for anomaly in item.anomalies:
            err.write(f"kigi-stream follow: line {number}: {_describe(anomaly)}\n")
    out.flush()
    err.flush()


def _follow(args: argparse.Namespace) -> int:
    if not os.path.exists(args.file) and args.once:
        raise _UsageError(f"no such file: {args.file!r}")
    follower = Follower(args.file, args.from_offset, seq_scope=args.seq_scope)
    out, err = sys.stdout.buffer, sys.stderr
    resumable = True
    try:
        while True:
            first = follower.reassembler.records + 1
            _print_appended(follower.poll_appended(), first, out, err)
            if args.once:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    except ValueError as exc:
        # The log shrank or was replaced: its offset means nothing in the new
        # file, so no resume hint.
        resumable = False
        raise _UsageError(str(exc)) from None
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    finally:
        if resumable:
            sys.stderr.write(
                f"kigi-stream follow: stopped at offset {follower.offset}"
                f" (resume with --from-offset {follower.offset})\n"
            )
    return 0


#: Anomaly kinds that are reported loss, not broken protocol (``check`` passes them).
_LOSS_ONLY: Final = frozenset({"dropped_frames"})


def _check(args: argparse.Namespace) -> int:
    # One fold of the whole log, each call's seq on its own counter (or the
    # connection's). Empty lines are no records, but they are counted, so an
    # anomaly names the line an editor shows.
    if not os.path.isfile(args.file):
        raise _UsageError(f"no such file: {args.file!r}")
    try:
        lines, _ = read_from(args.file, keep_empty=True)
    except (ValueError, OSError) as exc:
        raise _UsageError(str(exc)) from None
    numbers = [number for number, line in enumerate(lines, start=1) if line != b""]
    reassembler = Reassembler.fold(
        (line for line in lines if line != b""), seq_scope=args.seq_scope
    )
    out = sys.stdout
    for report in reassembler.reports():
        out.write(report.summary() + "\n")
    violations = 0
    for anomaly in reassembler.anomalies:
        out.write(f"line {numbers[anomaly.index]}: {_describe(anomaly)}\n")
        violations += anomaly.kind not in _LOSS_ONLY
    verdict = "ok" if not violations else f"{violations} violations"
    out.write(
        f"checked {reassembler.records} records, {len(reassembler.streams)} streams,"
        f" {reassembler.ignored} other messages: {verdict}\n"
    )
    return 0 if not violations else 1
