"""``kigi-stream``'s argument parser: its commands, their options and help
texts, and the checks of each option's value (bad usage exits 2)."""

from __future__ import annotations

import argparse
import sys
from typing import Final, NoReturn, get_args

from kigi_tool_protocol import __version__
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES, MAX_FRAME_BYTES_CEILING

from .._call._heartbeat import HEARTBEAT_S
from .._call._status import MESSAGE_MODES
from .._consumer._reassembler import SeqScope
from .._mcp_limits import HTTP_SESSION_IDLE_S, MAX_CALLS_IN_FLIGHT, MAX_HTTP_SESSIONS
from .._tools._runner import STOP_WAIT_S
from .._tools._shell import DEFAULT_TAIL_CAPACITY, DEFAULT_TICK_S
from .._transport._file_follow import DEFAULT_POLL_INTERVAL
from ._exits import EXIT_USAGE
from ._nats import add_follow_options, add_serve_options
from ._status import size_text

__all__ = ()

#: The longest ``run --timeout`` in seconds: a century. Past it a deadline means
#: nothing (leave the option out for none), and its milliseconds stay far inside
#: the u64 range a tool's deadline is carried in.
MAX_RUN_TIMEOUT_S: Final = 100 * 365 * 24 * 3600
#: The longest ``follow --interval`` (a longer sleep overflows the clock).
MAX_POLL_INTERVAL_S: Final = 24 * 3600

SERVE_DESCRIPTION: Final = """\
Serve tools (the shell tool bash, or your own with --tools MODULE:ATTR) as
JSON-RPC 2.0, one message per line: requests on stdin; replies and
tool_call_progress notifications on stdout (--mcp, --mcp-http and --nats serve
the same tools over MCP or NATS). Calls run concurrently. End of input (or
SIGINT, SIGTERM, SIGHUP) cancels the calls in flight, answers each, and exits.

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
SERVE_EXAMPLE: Final = (
    '{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool_call_id":"c1",'
    '"tool_id":"bash","arguments":{"command":"echo hi"}}}'
)
_SEQ_SCOPES: Final[tuple[SeqScope, ...]] = get_args(SeqScope)


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


def _seconds_at_most(text: str, maximum: int, span: str, advice: str = "") -> float:
    value = _positive_float(text)
    if value > maximum:
        raise argparse.ArgumentTypeError(
            f"must be at most {maximum} seconds ({span}), got {text}{advice}"
        )
    return value


def _timeout_seconds(text: str) -> float:
    return _seconds_at_most(
        text, MAX_RUN_TIMEOUT_S, "100 years", "; leave --timeout out for no deadline"
    )


def _interval_seconds(text: str) -> float:
    return _seconds_at_most(text, MAX_POLL_INTERVAL_S, "a day")


def _heartbeat_seconds(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _seconds_at_most(text, MAX_POLL_INTERVAL_S, "a day", "; 0 turns heartbeats off")


def build_parser() -> argparse.ArgumentParser:
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
        f" {size_text(DEFAULT_MAX_DELTA_BYTES)}; 0: one character per delta)",
    )
    run.add_argument(
        "--tail",
        type=_positive_int,
        default=DEFAULT_TAIL_CAPACITY,
        metavar="BYTES",
        help="bytes of output kept between drains; a reader further behind sees a gap"
        f" (default {DEFAULT_TAIL_CAPACITY}, {size_text(DEFAULT_TAIL_CAPACITY)};"
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
        help="pacing interval in milliseconds: partial frames at most this often; a full"
        f" frame and the first output after a quiet spell go at once (default"
        f" {DEFAULT_TICK_S * 1000:g})",
    )
    run.add_argument(
        "--timeout",
        type=_timeout_seconds,
        metavar="SECONDS",
        help="seconds before the command's process group is stopped, exit 124"
        " (default: no deadline)",
    )
    pacing = run.add_mutually_exclusive_group()
    pacing.add_argument(
        "--wait",
        dest="drop",
        action="store_false",
        default=None,
        help="a slow reader of stdout slows the command, as with cat: its pipe is read only"
        " as fast as the output is taken, so nothing is lost (the default when stdout is"
        " a pipe or a file)",
    )
    pacing.add_argument(
        "--drop",
        dest="drop",
        action="store_true",
        default=None,
        help="a live view: the command never waits on the reader of stdout; output a"
        " reader falls --tail bytes behind on is skipped and marked, on a line of its own,"
        " with how many bytes were lost (the default on a terminal)",
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
        help="serve the shell tool, or your own (--tools), over stdio, MCP or NATS",
        description=SERVE_DESCRIPTION,
        epilog=f"example request (one line):\n  {SERVE_EXAMPLE}\n\n"
        "docs/hosts/stdio.md shows a whole session: a request, its progress, the result, a cancel.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--max-frame-bytes",
        type=_positive_int,
        default=MAX_FRAME_BYTES_CEILING,
        metavar="BYTES",
        help=f"longest input line accepted (default {MAX_FRAME_BYTES_CEILING},"
        f" {size_text(MAX_FRAME_BYTES_CEILING)})",
    )
    serve.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="serve these tools instead of the shell tool (repeatable): ATTR in MODULE (a module"
        " name or a .py file) is a Tool, a list of tools or a function returning them",
    )
    serve.add_argument(
        "--shell",
        action="store_true",
        help="serve the shell tool (bash) too; the default when no --tools is given",
    )
    serve.add_argument(
        "--mcp", action="store_true", help="speak MCP over stdin/stdout (needs the mcp extra)"
    )
    serve.add_argument(
        "--mcp-http",
        metavar="[HOST:]PORT",
        help="speak MCP over streamable HTTP (host 127.0.0.1 unless given; needs the mcp"
        f" extra): at most {MAX_HTTP_SESSIONS} sessions open, one idle for"
        f" {HTTP_SESSION_IDLE_S / 60:g} minutes closed, and {MAX_CALLS_IN_FLIGHT} calls"
        " running (over every session; one more is refused busy)",
    )
    serve.add_argument(
        "--mcp-message",
        choices=MESSAGE_MODES,
        default="status",
        help="what an MCP progress message says: status (the default) the newest complete"
        " line, for hosts that show the latest message (Claude Code, VS Code); delta the"
        " output itself, for hosts that append every message",
    )
    serve.add_argument(
        "--stop-wait",
        type=_interval_seconds,
        metavar="SECONDS",
        help=f"on JSON-RPC over stdio: how long a call's tool has to stop once cancelled"
        f" (end of input, a stop signal) before serve names it and exits without it"
        f" (default {STOP_WAIT_S:g}; at most a day)",
    )
    serve.add_argument(
        "--heartbeat",
        type=_heartbeat_seconds,
        default=HEARTBEAT_S,
        metavar="SECONDS",
        help=f"while a call has written nothing for this long, tell the host it is alive"
        f" (how long it has run and been silent), again every SECONDS of silence"
        f" (default {HEARTBEAT_S:g}; 0 turns it off)",
    )

    follow = commands.add_parser(
        "follow",
        help="print a frame log's text as it grows, like tail -f",
        description="Print the reassembled text of a frame log (run --json's output, or"
        " what serve wrote) as it grows, like tail -f: a marker where bytes were lost,"
        " each anomaly on stderr with its line number, and, once the log holds more than"
        " one stream, a ==> CALL/SUBKIND <== label whenever the text switches streams."
        " Ctrl-C or SIGTERM stops it and prints the offset to resume from. A log does not"
        " say when its run has ended: a finished one is followed until stopped, as a"
        " growing one is (--once reads to the end and exits; standard input and pipes"
        " end at their end).",
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
        help="start at this byte offset, the start of a line, such as one a stopped"
        " follow printed (default 0)",
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
