"""`kigi-stream run` into /dev/null and into a pipe, against the child alone, same run.

A child writes N MiB as fast as it can. The baseline runs it alone with its
stdout on the same sink; `kigi-stream run -- CHILD` runs it through the shell
tool and writes the reassembled text to that sink. The sinks are /dev/null (a
write that never waits) and a pipe into `cat > /dev/null` (a live reader).
A last row runs a smaller child at `--cap 1` (one frame per character), where
the cost of each stdout write shows. The gaps are what the summary line counts:
into /dev/null, which always keeps up, a run loses nothing; into a pipe the
reader competes for the CPU, and a run that falls a tail behind reports a gap.

    python benchmarks/bench_run.py            # 256 MiB, best of 3
    python benchmarks/bench_run.py --quick    # 32 MiB, once

It ends with which goals were met; ``--check`` exits 1 when one was missed.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time

from _goals import Goals, add_check_flag

MIB = 1024 * 1024
#: The goal of the `--cap 1` row: frames written per second.
CAP1_FRAMES_PER_S = 100_000
#: Characters the `--cap 1` row writes (one frame each).
CAP1_CHARS = 300_000

CHILD = """
import os, sys
block = b"abcdefghijklmno\\n" * 4096
remaining = int(sys.argv[1])
while remaining > 0:
    remaining -= os.write(1, block[: min(remaining, len(block))])
"""

RUN = [sys.executable, "-m", "kigi_tool_runtime", "run"]


def child(size: int) -> list[str]:
    return [sys.executable, "-c", CHILD, str(size)]


def timed(argv: list[str], into_pipe: bool) -> tuple[float, str]:
    """Seconds ``argv`` took with stdout on the sink, and its stderr."""
    started = time.monotonic()
    if into_pipe:
        line = f"{shlex.join(argv)} | cat > /dev/null"
        done = subprocess.run(["bash", "-c", line], stderr=subprocess.PIPE, check=True)
    else:
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    return time.monotonic() - started, done.stderr.decode()


def gaps(summary: str) -> int:
    found = re.search(r"(\d+) gaps?,", summary)
    assert found is not None, summary
    return int(found[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB, one round")
    parser.add_argument("--mb", type=int, help="MiB the child writes")
    add_check_flag(parser)
    args = parser.parse_args()
    size = (args.mb or (32 if args.quick else 256)) * MIB
    rounds = 1 if args.quick else 3
    goals = Goals()
    print(f"{size // MIB} MiB, best of {rounds}")
    print(f"{'sink':<10} {'child alone':>12} {'kigi-stream run':>16} {'share':>6} {'gaps':>5}")
    for name, into_pipe in (("/dev/null", False), ("pipe", True)):
        alone = min(timed(child(size), into_pipe)[0] for _ in range(rounds))
        runs = [timed([*RUN, "--", *child(size)], into_pipe) for _ in range(rounds)]
        seconds = min(run[0] for run in runs)
        lost = max(gaps(run[1]) for run in runs)
        print(
            f"{name:<10} {size / MIB / alone:>8.0f} MB/s {size / MIB / seconds:>12.0f} MB/s"
            f" {alone / seconds:>6.2f} {lost:>5}"
        )
        if not into_pipe:  # a pipe's reader competes for the CPU: gaps there are load
            goals.record(f"no gaps into {name}", -lost, 0)
    cap1 = min(
        timed([*RUN, "--cap", "1", "--", *child(CAP1_CHARS)], False)[0] for _ in range(rounds)
    )
    rate = CAP1_CHARS / cap1
    print(f"--cap 1: {CAP1_CHARS} frames in {cap1:.2f} s, {rate:,.0f} frames/s")
    goals.record("--cap 1 frames per second", rate, CAP1_FRAMES_PER_S)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
