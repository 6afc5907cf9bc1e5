"""What ``check_stream`` costs, against producing the stream and a bare oracle.

Each source is streamed through the core (4 KiB writes into a ``TailBuffer``,
drained after every write, finished at the end); then, in the same run:

- ``produce``: that streaming itself (the baseline: the checker should cost a
  small multiple of making the frames);
- ``check``: ``check_stream`` over the frames (every rule, frame by frame);
- ``oracle``: the least a lossless check can do: join the deltas and compare
  with ``source.decode("utf-8", "replace")`` (the floor; it checks one rule).

Sources: ASCII lines, mixed 1-4-byte text, arbitrary bytes (a quarter
invalid), and ASCII through a tail too small to keep up (gaps to place).

The goal, for each case: ``check`` costs at most :data:`GOAL_CHECK_PER_PRODUCE`
times ``produce`` (a small multiple of making the frames).

Run: ``python benchmarks/bench_check_stream.py`` (``--quick`` for a short run;
``--check`` exits 1 when a goal was missed).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

from _goals import Goals, add_check_flag

from kigi_tool_protocol import CustomProgress, PartialResultPayload, StreamingSpec
from kigi_tool_runtime import DeltaStreamer, TailBuffer
from kigi_tool_runtime.testing import check_stream

MIB = 1024 * 1024
#: The goal: checking a stream costs at most this many times producing it.
GOAL_CHECK_PER_PRODUCE = 4.0
#: A pipe read's worth per write.
WRITE_BYTES = 4 * 1024
#: A tail that keeps up with draining after every write (no gaps).
TAIL_BYTES = 64 * 1024
#: A tail smaller than one write: every write after the first is a gap.
SMALL_TAIL_BYTES = 1024
#: The cap: the 16 KiB default and a small one (many frames per write).
CAPS = (16 * 1024, 256)
#: Best of this many runs of each measurement.
REPEATS = 3


def ascii_source(size: int) -> bytes:
    rng = random.Random(7)
    words = [b"build", b"ok", b"warning:", b"step", b"[done]", b"0x1f", b"tests"]
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + b"\n"
    return bytes(out[:size])


def mixed_source(size: int) -> bytes:
    """Valid text of 1-4-byte characters, at most ``size`` bytes."""
    rng = random.Random(8)
    chars = [c.encode() for c in "aé€😀 \ngrüße"]
    out = bytearray()
    while True:
        char = rng.choice(chars)
        if len(out) + len(char) > size:
            return bytes(out)
        out += char


def binary_source(size: int) -> bytes:
    """Mixed text with a quarter of its bytes overwritten by bytes that break
    UTF-8 (orphans, truncated leads, 0xFF)."""
    rng = random.Random(9)
    out = bytearray(mixed_source(size))
    for _ in range(len(out) // 4):
        out[rng.randrange(len(out))] = rng.choice((0x80, 0xC3, 0xE2, 0xF0, 0xFF))
    return bytes(out)


def produce(source: bytes, cap: int, tail: int) -> list[CustomProgress]:
    buffer = TailBuffer(tail)
    streamer = DeltaStreamer(StreamingSpec(subkind="bench", max_delta_bytes=cap))
    frames: list[CustomProgress] = []
    for at in range(0, len(source), WRITE_BYTES):
        buffer.write(source[at : at + WRITE_BYTES])
        frames += streamer.drain_buffer(buffer)
    frames += streamer.finish_buffer(buffer)
    return frames


def oracle(frames: list[CustomProgress], source: bytes) -> None:
    text = "".join(
        frame.payload.delta for frame in frames if isinstance(frame.payload, PartialResultPayload)
    )
    assert text == source.decode("utf-8", "replace")


def best(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 MiB sources instead of 16 MiB")
    add_check_flag(parser)
    args = parser.parse_args()
    size = (1 if args.quick else 16) * MIB
    goals = Goals()
    print(f"sources of {size // MIB} MiB, {WRITE_BYTES // 1024} KiB writes, best of {REPEATS}")
    print(
        f"{'source':<10} {'cap':>6} {'tail':>7} {'frames':>7} {'produce':>9} {'check':>9}"
        f" {'oracle':>9} {'check/produce':>14} {'check MB/s':>11}"
    )
    cases = [
        ("ascii", ascii_source(size), TAIL_BYTES),
        ("mixed", mixed_source(size), TAIL_BYTES),
        ("binary", binary_source(size), TAIL_BYTES),
        ("gaps", ascii_source(size), SMALL_TAIL_BYTES),
    ]
    for name, source, tail in cases:
        for cap in CAPS:
            if tail < cap:
                continue
            frames = produce(source, cap, tail)
            made = best(lambda: produce(source, cap, tail))  # noqa: B023
            checked = best(lambda: check_stream(frames, source, cap=cap, tail_capacity=tail))  # noqa: B023
            lost = check_stream(frames, source, cap=cap, tail_capacity=tail).lost_bytes
            # With bytes lost there is no text to compare with: no oracle time.
            floor = f"{best(lambda: oracle(frames, source)) * 1000:>7.1f}ms" if not lost else "n/a"  # noqa: B023
            print(
                f"{name:<10} {cap:>6} {tail:>7} {len(frames):>7} {made * 1000:>7.1f}ms"
                f" {checked * 1000:>7.1f}ms {floor:>9} {checked / made:>14.2f}"
                f" {len(source) / checked / 1e6:>11.1f}"
            )
            goals.record(
                f"{name} cap {cap}: check / produce",
                checked / made,
                GOAL_CHECK_PER_PRODUCE,
                at_most=True,
            )
        if name == "gaps":
            print(f"  (gaps: {lost} of {len(source)} bytes lost and placed; no oracle applies)")
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
