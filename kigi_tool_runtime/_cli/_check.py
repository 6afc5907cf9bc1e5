"""``kigi-stream check``: decode a frame log strictly in one pass, print each
stream's loss report and every violation with its line number, and exit 1 on
any (loss alone is not one)."""

from __future__ import annotations

import argparse
import sys
from typing import Final

from .._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES, Appended, Reassembler
from .._text import plural
from .._transport._file_follow import READ_BLOCK_BYTES
from .._wire._split import LineSplitter
from ._exits import UsageError, stdout_closed
from ._framelog import blank, describe, log_source, open_log, unterminated

__all__ = ()

#: Anomaly kinds that are reported loss, not broken protocol (``check`` passes them).
_LOSS_ONLY: Final = frozenset({"dropped_frames"})


def check(args: argparse.Namespace) -> int:
    """Check the log ``args.file``; return the exit status.

    Raises:
        UsageError: a directory, a missing file, or a read that failed.
    """
    # One pass over the log, each call's seq on its own counter (or the
    # connection's), keeping no text: each record is checked as it lands and
    # what it says is printed then, so memory does not grow with the log.
    # Blank lines are no records, but they are counted, so a line number is
    # the one an editor shows.
    log_source(args.file, "check")
    splitter = LineSplitter(DEFAULT_MAX_RECORD_BYTES)
    reassembler = Reassembler(seq_scope=args.seq_scope, keep_text=False)
    appended = reassembler.appended
    out = sys.stdout
    violations = 0
    number = 0
    try:
        with open_log(args.file) as source:
            try:
                while data := source.read(READ_BLOCK_BYTES):
                    for line in splitter.feed(data):
                        number += 1
                        if blank(line):
                            continue
                        item = appended(line)
                        for anomaly in item.anomalies:
                            out.write(f"line {number}: {describe(anomaly)}\n")
                            violations += anomaly.kind not in _LOSS_ONLY
                        if item.gap is not None and item.gap.inferred:
                            out.write(f"line {number}: {_lost_here(item)}\n")
                            violations += 1
            except BrokenPipeError:
                raise  # our stdout, not the log: handled below
            except OSError as exc:
                raise UsageError(f"cannot read {args.file!r}: {exc.strerror}") from None
        rest = splitter.end()
        if rest is not None:
            out.write(f"line {number + 1}: {unterminated(rest)}\n")
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
        return stdout_closed()
    return 0 if not violations else 1


def _lost_here(item: Appended) -> str:
    assert item.gap is not None
    key = "" if item.key is None else f" [{item.key.tool_call_id}/{item.key.subkind}]"
    return (
        f"lost{key}: total_bytes counts {plural(item.gap.lost_bytes, 'byte', 'bytes')}"
        if item.gap.exact
        else f"lost{key}: total_bytes counts {item.gap.describe()} bytes"
    ) + " that no frame delivered (a frame lost in transport)"
