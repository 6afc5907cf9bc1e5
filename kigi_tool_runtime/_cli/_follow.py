"""``kigi-stream follow``: print a frame log's reassembled text as it grows,
like ``tail -f``, its anomalies on stderr with their line numbers, until a stop
signal (then the offset to resume from) or, for a pipe or ``--once``, its end.
A log does not say when its run has ended, so a live follow of a finished
one goes on until stopped; on a terminal it says so as it starts. An offset
to resume from must be a line's start (one a stopped follow printed)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO, Final

from .._consumer._loss import DEFAULT_GAP_MARKER, LossReport, StreamKey
from .._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES, Appended, Reassembler
from .._transport._file_follow import READ_BLOCK_BYTES, Follower
from .._wire._split import LineSplitter
from ._exits import EXIT_PIPE_CLOSED, UsageError
from ._framelog import blank, describe, log_source, open_log, unterminated
from ._nats import follow_nats
from ._signals import Stopped, raising_stop_signals

__all__ = ()

#: Records ``follow`` prints at a time: a large log never sits in memory whole.
_PRINT_BATCH: Final = 64


def follow(args: argparse.Namespace) -> int:
    """Follow the log ``args`` name (a FILE, or a call over NATS); return the
    exit status.

    Raises:
        UsageError: no FILE, a directory, a missing file with ``--once``, an
            offset into a pipe, or a log that shrank or was replaced.
        NatsUsageError: ``--nats`` cannot start.
    """
    if args.nats:
        return follow_nats(args)
    if args.file is None:
        raise UsageError("give a FILE (or --nats URL --call ID)")
    return _follow_log(args)


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
                self._err.write(f"kigi-stream follow: line {number}: {describe(anomaly)}\n")
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


def _follow_log(args: argparse.Namespace) -> int:
    path: str | None
    if args.file != "-" and not os.path.lexists(args.file):
        if args.once:
            raise UsageError(f"no such file: {args.file!r}")
        path = args.file  # not there yet: a live follow waits for it
    else:
        path = log_source(args.file, "follow")
    if path is None and args.from_offset:
        raise UsageError(
            f"--from-offset needs a file; {args.file!r} is a stream, read from its start"
        )
    printer = _Printer(sys.stdout.buffer, sys.stderr)
    # Ctrl-C stops it even when started with SIGINT ignored (a job a
    # non-interactive shell put in the background), as it stops run and serve.
    with raising_stop_signals():
        if path is None:
            return _follow_pipe(args, printer)
        return _follow_file(path, args, printer)


def _follow_pipe(args: argparse.Namespace, printer: _Printer) -> int:
    # A pipe has no offsets: read it to its end, as it arrives, then stop.
    splitter = LineSplitter(DEFAULT_MAX_RECORD_BYTES)
    reassembler = Reassembler(seq_scope=args.seq_scope, keep_text=False)
    number = 0
    with open_log(args.file) as source:
        try:
            while True:
                data = source.read(READ_BLOCK_BYTES)
                if not data:
                    break
                items: list[tuple[int, Appended]] = []
                for line in splitter.feed(data):
                    number += 1
                    if not blank(line):
                        items.append((number, reassembler.appended(line)))
                printer.print(items)
        except (KeyboardInterrupt, Stopped):
            return 0
        except BrokenPipeError:
            return EXIT_PIPE_CLOSED
    try:
        printer.ended(reassembler.reports(ended=True))
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    rest = splitter.end()
    if rest is not None:
        sys.stderr.write(f"kigi-stream follow: line {number + 1}: {unterminated(rest)}\n")
    return 0


#: What ends a live follow, said on a terminal as it starts: nothing in a log
#: says that its run has ended, so a finished one is followed like a growing one.
FOLLOW_ENDS: Final = (
    "following {path} as it grows, until Ctrl-C, SIGTERM or SIGHUP (then the offset to"
    " resume from is printed); a log does not say when its run has ended, so a finished"
    " one is followed too: --once reads to its end and exits"
)


def _check_line_start(path: str, offset: int) -> None:
    """Refuse an offset inside a line: its records would start mid-line, and
    each read as undecodable would not say why.

    Raises:
        UsageError: the byte before ``offset`` is there and not a newline.
    """
    if offset == 0:
        return
    try:
        with open(path, "rb") as log:
            log.seek(offset - 1)
            before = log.read(1)
    except OSError:
        return  # not there yet (or unreadable): the follower says what it finds
    if before and before != b"\n":
        raise UsageError(
            f"--from-offset {offset} is inside a line of {path!r} (the byte before it is"
            " not a newline): give the offset of a line's start, such as the one a"
            " stopped follow prints"
        )


def _follow_file(path: str, args: argparse.Namespace, printer: _Printer) -> int:
    _check_line_start(path, args.from_offset)
    if not args.once and sys.stderr.isatty():
        sys.stderr.write(f"kigi-stream follow: {FOLLOW_ENDS.format(path=path)}\n")
        sys.stderr.flush()
    follower = Follower(path, args.from_offset, seq_scope=args.seq_scope, keep_text=False)
    resumable = True
    try:
        # A batch of records at a time: a large log never sits in memory.
        for batch in follower.watch(args.interval, once=args.once, batch=_PRINT_BATCH):
            printer.print(batch)
        return 0
    except (KeyboardInterrupt, Stopped):
        pass
    except ValueError as exc:
        # The log shrank or was replaced: its offset means nothing in the new
        # file, so no resume hint.
        resumable = False
        raise UsageError(str(exc)) from None
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    finally:
        if resumable:
            sys.stderr.write(
                f"kigi-stream follow: stopped at offset {follower.offset}"
                f" (resume with --from-offset {follower.offset})\n"
            )
    return 0
