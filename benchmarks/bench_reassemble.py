"""Reassembly throughput: strict decode + absorb, beside strict decoding alone.

For 16 KiB and 256 B deltas, one stream of ``tool_call_progress`` JSON lines
(the wire's bytes, with a connection ``seq``) is

- decoded alone, strictly, into typed frames (the baseline); the frames are kept,
  as any consumer must keep what it will show, and dropped in a second baseline;
- decoded and absorbed by a :class:`Reassembler` (``absorb_line``); then also
  the text read once at the end (the lazy join), then also the loss report
  (whose byte counts cost a UTF-8 encode of text that is not ASCII).

Figures are frames/s and MB/s of delta text, best of several runs taken
round-robin, and the time each adds over decoding with the frames kept (what a
consumer that shows the text must at least do) and with them dropped (decoding
and nothing else). ``--quick`` for a short run.

Goals, for each case: decode + absorb takes at most :data:`GOAL_ABSORB` times
decoding with the frames kept, and the whole consumer (through the loss report)
at most :data:`GOAL_REPORT` times. The run ends with which goals were met;
``--check`` exits 1 when one was missed.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable

from _goals import Goals, add_check_flag

from kigi_tool_protocol import (
    JsonRpcNotification,
    PartialResultPayload,
    ToolCallProgressFrame,
    json_codec,
)
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS
from kigi_tool_runtime import Reassembler

#: Goals, as multiples of the time strict decoding takes with the frames kept:
#: folding them in, and the whole consumer (text read and loss report too).
GOAL_ABSORB = 2.0
GOAL_REPORT = 3.0

TYPED = JsonRpcNotification[ToolCallProgressFrame[PartialResultPayload]]


def make_lines(delta_bytes: int, frames: int, text: str) -> list[bytes]:
    piece = (text * (delta_bytes // len(text.encode()) + 1)).encode()[:delta_bytes]
    delta = piece.decode("utf-8", "ignore")
    lines = []
    total = 0
    for seq in range(frames):
        total += len(delta.encode())
        body = PartialResultPayload(delta=delta, total_bytes=total)
        frame = ToolCallProgressFrame(tool_call_id="call-1", kind="bash_output_chunk", body=body)
        notification = JsonRpcNotification(
            session_id="s", seq=seq, method=METHOD_TOOL_CALL_PROGRESS, params=frame
        )
        lines.append(json_codec.encode(notification))
    return lines


def best_of(
    runs: dict[str, Callable[[list[bytes]], object]], lines: list[bytes], repeats: int
) -> dict[str, float]:
    """The fastest of ``repeats`` timings of each run, taken round-robin so a
    busy moment on a shared machine does not land on one run only."""
    fastest = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            gc.collect()
            start = time.perf_counter()
            result = run(lines)
            fastest[name] = min(fastest[name], time.perf_counter() - start)
            del result
    return fastest


def decode_keep(lines: list[bytes]) -> object:
    decode = json_codec.decode
    return [decode(line, TYPED) for line in lines]


def decode_drop(lines: list[bytes]) -> None:
    decode = json_codec.decode
    for line in lines:
        decode(line, TYPED)


def absorb(lines: list[bytes]) -> object:
    reassembler = Reassembler()
    absorb_line = reassembler.absorb_line
    for line in lines:
        absorb_line(line)
    return reassembler


def absorb_text(lines: list[bytes]) -> object:
    reassembler = Reassembler()
    absorb_line = reassembler.absorb_line
    for line in lines:
        absorb_line(line)
    state = reassembler.stream("call-1", "bash_output_chunk")
    assert state is not None
    assert state.text is not None
    return state.text


def absorb_report(lines: list[bytes]) -> object:
    reassembler = Reassembler()
    absorb_line = reassembler.absorb_line
    for line in lines:
        absorb_line(line)
    state = reassembler.stream("call-1", "bash_output_chunk")
    assert state is not None
    assert state.text is not None
    report = state.report()
    assert report.complete
    assert report.undelivered_bytes == 0
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames and runs")
    add_check_flag(parser)
    args = parser.parse_args()
    goals = Goals()
    repeats = 3 if args.quick else 7
    scale = 1 if args.quick else 4
    cases = [
        ("16 KiB ascii", 16 * 1024, 500 * scale, "build output line 42\n"),
        ("16 KiB mixed", 16 * 1024, 500 * scale, "héllo wörld ✓ 😀 "),
        ("256 B ascii", 256, 20_000 * scale, "build output line 42\n"),
        ("256 B mixed", 256, 20_000 * scale, "héllo wörld ✓ 😀 "),
    ]
    print(
        f"{'case':<14} {'what':<26} {'frames/s':>12} {'MB/s text':>10} "
        f"{'vs kept':>8} {'vs dropped':>10}"
    )
    for name, size, frames, text in cases:
        lines = make_lines(size, frames, text)
        text_mb = frames * size / 1e6
        timings = best_of(
            {
                "decode, frames kept": decode_keep,
                "decode, frames dropped": decode_drop,
                "decode + absorb": absorb,
                "... + read text (join)": absorb_text,
                "... + loss report": absorb_report,
            },
            lines,
            repeats,
        )
        keep = timings["decode, frames kept"]
        drop = timings["decode, frames dropped"]
        for what, seconds in timings.items():
            over_keep = f"{(seconds / keep - 1) * 100:+.0f}%"
            over_drop = f"{(seconds / drop - 1) * 100:+.0f}%"
            print(
                f"{name:<14} {what:<26} {frames / seconds:>12,.0f} "
                f"{text_mb / seconds:>10,.1f} {over_keep:>8} {over_drop:>10}"
            )
        goals.record(
            f"{name}: decode + absorb / decode",
            timings["decode + absorb"] / keep,
            GOAL_ABSORB,
            at_most=True,
        )
        goals.record(
            f"{name}: through the loss report / decode",
            timings["... + loss report"] / keep,
            GOAL_REPORT,
            at_most=True,
        )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
