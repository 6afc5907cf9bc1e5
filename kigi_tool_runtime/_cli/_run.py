"""``kigi-stream run``: one command through the shell tool, its output printed
live as reassembled text (or as the frames, ``--json``), a status line on a
terminal, a summary on stderr, and the exit status the command's end calls for.

The call is a :class:`ServedCall` (the one every host serves), driven without a
queue: each frame is printed before the next is made, so the output writer
paces the tool, and the served call's fold is the only one."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shlex
import signal
import sys
import time
from typing import IO, Any, Final

import msgspec

from kigi_tool_protocol import encode_progress_line

from .._call._served import ServedCall
from .._consumer._loss import TRUNCATION_MARKER
from .._consumer._reassembler import Reassembler
from .._process import signal_name
from .._producer._chunk import cap_of
from .._producer._tail import MIN_TAIL_CAPACITY
from .._scope import TaskScope
from .._text import plural
from .._tools._errors import ToolError
from .._tools._shell import CommandNotStarted, ShellArgs, ShellOutcome, ShellTool
from .._tools._tool import ToolResult
from ._exits import (
    EXIT_CANNOT_START,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    UsageError,
    stdout_closed,
)
from ._fdwriter import FdWriter, OutputStalled
from ._held_printer import HeldPrinter
from ._signals import StopSignals
from ._status import Status

__all__ = ()

#: Seconds `run` still writes the command's output after a stop signal: a live
#: reader gets the end of it; past that, a reader that stopped reading no longer
#: keeps kigi-stream from exiting (what was not written is counted on stderr).
#: Short, because whoever sent the signal wants it to stop.
STOP_FLUSH_S: Final = 2.0

_CALL_ID: Final = "run-1"


def _shell_tool(args: argparse.Namespace) -> ShellTool:
    cap = cap_of(args.cap, "--cap")
    if args.tail < max(cap, MIN_TAIL_CAPACITY):
        default = " by default" if args.cap is None else ""
        raise UsageError(
            f"--tail {args.tail} is below --cap ({cap} bytes{default}): the tail must hold"
            f" one whole delta, so --tail must be at least {max(cap, MIN_TAIL_CAPACITY)}"
        )
    # A pipe or a file waits for its reader (nothing lost, as with cat); a
    # terminal is a live view, where skipping what it fell behind on is right.
    drop = getattr(args, "drop", None)
    if drop is None:
        drop = sys.stdout.isatty()
    try:
        return ShellTool(
            wait_for_reader=not drop,
            tick=args.tick / 1000,
            tail_capacity=args.tail,
            max_delta_bytes=args.cap,
            limit=args.limit,
            # A person running a command expects no deadline unless they ask.
            default_timeout_ms=None if args.timeout is None else max(round(args.timeout * 1000), 1),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run_command(args: argparse.Namespace) -> int:
    """Run ``args.cmd`` as ``args`` say; return the exit status.

    Raises:
        UsageError: no command, an empty one, or options the shell tool refuses.
    """
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given; usage: kigi-stream run [options] -- CMD ...")
    tool = _shell_tool(args)
    if not cmd[0]:
        raise UsageError("the command is empty; usage: kigi-stream run [options] -- CMD ...")
    command: str | list[str] = cmd[0] if len(cmd) == 1 else cmd
    if len(cmd) > 1 and not all(cmd):
        # The tool's argv form refuses empty arguments; the shell passes them
        # on when quoted (`printf '%s' ''`, `grep '' FILE`).
        command = shlex.join(cmd)
    try:
        shell_args = ShellArgs(command=command)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # From here until the stop signals' handlers are in place (and after they
    # are gone), a Ctrl-C is held, not raised: raised while asyncio.run makes or
    # closes its loop, it left a loop half made, whose collection printed a
    # traceback. A held one is sent again once the handlers can take it.
    held = _HeldSignals()
    previous = signal.signal(signal.SIGINT, held)
    try:
        return asyncio.run(_run_async(tool, shell_args, json_mode=args.json, held=held))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)


class _HeldSignals:
    """A signal handler that keeps the signals it gets, for :meth:`replay`."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, number: int, frame: object) -> None:
        self.received.append(number)

    def replay(self) -> None:
        """Send this process every signal held so far, once (to the handlers
        in place now)."""
        received, self.received = self.received, []
        for number in received:
            signal.raise_signal(number)


def _same_destination(one: IO[Any], other: IO[Any]) -> bool:
    """Whether two streams write to the same file, pipe or terminal."""
    try:
        first, second = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError):
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


async def _run_async(
    tool: ShellTool, shell_args: ShellArgs, *, json_mode: bool, held: _HeldSignals | None = None
) -> int:
    # A write that could block (a full pipe) is made from a thread: stdout that
    # nobody reads never blocks the event loop, so the signal handlers and the
    # tool keep running. The call has no queue: the next frame is made once
    # this one is written, so a slow stdout slows the tool (ServedCall Rule 2).
    out = FdWriter(sys.stdout.fileno())
    status = Status(sys.stderr, sys.stderr.isatty() and not json_mode)
    # On a terminal, the status line shares the screen with the output: drawing
    # it (and clearing it) while the output's last line is unfinished would
    # erase that line, so it waits for a newline.
    out_on_terminal = sys.stdout.isatty()
    # Without --timeout the call has no deadline either; with it, the tool's
    # capabilities put the call's deadline after the command's.
    call_timeout = math.inf if tool.default_timeout_ms is None else None
    served = ServedCall(tool, shell_args, call_id=_CALL_ID, timeout_ms=call_timeout)
    # The served call's fold, the one each frame goes through: it keeps no
    # text, so memory stays flat however much the command writes.
    reassembler = served.live.reassembler
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    running = asyncio.current_task()
    assert running is not None
    # The status ticker and the printer's timed releases end with the run,
    # and a failure of either is raised here, not lost.
    async with TaskScope() as tasks:
        # A gap's marker, and the text after it, wait for the frame that proves
        # how many bytes it lost (the next drain, a tick later), or a moment.
        printer = HeldPrinter(
            out,
            status,
            reassembler,
            tick=tool.tick,
            on_terminal=out_on_terminal,
            on_closed=served.cancel,
            tasks=tasks,
        )

        def on_signal(number: int) -> None:
            # The first signal stops the command and leaves the rest of its output
            # STOP_FLUSH_S to be read; a second one stops waiting at once.
            if stops.count == 1:
                served.cancel()
                out.give_up_at(loop.time() + STOP_FLUSH_S)
            elif stops.count == 2:
                out.give_up()
                running.cancel()

        with StopSignals(on_signal) as stops:
            if held is not None:
                held.replay()  # a Ctrl-C that came before the handlers
            ticker = tasks.start(status.tick(), name="kigi run status") if status.enabled else None
            try:
                async with served:
                    async for delta in served:
                        frame = delta.frame
                        if json_mode:
                            line = encode_progress_line(
                                _CALL_ID, frame.kind, frame.body, seq=delta.seq
                            )
                            with contextlib.suppress(OutputStalled):  # counted in out.unwritten
                                await out.write(line)
                        else:
                            await printer.print(delta.appended)
                        status.update(getattr(frame.body, "total_bytes", 0))
                # A result: the tool finished its stream, holding nothing back.
                await printer.finish(ended=served.end.ok)
                if printer.closed:
                    raise BrokenPipeError  # found by a timed release of held text
                if not json_mode and any(report.truncated for report in reassembler.reports()):
                    # The text stops at the limit: say so where it stops.
                    marker = ("" if printer.ends_line else "\n") + TRUNCATION_MARKER + "\n"
                    with contextlib.suppress(OutputStalled):
                        await out.write(marker.encode())
                    printer.ends_line = True
                with contextlib.suppress(OutputStalled):
                    await out.drain()  # all written before the summary
            except BrokenPipeError:
                served.cancel()
                return stdout_closed()
            except asyncio.CancelledError:
                if stops.count < 2:
                    raise
                # The second signal: the tool's task, still stopping, is cancelled as
                # the loop closes, which kills the command's process group at once.
                while running.uncancel():
                    pass
            finally:
                printer.close()
                out.close()
                if ticker is not None:
                    ticker.cancel()
                    await asyncio.wait({ticker})  # a failure of it is the scope's to raise
                status.clear()
    if out.unwritten:
        sys.stderr.write(
            f"kigi-stream: stdout was not being read; {out.unwritten} bytes of output"
            " were never written\n"
        )
    duration = time.monotonic() - started
    # Output without a final newline on the summary's own screen or file would
    # run into it (`abckigi-stream: ...`): the summary starts a line of its own.
    glued = not printer.ends_line and _same_destination(sys.stdout, sys.stderr)
    # No end after a second signal: the call was left before its terminal.
    terminal = served.end.terminal if served.ended else None
    frames = served.live.frames
    return _finish(terminal, reassembler, frames, duration, stops.first, glued=glued)


def _finish(
    terminal: ToolResult | ToolError | None,
    reassembler: Reassembler,
    frames: int,
    duration: float,
    signalled: int | None,
    *,
    glued: bool = False,
) -> int:
    # A result ends the stream (its tool finished it): the figures are final.
    reports = reassembler.reports(ended=isinstance(terminal, ToolResult))
    gaps = sum(len(report.gaps) for report in reports)
    gap_text = plural(gaps, "gap", "gaps")
    if gaps:
        least = sum(report.lost_bytes_min for report in reports)
        most = sum(report.lost_bytes for report in reports)
        lost = plural(most, "byte", "bytes") if least == most else f"{least}-{most} bytes"
        gap_text += f" ({lost} lost)"
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
        plural(total, "byte", "bytes"),
        plural(frames, "frame", "frames"),
        gap_text,
        "truncated" if truncated or past_limit else "not truncated",
    ]
    if past_limit:
        parts.append(f"{plural(past_limit, 'byte', 'bytes')} past the limit dropped")
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
        elif isinstance(terminal, CommandNotStarted):
            code = EXIT_CANNOT_START
        elif terminal.kind == "timeout":
            code = EXIT_TIMEOUT
        else:
            code = EXIT_FAILED
        parts.append(f"{terminal.kind.value}: {terminal.message}")
    elif signalled is not None:  # a second signal: no waiting for the terminal
        code = 128 + signalled
        parts.append(f"stopped by {signal_name(signalled)} before the call ended")
    else:  # pragma: no cover - run_tool always ends with a terminal
        code = EXIT_FAILED
        parts.append("no result")
    parts.append(f"{duration:.2f} s")
    start = "\n" if glued else ""
    sys.stderr.write(f"{start}kigi-stream: {', '.join(parts)}\n")
    sys.stderr.flush()
    return code
