"""What the benchmarks that time flooding calls one way against another share:
their options (``--quick``, ``--mb``, ``--check``) and the bytes and rounds
those give, one call through the stdio ``Client`` timed to its result, and the
median line each way of carrying a call prints.

A round is anything with ``seconds``, ``delivered`` (text bytes), ``frames``
and ``gaps`` (gap frames): :class:`Round`, or a benchmark's subclass of it
that adds its own figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from _flood import flood_command
from _goals import add_check_flag

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import Client, StreamState

MB = 1_000_000


@dataclass
class Round:
    """One call: seconds, delivered text bytes, frames and gap frames."""

    seconds: float
    delivered: int
    frames: int
    gaps: int


def flood_parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """The parser of a flooding benchmark whose docstring is ``doc``:
    ``--quick`` (helped as ``quick_help``), ``--mb`` and ``--check``; a
    benchmark may add its own options before it parses."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--mb", type=int, help="MB the child writes per round")
    add_check_flag(parser)
    return parser


def flood_plan(
    args: argparse.Namespace, *, mb: int, rounds: int, quick_mb: int, quick_rounds: int
) -> tuple[int, int]:
    """The bytes the child writes per round (``--mb``, else ``mb`` or, with
    ``--quick``, ``quick_mb`` MB) and the rounds (``rounds``, or
    ``quick_rounds`` with ``--quick``)."""
    size = (args.mb or (quick_mb if args.quick else mb)) * MB
    return size, quick_rounds if args.quick else rounds


async def client_flood(client: Client, size: int) -> tuple[float, StreamState]:
    """Seconds one shell call flooding ``size`` bytes through ``client`` took
    to its result, and the call's reassembled stream."""
    started = time.perf_counter()
    call = client.call("bash", {"command": flood_command(size)})
    async for item in call:
        if isinstance(item, ToolCallResult):
            break
    elapsed = time.perf_counter() - started
    state = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
    assert state is not None
    return elapsed, state


def median_rate(rounds: Sequence[Round]) -> float:
    """The median of the rounds' delivered bytes per second."""
    return statistics.median(r.delivered / r.seconds for r in rounds)


def median_line(name: str, rounds: Sequence[Round], size: int, *, width: int, per: str) -> str:
    """One way's line: its name (padded to ``width``), the median MB/s and
    ``per``/s (frames, notifications) of its rounds, their gap frames, and the
    share of the ``size`` bytes a round wrote that were delivered."""
    rates = [r.delivered / r.seconds / MB for r in rounds]
    counts = [r.frames / r.seconds for r in rounds]
    delivered = sum(r.delivered for r in rounds) / (size * len(rounds))
    gaps = sum(r.gaps for r in rounds)
    return (
        f"{name:{width}s} median {statistics.median(rates):7.1f} MB/s"
        f" {statistics.median(counts):7.0f} {per}/s"
        f"  gap frames {gaps:4d}  delivered {delivered:4.0%}"
    )
