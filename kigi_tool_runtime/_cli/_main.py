"""``kigi-stream``, the entry point: parse the command line, make sure the
standard streams a command needs are open, and hand over to the command.

Commands:

- ``run [options] -- CMD ...``: run CMD through the shell tool. One argument is
  a shell command line (run by bash); several are a program and its arguments.
  The command's stdin is ``/dev/null``. By default the reassembled output is
  printed live to stdout and a summary line goes to stderr. Into a pipe or a
  file ``run`` waits for its reader (``--wait``): the command's pipe is read
  only as fast as the output is taken, so nothing is lost; on a terminal, or
  with ``--drop``, what the reader fell behind on is skipped, with a marker
  on a line of its own where bytes were lost. The summary goes on a line of
  its own even when the output did not end with a newline; ``--json`` prints
  the ``tool_call_progress`` notification lines instead, byte for byte what
  ``serve`` would send. On a terminal, a run
  longer than a moment shows a live status line on stderr (bytes, rate and
  elapsed time, redrawn while the command is silent too); piped, stderr only
  gets the summary.
- ``serve``: the shell tool (``bash``), or the tools ``--tools MODULE:ATTR``
  names (``_tools_spec``), over stdin/stdout; ``serve --help``
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
  JetStream (``_nats``; needs the ``nats`` extra).

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
import os
import sys
from collections.abc import Sequence
from typing import Final

from ._check import check
from ._exits import EXIT_FAILED, EXIT_USAGE, UsageError
from ._follow import follow
from ._nats import NatsUsageError
from ._parser import build_parser
from ._run import run_command
from ._serve import serve

__all__ = ()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Raises:
        SystemExit: bad usage (status 2, with a message on stderr), ``--help``.
    """
    parser = build_parser()
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
            return run_command(args)
        if args.command == "serve":
            return serve(args)
        if args.command == "follow":
            return follow(args)
        return check(args)
    except (UsageError, NatsUsageError) as exc:
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
            file = open(fd, mode, encoding="utf-8", closefd=False)  # noqa: SIM115
            setattr(sys, attribute, file)
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
