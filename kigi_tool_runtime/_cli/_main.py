"""``kigi-stream``: run a command with streamed output, serve tools, follow and
check frame logs.

Commands:

- ``run [options] -- CMD ...``: run CMD through the shell tool. One argument is
  a shell command line (run by bash); several are a program and its arguments.
  The command's stdin is ``/dev/null``. By default the reassembled output is
  printed live to stdout (a gap marker where bytes were lost) and a summary
  line goes to stderr, on a line of its own even when the output did not end
  with a newline; ``--json`` prints the ``tool_call_progress`` notification
  lines instead, byte for byte what ``serve`` would send. On a terminal, a run
  longer than a moment shows a live status line on stderr (bytes, rate and
  elapsed time, redrawn while the command is silent too); piped, stderr only
  gets the summary.
- ``serve``: the built-in tools (``bash``) over stdin/stdout; ``serve --help``
  lists the methods, and on a terminal it prints a one-line hint to stderr.
  SIGINT, SIGTERM or SIGHUP ends it like end of input (calls in flight are
  cancelled, their commands stopped and their replies written), then it exits
  128 + N.
- ``follow FILE``: print a frame log's reassembled text as it grows, like
  ``tail -f``, and each anomaly on stderr with its line number (counted from
  where reading began, blank lines included, as ``check`` counts them); once
  the log holds more than one stream, a ``==> CALL/SUBKIND <==`` label goes
  before text of a stream other than the last one printed. ``--from-offset``
  resumes; Ctrl-C, SIGTERM or SIGHUP stops cleanly and prints the offset to
  resume from; ``--once`` reads what is there and exits.
- ``check FILE``: decode a frame log strictly and print each stream's loss
  report and every anomaly with its line number; a last line without a newline
  is reported too.
- ``serve --nats URL`` and ``follow --nats URL --call ID``: over NATS
  JetStream (``_nats_cli``; needs the ``nats`` extra).

``FILE`` is ``-`` for standard input; ``-``, a pipe or a terminal (``/dev/stdin``)
is read once to its end (``follow`` prints it as it arrives, with no offset to
resume from). A directory is refused as one.

``follow`` and ``check`` take ``--seq-scope``: ``call`` (the default, as
``serve`` numbers ``seq``: each call from 0, so calls may interleave) or
``connection`` (one counter for the whole log, as a hub numbers it).

Exit status:

- ``run``: the command's exit code; 128 + N when signal N killed it; 124 when
  it timed out (``--timeout``); 127 when it could not be started; 128 + N when
  signal N stopped kigi-stream (130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP),
  which first stops the command's whole process group; 141 when stdout was
  closed early; 1 for any other failure of the call.
- Every command: 1, with a one-line message, when a standard stream it needs
  (stdout; stdin for ``serve`` and ``FILE`` ``-``) was closed from the start.
- ``check``: 0 when every record is a valid frame, the protocol was kept and
  the last line is terminated (gaps, truncation and sender-reported drops are
  loss, not violations), 1 otherwise; 141 when stdout was closed early
  (``check FILE | head``). ``follow``: 0, also when stopped.
  ``serve``: 0 at end of input, 128 + N on signal N.
- 2 for bad usage (unknown options, bad numbers, missing files), with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shlex
import signal
import stat
import sys
import time
from collections.abc import Sequence
from typing import IO, Any, Final, NoReturn, get_args

import msgspec

from kigi_tool_protocol import (
    DEFAULT_MAX_DELTA_BYTES,
    MAX_FRAME_BYTES_CEILING,
    __version__,
    encode_progress_line,
    progress_to_frame,
)

from .._consumer._follow import DEFAULT_POLL_INTERVAL, READ_BLOCK_BYTES, Follower
from .._consumer._loss import (
    DEFAULT_GAP_MARKER,
    TRUNCATION_MARKER,
    Anomaly,
    LossReport,
    StreamKey,
    plural,
)
from .._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES, Appended, Reassembler, SeqScope
from .._lines import LineSplitter, OversizedLine
from .._process import signal_name
from .._producer._chunk import cap_of
from .._producer._tail import MIN_TAIL_CAPACITY
from .._tools._errors import ToolError
from .._tools._runner import run_tool
from .._tools._shell import (
    DEFAULT_TAIL_CAPACITY,
    DEFAULT_TICK_S,
    CommandNotStarted,
    ShellArgs,
    ShellOutcome,
    ShellTool,
)
from .._tools._tool import ToolContext, ToolResult
from .._transport._rpc_server import SERVED_METHODS
from .._transport._server import Server, open_stdio
from ._fdwriter import FdWriter, OutputStalled
from ._nats import (
    NatsUsageError,
    add_follow_options,
    add_serve_options,
    follow_nats,
    serve_nats,
)

__all__ = ()

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

#: The longest ``run --timeout`` in seconds: a century. Past it a deadline means
#: nothing (leave the option out for none), and its milliseconds stay far inside
#: the u64 range a tool's deadline is carried in.
MAX_RUN_TIMEOUT_S: Final = 100 * 365 * 24 * 3600
#: The longest ``follow --interval`` (a longer sleep overflows the clock).
MAX_POLL_INTERVAL_S: Final = 24 * 3600

#: Seconds `run` still writes the command's output after a stop signal: a live
#: reader gets the end of it; past that, a reader that stopped reading no longer
#: keeps kigi-stream from exiting (what was not written is counted on stderr).
#: Short, because whoever sent the signal wants it to stop.
STOP_FLUSH_S: Final = 2.0

#: A run shorter than this never shows a status line: it would only flicker.
STATUS_AFTER_S: Final = 1.0
#: How often the status line is redrawn: live enough to read, cheap to draw.
STATUS_INTERVAL_S: Final = 0.5

_CALL_ID: Final = "run-1"

_SERVE_DESCRIPTION: Final = """\
Serve the built-in tools (bash) as JSON-RPC 2.0, one message per line:
requests on stdin; replies and tool_call_progress notifications on stdout.
Calls run concurrently. End of input (or SIGINT, SIGTERM, SIGHUP) cancels the
calls in flight, answers each, and exits.

methods:
  tools.list         no params needed: the tools and their input schemas
  tool.call          params {tool_call_id, tool_id, arguments, deadline_ms?}:
                     tool_call_progress notifications (each call's seq from 0),
                     then one result or error with the request's id
  tool_call_request  the same as tool.call
  tool.cancel        params {tool_call_id}: cancel that call (it ends with a
                     `cancelled` error); the result says how many were cancelled
  hook               params: a HookFrame; a Cancel event cancels its call_id,
                     SessionEnded every call
"""
_SERVE_EXAMPLE: Final = (
    '{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool_call_id":"c1",'
    '"tool_id":"bash","arguments":{"command":"echo hi"}}}'
)
# The hint `serve` prints when a person, not a program, is at its input.
_SERVE_TTY_HINT: Final = (
    "kigi-stream serve: reading JSON-RPC 2.0 requests on stdin, one per line"
    f" (methods: {', '.join(SERVED_METHODS)}); Ctrl-D ends. Try: {_SERVE_EXAMPLE}\n"
)

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


def _timeout_seconds(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_RUN_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_RUN_TIMEOUT_S} seconds (100 years), got {text};"
            " leave --timeout out for no deadline"
        )
    return value


def _interval_seconds(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_POLL_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_POLL_INTERVAL_S} seconds (a day), got {text}"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kigi-stream",
        description="Stream a command's output as capped UTF-8 deltas, serve tools over"
        " JSON-RPC lines, and follow or check frame logs.",
        epilog="Run `kigi-stream COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run a command through the shell tool",
        description="Run CMD (one argument: a bash command line; several: a program and"
        " its arguments) and print its output live, reassembled from the streamed deltas,"
        " with a summary line on stderr. The command's stdout and stderr are merged in"
        " arrival order; its stdin is /dev/null (it cannot read kigi-stream's input).",
        epilog="exit status: the command's own; 128+N when signal N killed it; 124 when"
        " --timeout stopped it; 127 when it could not be started; 128+N when signal N"
        " stopped kigi-stream (130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP), which stops"
        " the command first; 141 when stdout closed early; 1 for any other failure"
        " (stdout closed from the start); 2 for bad usage.",
    )
    run.add_argument(
        "--cap",
        type=_non_negative_int,
        metavar="BYTES",
        help=f"most source bytes per delta (default {DEFAULT_MAX_DELTA_BYTES},"
        f" {_size(DEFAULT_MAX_DELTA_BYTES)}; 0: one character per delta)",
    )
    run.add_argument(
        "--tail",
        type=_positive_int,
        default=DEFAULT_TAIL_CAPACITY,
        metavar="BYTES",
        help="bytes of output kept between drains; a reader further behind sees a gap"
        f" (default {DEFAULT_TAIL_CAPACITY}, {_size(DEFAULT_TAIL_CAPACITY)};"
        " at least --cap)",
    )
    run.add_argument(
        "--limit",
        type=_non_negative_int,
        metavar="BYTES",
        help="hard output limit: bytes past it are counted and dropped, and the stream"
        " says truncated (default: no limit)",
    )
    run.add_argument(
        "--tick",
        type=_positive_float,
        default=DEFAULT_TICK_S * 1000,
        metavar="MS",
        help=f"milliseconds between drains (default {DEFAULT_TICK_S * 1000:g})",
    )
    run.add_argument(
        "--timeout",
        type=_timeout_seconds,
        metavar="SECONDS",
        help="seconds before the command's process group is stopped, exit 124"
        " (default: no deadline)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print the tool_call_progress frames as JSON-RPC lines (what serve sends)"
        " instead of the text",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ...")

    serve = commands.add_parser(
        "serve",
        help="serve the built-in tools (bash) as JSON-RPC 2.0 over stdin/stdout",
        description=_SERVE_DESCRIPTION,
        epilog=f"example request (one line):\n  {_SERVE_EXAMPLE}\n\n"
        "The README shows a whole session: a request, its progress, the result, a cancel.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--max-frame-bytes",
        type=_positive_int,
        default=MAX_FRAME_BYTES_CEILING,
        metavar="BYTES",
        help=f"longest input line accepted (default {MAX_FRAME_BYTES_CEILING},"
        f" {_size(MAX_FRAME_BYTES_CEILING)})",
    )
    serve.add_argument(
        "--mcp", action="store_true", help="speak MCP over stdin/stdout (needs the mcp extra)"
    )
    serve.add_argument(
        "--mcp-http",
        metavar="[HOST:]PORT",
        help="speak MCP over streamable HTTP (host 127.0.0.1 unless given; needs the mcp extra)",
    )

    follow = commands.add_parser(
        "follow",
        help="print a frame log's text as it grows, like tail -f",
        description="Print the reassembled text of a frame log (run --json's output, or"
        " what serve wrote) as it grows, like tail -f: a marker where bytes were lost,"
        " each anomaly on stderr with its line number, and, once the log holds more than"
        " one stream, a ==> CALL/SUBKIND <== label whenever the text switches streams."
        " Ctrl-C or SIGTERM stops it and prints the offset to resume from.",
    )
    follow.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="the frame log; - (or a pipe) is standard input, read to its end",
    )
    follow.add_argument(
        "--from-offset",
        type=_non_negative_int,
        default=0,
        metavar="BYTES",
        help="start at this byte offset, one a stopped follow printed (default 0)",
    )
    follow.add_argument("--once", action="store_true", help="read what is there and exit")
    follow.add_argument(
        "--interval",
        type=_interval_seconds,
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between polls of the file (default {DEFAULT_POLL_INTERVAL:g},"
        " at most a day)",
    )

    add_serve_options(serve)
    add_follow_options(follow)

    check = commands.add_parser(
        "check",
        help="validate a frame log and print its loss report",
        description="Decode a frame log strictly and print each stream's loss report,"
        " every anomaly with its line number, and a verdict. Exits 1 on any invalid"
        " frame, protocol violation or unterminated last line; gaps, truncation and"
        " dropped frames are loss, reported but not violations.",
    )
    check.add_argument("file", metavar="FILE", help="the frame log; - is standard input")
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
    closed = _reopen_closed_stdio()
    needed = _needed_stdio(args)
    refused = [name for name in ("input", "output") if name in needed and name in closed]
    if refused:
        # Nothing could be read or written: refuse before anything runs.
        what = " and ".join(refused)
        sys.stderr.write(f"kigi-stream {args.command}: standard {what} is closed\n")
        sys.stderr.flush()
        return EXIT_FAILED
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            if args.nats:
                if args.mcp or args.mcp_http is not None:
                    raise _UsageError("--nats and --mcp serve in two different ways; give one")
                return serve_nats(args)
            if args.mcp or args.mcp_http is not None:
                return _serve_mcp(args)
            return asyncio.run(_serve(args.max_frame_bytes))
        if args.command == "follow":
            if args.nats:
                return follow_nats(args)
            if args.file is None:
                raise _UsageError("give a FILE (or --nats URL --call ID)")
            return _follow(args)
        return _check(args)
    except (_UsageError, NatsUsageError) as exc:
        parser.exit(EXIT_USAGE, f"kigi-stream {args.command}: error: {exc}\n")


#: The standard streams: their names in messages, in :mod:`sys`, and their descriptors.
_STDIO: Final = (("input", "stdin", 0), ("output", "stdout", 1), ("error", "stderr", 2))


def _reopen_closed_stdio() -> set[str]:
    """Put /dev/null where a standard stream was closed when the process
    started (``kigi-stream run >&-``), so that no file opened later takes its
    descriptor and using it raises no traceback; answer which were closed."""
    closed: set[str] = set()
    for name, attribute, fd in _STDIO:
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
            mode = "r" if fd == 0 else "w"
            # A standard stream, open for the life of the process: no `with`.
            stream = open(fd, mode, encoding="utf-8", closefd=False)  # noqa: SIM115
            setattr(sys, attribute, stream)
            closed.add(name)
    return closed


def _needed_stdio(args: argparse.Namespace) -> set[str]:
    """The standard streams ``args``'s command cannot work without."""
    if args.command == "serve":
        if args.nats or args.mcp_http is not None:
            return set()
        return {"input", "output"}
    if args.command == "follow" and args.nats:
        return {"output"}
    if args.command in ("follow", "check") and args.file == "-":
        return {"input", "output"}
    return {"output"}


def _stdout_closed() -> int:
    """Point stdout at /dev/null, so the flush at exit cannot fail again (nor
    print a traceback), and return the closed-pipe exit status."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return EXIT_PIPE_CLOSED


# -- serve -----------------------------------------------------------------------------


def _serve_mcp(args: argparse.Namespace) -> int:
    try:
        from ..mcp._cli import parse_http_address, run_mcp_serve
    except ImportError as exc:
        raise _UsageError(str(exc)) from None
    try:
        address = None if args.mcp_http is None else parse_http_address(args.mcp_http)
    except ValueError as exc:
        raise _UsageError(f"--mcp-http: {exc}") from None
    return run_mcp_serve(address, max_frame_bytes=args.max_frame_bytes)


async def _serve(max_frame_bytes: int) -> int:
    # A stop signal ends serving as end of input does: every call in flight is
    # cancelled (its command's process group stopped) and answered, the final
    # flush bounded, then 128 + N. A second signal cuts the wait short: the
    # calls are cancelled again, which kills their process groups at once.
    loop = asyncio.get_running_loop()
    serving = asyncio.current_task()
    assert serving is not None
    stopped_by: list[int] = []

    def on_signal(number: int) -> None:
        stopped_by.append(number)
        if len(stopped_by) <= 2:
            serving.cancel()

    server = Server([ShellTool()], max_frame_bytes=max_frame_bytes)
    reader, sink = await open_stdio()
    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    if sys.stdin.isatty():
        sys.stderr.write(_SERVE_TTY_HINT)
        sys.stderr.flush()
    try:
        await server.serve(reader, sink)
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        while serving.uncancel():
            pass
    finally:
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
    abandoned = server.statistics().lines_abandoned
    if abandoned:
        sys.stderr.write(
            f"kigi-stream serve: stdout was not being read; {abandoned} lines"
            " (replies and progress frames) were never written\n"
        )
    return 128 + stopped_by[0] if stopped_by else 0


# -- run -------------------------------------------------------------------------------


class _Status:
    """The live status line on a terminal's stderr (Rule: piped, never drawn).

    It shows the bytes so far, the average rate and the elapsed time, and is
    redrawn by :meth:`tick` every :data:`STATUS_INTERVAL_S` whether or not
    output arrives, so a silent step still shows the clock running. While
    :attr:`held` (the output's last line is unfinished on the same terminal)
    it is not drawn.
    """

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self._stream = stream
        self.enabled = enabled
        self.held = False
        self._total = 0
        self._shown = False
        self._started = time.monotonic()
        self._next = self._started + STATUS_AFTER_S

    def update(self, total: int) -> None:
        """Note the bytes so far, and redraw if one is due."""
        self._total = total
        if self.enabled and time.monotonic() >= self._next:
            self._draw()

    async def tick(self) -> None:
        """Redraw every :data:`STATUS_INTERVAL_S` until cancelled."""
        await asyncio.sleep(max(self._next - time.monotonic(), 0))
        while True:
            self._draw()
            await asyncio.sleep(STATUS_INTERVAL_S)

    def _draw(self) -> None:
        if self.held:
            return
        now = time.monotonic()
        self._next = now + STATUS_INTERVAL_S
        elapsed = now - self._started
        rate = self._total / max(elapsed, 1e-9)
        self._stream.write(
            f"\r\x1b[K[kigi-stream] {_size(self._total)} at {_size(rate)}/s, {elapsed:.1f} s"
        )
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
    cap = cap_of(args.cap, "--cap")
    if args.tail < max(cap, MIN_TAIL_CAPACITY):
        default = " by default" if args.cap is None else ""
        raise _UsageError(
            f"--tail {args.tail} is below --cap ({cap} bytes{default}): the tail must hold"
            f" one whole delta, so --tail must be at least {max(cap, MIN_TAIL_CAPACITY)}"
        )
    try:
        return ShellTool(
            tick=args.tick / 1000,
            tail_capacity=args.tail,
            max_delta_bytes=args.cap,
            limit=args.limit,
            # A person running a command expects no deadline unless they ask.
            default_timeout_ms=None if args.timeout is None else max(round(args.timeout * 1000), 1),
        )
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise _UsageError("no command given; usage: kigi-stream run [options] -- CMD ...")
    tool = _shell_tool(args)
    if not cmd[0]:
        raise _UsageError("the command is empty; usage: kigi-stream run [options] -- CMD ...")
    command: str | list[str] = cmd[0] if len(cmd) == 1 else cmd
    if len(cmd) > 1 and not all(cmd):
        # The tool's argv form refuses empty arguments; the shell passes them
        # on when quoted (`printf '%s' ''`, `grep '' FILE`).
        command = shlex.join(cmd)
    try:
        shell_args = ShellArgs(command=command)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    try:
        return asyncio.run(_run_async(tool, shell_args, json_mode=args.json))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _same_destination(one: IO[Any], other: IO[Any]) -> bool:
    """Whether two streams write to the same file, pipe or terminal."""
    try:
        first, second = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError):
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


async def _run_async(tool: ShellTool, shell_args: ShellArgs, *, json_mode: bool) -> int:
    # A write that could block (a full pipe) is made from a thread: stdout that
    # nobody reads never blocks the event loop, so the signal handlers and the
    # tool keep running.
    out = FdWriter(sys.stdout.fileno())
    status = _Status(sys.stderr, sys.stderr.isatty() and not json_mode)
    # On a terminal, the status line shares the screen with the output: drawing
    # it (and clearing it) while the output's last line is unfinished would
    # erase that line, so it waits for a newline.
    out_on_terminal = sys.stdout.isatty()
    ends_line = True  # the output so far is empty or ends with a newline
    # Text is printed as it lands, never kept: memory stays flat however much
    # the command writes.
    reassembler = Reassembler(known_calls=[_CALL_ID], keep_text=False)
    ctx = ToolContext(_CALL_ID)
    started = time.monotonic()
    seq = 0
    frames = 0
    terminal: ToolResult | ToolError | None = None
    loop = asyncio.get_running_loop()
    running = asyncio.current_task()
    assert running is not None
    stopped_by: list[int] = []

    def on_signal(number: int) -> None:
        # The first signal stops the command and leaves the rest of its output
        # STOP_FLUSH_S to be read; a second one stops waiting at once.
        stopped_by.append(number)
        if len(stopped_by) == 1:
            ctx.cancel()
            out.give_up_at(loop.time() + STOP_FLUSH_S)
        elif len(stopped_by) == 2:
            out.give_up()
            running.cancel()

    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    ticker = asyncio.create_task(status.tick()) if status.enabled else None
    try:
        # Without --timeout the call has no deadline either; with it, the tool's
        # capabilities put the call's deadline after the command's.
        call_timeout = math.inf if tool.default_timeout_ms is None else None
        async with run_tool(tool, shell_args, ctx=ctx, timeout_ms=call_timeout) as run:
            async for event in run:
                if isinstance(event, ToolResult | ToolError):
                    terminal = event
                    continue
                frame = progress_to_frame(_CALL_ID, event)
                appended = reassembler.appended(frame, seq)
                text = ""
                if json_mode:
                    data = encode_progress_line(_CALL_ID, frame.kind, frame.body, seq=seq)
                else:
                    text = appended.render(DEFAULT_GAP_MARKER)
                    data = text.encode("utf-8", "surrogateescape")
                    if text:
                        status.clear()
                        # Not drawn while the text is on its way: it would land
                        # between the status line and its clearing.
                        status.held = True
                if data:
                    with contextlib.suppress(OutputStalled):  # counted in out.unwritten
                        await out.write(data)
                        if status.enabled:  # the status line shares the screen: in order
                            await out.drain()
                if text:
                    ends_line = text.endswith("\n")
                    status.held = out_on_terminal and not ends_line
                seq += 1
                frames += 1
                status.update(getattr(frame.body, "total_bytes", 0))
        if not json_mode and any(report.truncated for report in reassembler.reports()):
            # The text stops at the limit: say so where it stops.
            marker = ("" if ends_line else "\n") + TRUNCATION_MARKER + "\n"
            with contextlib.suppress(OutputStalled):
                await out.write(marker.encode())
            ends_line = True
        with contextlib.suppress(OutputStalled):
            await out.drain()  # all written before the summary
    except BrokenPipeError:
        ctx.cancel()
        return _stdout_closed()
    except asyncio.CancelledError:
        if len(stopped_by) < 2:
            raise
        # The second signal: the tool's task, still stopping, is cancelled as
        # the loop closes, which kills the command's process group at once.
        while running.uncancel():
            pass
    finally:
        out.close()
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        status.clear()
    if out.unwritten:
        sys.stderr.write(
            f"kigi-stream: stdout was not being read; {out.unwritten} bytes of output"
            " were never written\n"
        )
    duration = time.monotonic() - started
    signalled = stopped_by[0] if stopped_by else None
    # Output without a final newline on the summary's own screen or file would
    # run into it (`abckigi-stream: ...`): the summary starts a line of its own.
    glued = not ends_line and _same_destination(sys.stdout, sys.stderr)
    return _finish(terminal, reassembler, frames, duration, signalled, glued=glued)


def _finish(
    terminal: ToolResult | ToolError | None,
    reassembler: Reassembler,
    frames: int,
    duration: float,
    signalled: int | None,
    *,
    glued: bool = False,
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
        plural(total, "byte", "bytes"),
        plural(frames, "frame", "frames"),
        plural(gaps, "gap", "gaps"),
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


# -- follow and check ------------------------------------------------------------------


def _describe(anomaly: Anomaly) -> str:
    where = f" [{anomaly.key.tool_call_id}/{anomaly.key.subkind}]" if anomaly.key else ""
    return f"{anomaly.kind}{where}: {anomaly.detail}"


class _Printer:
    """Print what each record appended: its text on stdout, its anomalies on
    stderr with their line numbers; once the log holds more than one stream, a
    ``==> CALL/SUBKIND <==`` label (as ``tail`` heads each file) before text of
    a stream other than the one printed last."""

    def __init__(self, out: IO[bytes], err: IO[str]) -> None:
        self._out = out
        self._err = err
        self._streams: set[StreamKey] = set()
        self._last: StreamKey | None = None
        self._ends_line = True

    def print(self, items: Sequence[tuple[int, Appended]]) -> None:
        for _, item in items:
            if item.key is not None and (item.text or item.gap is not None):
                self._streams.add(item.key)
        labelled = len(self._streams) > 1
        write = self._out.write
        for number, item in items:
            text = item.render(DEFAULT_GAP_MARKER)
            if text:
                if labelled and item.key is not None and item.key != self._last:
                    start = "" if self._ends_line else "\n"
                    label = f"{start}==> {item.key.tool_call_id}/{item.key.subkind} <==\n"
                    write(label.encode("utf-8", "surrogateescape"))
                self._last = item.key
                write(text.encode("utf-8", "surrogateescape"))
                self._ends_line = text.endswith("\n")
            for anomaly in item.anomalies:
                self._err.write(f"kigi-stream follow: line {number}: {_describe(anomaly)}\n")
        self._out.flush()
        self._err.flush()

    def ended(self, reports: Sequence[LossReport]) -> None:
        """The log has ended: mark, at the end of each stream's text, the bytes
        its last total counts that no frame delivered (they are lost now)."""
        labelled = len(self._streams) > 1
        for report in reports:
            if not report.unseen_bytes:
                continue
            key = report.key
            marker = DEFAULT_GAP_MARKER.format(lost=report.unseen_bytes)
            if labelled and key != self._last:
                start = "" if self._ends_line else "\n"
                marker = f"{start}==> {key.tool_call_id}/{key.subkind} <==\n{marker}"
            self._out.write(marker.encode("utf-8", "surrogateescape"))
            self._last, self._ends_line = key, False
        self._out.flush()


class _Stopped(Exception):
    """Raised by the SIGTERM and SIGHUP handlers of ``follow``: stop as Ctrl-C does."""


def _raise_stopped(number: int, frame: object) -> None:
    raise _Stopped(number)


def _log_source(name: str, command: str) -> str | None:
    """The path to read ``name`` from as a file, or ``None`` for a stream
    (``-``, a pipe, a terminal) read once to its end.

    Raises:
        _UsageError: ``name`` is a directory, or nothing exists at it.
    """
    if name == "-":
        return None
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise _UsageError(f"no such file: {name!r}") from None
    except OSError as exc:
        raise _UsageError(f"cannot read {name!r}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise _UsageError(
            f"{name!r} is a directory; {command} reads a frame log file (- for standard input)"
        )
    return name if stat.S_ISREG(info.st_mode) else None


def _open_stream(name: str) -> IO[bytes]:
    if name == "-":
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    try:
        return open(name, "rb", buffering=0)
    except OSError as exc:
        raise _UsageError(f"cannot read {name!r}: {exc.strerror}") from None


def _follow(args: argparse.Namespace) -> int:
    path: str | None
    if args.file != "-" and not os.path.lexists(args.file):
        if args.once:
            raise _UsageError(f"no such file: {args.file!r}")
        path = args.file  # not there yet: a live follow waits for it
    else:
        path = _log_source(args.file, "follow")
    if path is None and args.from_offset:
        raise _UsageError(
            f"--from-offset needs a file; {args.file!r} is a stream, read from its start"
        )
    printer = _Printer(sys.stdout.buffer, sys.stderr)
    stops = (signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, _raise_stopped) for number in stops}
    # Ctrl-C stops it even when started with SIGINT ignored (a job a
    # non-interactive shell put in the background), as it stops run and serve.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if path is None:
            return _follow_stream(args, printer)
        return _follow_file(path, args, printer)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _follow_stream(args: argparse.Namespace, printer: _Printer) -> int:
    # A stream has no offsets: read it to its end, as it arrives, then stop.
    splitter = LineSplitter(DEFAULT_MAX_RECORD_BYTES)
    reassembler = Reassembler(seq_scope=args.seq_scope, keep_text=False)
    number = 0
    with _open_stream(args.file) as source:
        try:
            while True:
                data = source.read(READ_BLOCK_BYTES)
                if not data:
                    break
                items: list[tuple[int, Appended]] = []
                for line in splitter.feed(data):
                    number += 1
                    if not _blank(line):
                        items.append((number, reassembler.appended(line)))
                printer.print(items)
        except (KeyboardInterrupt, _Stopped):
            return 0
        except BrokenPipeError:
            return EXIT_PIPE_CLOSED
    try:
        printer.ended(reassembler.reports(ended=True))
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    rest = splitter.end()
    if rest is not None:
        sys.stderr.write(f"kigi-stream follow: line {number + 1}: {_unterminated(rest)}\n")
    return 0


def _follow_file(path: str, args: argparse.Namespace, printer: _Printer) -> int:
    follower = Follower(path, args.from_offset, seq_scope=args.seq_scope, keep_text=False)
    resumable = True
    try:
        # A batch of records at a time: a large log never sits in memory.
        for batch in follower.watch(args.interval, once=args.once, batch=_PRINT_BATCH):
            printer.print(batch)
        return 0
    except (KeyboardInterrupt, _Stopped):
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


def _unterminated(rest: bytes | OversizedLine) -> str:
    size = rest.size if isinstance(rest, OversizedLine) else len(rest)
    return (
        f"unterminated: the last line ({plural(size, 'byte', 'bytes')}) has no newline,"
        " so it was not read as a record (a frame log ends every record with one)"
    )


#: Records ``follow`` prints at a time: a large log never sits in memory whole.
_PRINT_BATCH: Final = 64

_SPACES: Final = (b" ", b"\t", b"\r")

#: Anomaly kinds that are reported loss, not broken protocol (``check`` passes them).
_LOSS_ONLY: Final = frozenset({"dropped_frames"})


def _blank(line: bytes | OversizedLine) -> bool:
    """An empty line, or one of only JSON whitespace: no record (it holds no
    value), but it counts in the line numbers."""
    return not isinstance(line, OversizedLine) and (
        not line or (line[:1] in _SPACES and not line.strip(b" \t\r"))
    )


def _check(args: argparse.Namespace) -> int:
    # One pass over the log, each call's seq on its own counter (or the
    # connection's), keeping no text: each record is checked as it lands and
    # what it says is printed then, so memory does not grow with the log.
    # Blank lines are no records, but they are counted, so a line number is
    # the one an editor shows.
    _log_source(args.file, "check")
    splitter = LineSplitter(DEFAULT_MAX_RECORD_BYTES)
    reassembler = Reassembler(seq_scope=args.seq_scope, keep_text=False)
    appended = reassembler.appended
    out = sys.stdout
    violations = 0
    number = 0
    try:
        with _open_stream(args.file) as source:
            try:
                while data := source.read(READ_BLOCK_BYTES):
                    for line in splitter.feed(data):
                        number += 1
                        if _blank(line):
                            continue
                        item = appended(line)
                        for anomaly in item.anomalies:
                            out.write(f"line {number}: {_describe(anomaly)}\n")
                            violations += anomaly.kind not in _LOSS_ONLY
                        if item.gap is not None and item.gap.inferred:
                            out.write(f"line {number}: {_lost_here(item)}\n")
                            violations += 1
            except BrokenPipeError:
                raise  # our stdout, not the log: handled below
            except OSError as exc:
                raise _UsageError(f"cannot read {args.file!r}: {exc.strerror}") from None
        rest = splitter.end()
        if rest is not None:
            out.write(f"line {number + 1}: {_unterminated(rest)}\n")
            violations += 1
        for report in reassembler.reports(ended=True):
            if report.unseen_bytes:
                # The log has ended: bytes its last total counts never arrived.
                call, subkind = report.key
                out.write(
                    f"end of log: lost [{call}/{subkind}]: its last total_bytes counts"
                    f" {plural(report.unseen_bytes, 'byte', 'bytes')} that no frame delivered\n"
                )
                violations += 1
            if report.overrun_bytes:
                # Its last frames delivered more than their total counts.
                call, subkind = report.key
                out.write(
                    f"end of log: total_overrun [{call}/{subkind}]: its last frames delivered"
                    f" {plural(report.overrun_bytes, 'byte', 'bytes')} more than their"
                    " total_bytes counts\n"
                )
                violations += 1
            out.write(report.summary() + "\n")
        verdict = "ok" if not violations else plural(violations, "violation", "violations")
        out.write(
            f"checked {plural(reassembler.records, 'record', 'records')},"
            f" {plural(len(reassembler.streams), 'stream', 'streams')},"
            f" {plural(reassembler.ignored, 'other message', 'other messages')}: {verdict}\n"
        )
        out.flush()
    except BrokenPipeError:  # `check FILE | head`: the reader has seen enough
        return _stdout_closed()
    return 0 if not violations else 1


def _lost_here(item: Appended) -> str:
    assert item.gap is not None
    key = "" if item.key is None else f" [{item.key.tool_call_id}/{item.key.subkind}]"
    return (
        f"lost{key}: total_bytes counts {plural(item.gap.lost_bytes, 'byte', 'bytes')}"
        if item.gap.exact
        else f"lost{key}: total_bytes counts {item.gap.describe()} bytes"
    ) + " that no frame delivered (a frame lost in transport)"
