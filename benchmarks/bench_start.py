"""How long ``kigi-stream`` takes to start, beside the interpreter's own start.

Each case is a fresh process, run ``--runs`` times in turn (interleaved, so a
load that comes and goes hits every case alike); the median wall time is
printed, and beside it the baseline measured in the same run:

- ``python -c pass``: the interpreter alone (the floor);
- ``import kigi_tool_runtime``: the package alone (its names load on first use);
- ``... and every name``: the package with all it exports loaded, what every
  import of it cost before the names were loaded lazily, and what the console
  script paid before its handler for an early Ctrl-C was in place;
- ``kigi-stream --version``: the console script, parsing its arguments;
- ``kigi-stream run -- true``: a whole call of a command that does nothing.

The goal: the console script's own module (where its handler for an early
Ctrl-C is put in place) imports within :data:`GOAL_ENTRY_MS` of the
interpreter's start, well before the package's import, which comes after it.

Run: ``python benchmarks/bench_start.py`` (``--runs N``; ``--quick``: 5 runs;
``--check`` exits 1 when the goal was missed).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from _goals import Goals, add_check_flag

KIGI_STREAM = str(Path(sysconfig.get_path("scripts")) / "kigi-stream")

#: The goal: the entry module's import costs at most this many ms above the
#: interpreter's own start.
GOAL_ENTRY_MS = 40.0

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import the entry module": [sys.executable, "-c", "import kigi_tool_runtime._cli._entry"],
    "import kigi_tool_runtime": [sys.executable, "-c", "import kigi_tool_runtime"],
    "... and every name": [
        sys.executable,
        "-c",
        "import kigi_tool_runtime as k; [getattr(k, n) for n in k.__all__]",
    ],
    "kigi-stream --version": [KIGI_STREAM, "--version"],
    "kigi-stream run -- true": [KIGI_STREAM, "run", "--", "true"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 runs of each")
    add_check_flag(parser)
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, argv in CASES.items():
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, timeout=60)
            times[name].append(time.perf_counter() - started)
    floor = statistics.median(times["python -c pass"])
    print(f"median of {runs} runs each (ms), and above the interpreter's own start:")
    for name, spent in times.items():
        median = statistics.median(spent)
        print(f"  {name:<26} {median * 1000:7.1f}   +{(median - floor) * 1000:6.1f}")
    goals = Goals()
    entry = statistics.median(times["import the entry module"]) - floor
    goals.record(
        "entry module import above the interpreter (ms)", entry * 1000, GOAL_ENTRY_MS, at_most=True
    )
    sys.exit(goals.finish(args.check))


if __name__ == "__main__":
    main()
