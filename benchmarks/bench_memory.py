"""Consumer memory: peak RSS added by output that grows, against a fixed budget.

Each case runs in a fresh Python process, once with a small input (the
baseline: interpreter, imports, buffers) and once with the large one, and
reports the peak RSS (``VmHWM``) the large input added over the baseline:

- ``run``: ``kigi-stream run`` of a command writing the output (stdout to
  /dev/null), the live view of a flood;
- ``client``: a :class:`Client` calling ``bash`` on ``kigi-stream serve`` and
  taking every progress item (the client process alone; the server and the
  command are other processes);
- ``check`` and ``follow --once`` of a frame log of that size;
- ``check`` of a flood of ``" \\n"`` lines (each one undecodable), and of a
  log with a million distinct ``tool_call_id`` values.

Every figure should stay under the budget (64 MiB) whatever the size: memory
that grows with the output fails it (each case is a goal; ``--check`` exits 1
on a miss). ``--quick`` uses 128 MiB of output instead of 1 GiB (and smaller
floods). Needs Linux (``/proc/self/status``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _goals import Goals, add_check_flag

MIB = 1024 * 1024
BUDGET_MIB = 64

# What each measuring process runs, with SIZE substituted; it prints its peak
# RSS in KiB on its last stderr line.
_PEAK = (
    "import atexit, sys\n"
    "def _peak():\n"
    "    for row in open('/proc/self/status'):\n"
    "        if row.startswith('VmHWM:'):\n"
    "            sys.stderr.write('PEAK ' + row.split()[1] + '\\n')\n"
    "atexit.register(_peak)\n"
)

# A command writing SIZE bytes of lines (ASCII and a few multi-byte
# characters) in 64 KiB writes.
_WRITER = (
    "import os\n"
    "size = {size}\n"
    "line = ('y' * 60 + ' é✓😀\\n').encode()\n"
    "block = line * (65536 // len(line))\n"
    "while size > 0:\n"
    "    size -= os.write(1, block[:size])\n"
)

_RUN = _PEAK + (
    "import os\n"
    "from kigi_tool_runtime._cli._main import main\n"
    "null = os.open(os.devnull, os.O_WRONLY)\n"
    "os.dup2(null, 1)\n"
    "code = main(['run', '--', sys.executable, '-c', {writer!r}])\n"
)

_CLIENT = _PEAK + (
    "import asyncio\n"
    "from kigi_tool_runtime import Client, CallProgress\n"
    "async def main():\n"
    "    serve = [sys.executable, '-m', 'kigi_tool_runtime', 'serve']\n"
    "    async with await Client.spawn(serve) as client:\n"
    "        call = client.call('bash', {{'command': [sys.executable, '-c', {writer!r}]}})\n"
    "        seen = 0\n"
    "        async for item in call:\n"
    "            if isinstance(item, CallProgress):\n"
    "                seen += len(item.appended.text or '')\n"
    "        sys.stderr.write(f'chars {{seen}}\\n')\n"
    "asyncio.run(main())\n"
)

_CLI = _PEAK + (
    "import os\n"
    "from kigi_tool_runtime._cli._main import main\n"
    "null = os.open(os.devnull, os.O_WRONLY)\n"
    "os.dup2(null, 1)\n"
    "main({argv!r})\n"
)


def _measure(script: str) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time (s) of ``script`` in a fresh interpreter."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=3600
    )
    took = time.monotonic() - started
    peaks = [row for row in done.stderr.splitlines() if row.startswith("PEAK ")]
    if not peaks:
        raise RuntimeError(f"no peak reported:\n{done.stderr[-2000:]}")
    return int(peaks[-1].split()[1]) / 1024, took


def _write_log(path: Path, size: int) -> None:
    """A frame log of ``size`` bytes of output in 16 KiB deltas, as ``serve``
    writes it (one call, seq from 0)."""
    from kigi_tool_protocol import encode_progress_line

    line = "y" * 60 + " é✓😀\n"
    delta = line * (16384 // len(line.encode()))
    step = len(delta.encode())
    total = 0
    seq = 0
    with open(path, "wb") as out:
        while total < size:
            total += step
            body = {"delta": delta, "total_bytes": total, "truncated": False, "gap": False}
            out.write(encode_progress_line("call-1", "bash_output_chunk", body, seq=seq))
            seq += 1


def _write_blank_flood(path: Path, size: int) -> None:
    with open(path, "wb") as out:
        out.write(b" \n" * (size // 2))


def _write_many_calls(path: Path, calls: int) -> None:
    from kigi_tool_protocol import encode_progress_line

    with open(path, "wb") as out:
        for n in range(calls):
            body = {"delta": "a", "total_bytes": 1, "truncated": False, "gap": False}
            out.write(encode_progress_line(f"call-{n}", "bash_output_chunk", body, seq=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB of output, not 1 GiB")
    add_check_flag(parser)
    args = parser.parse_args()
    size = (128 if args.quick else 1024) * MIB
    small = 1 * MIB
    flood = (4 if args.quick else 16) * MIB
    calls = 100_000 if args.quick else 1_000_000

    rows: list[tuple[str, str, float, float, float]] = []

    def case(name: str, amount: str, base: str, large: str) -> None:
        base_peak, _ = _measure(base)
        peak, took = _measure(large)
        # Below the baseline is noise (pages the small run touched and this one
        # did not): nothing was added.
        peak = max(peak, base_peak)
        rows.append((name, amount, base_peak, peak, took))
        print(
            f"{name:<22} {amount:>10}  baseline {base_peak:7.1f} MiB  peak {peak:7.1f} MiB"
            f"  added {peak - base_peak:6.1f} MiB  {took:6.1f} s",
            flush=True,
        )

    label = f"{size // MIB} MiB"
    case(
        "run",
        label,
        _RUN.format(writer=_WRITER.format(size=small)),
        _RUN.format(writer=_WRITER.format(size=size)),
    )
    case(
        "client",
        label,
        _CLIENT.format(writer=_WRITER.format(size=small)),
        _CLIENT.format(writer=_WRITER.format(size=size)),
    )
    with tempfile.TemporaryDirectory() as scratch:
        base_log, log = Path(scratch) / "small.jsonl", Path(scratch) / "large.jsonl"
        _write_log(base_log, small)
        _write_log(log, size)
        label = f"{os.path.getsize(log) // MIB} MiB log"
        for command in (["check"], ["follow", "--once"]):
            case(
                " ".join(command),
                label,
                _CLI.format(argv=[*command, str(base_log)]),
                _CLI.format(argv=[*command, str(log)]),
            )
        log.unlink()
        _write_blank_flood(log, flood)
        case(
            "check blank lines",
            f"{flood // MIB} MiB",
            _CLI.format(argv=["check", str(base_log)]),
            _CLI.format(argv=["check", str(log)]),
        )
        _write_many_calls(log, calls)
        case(
            "check many calls",
            f"{calls} ids",
            _CLI.format(argv=["check", str(base_log)]),
            _CLI.format(argv=["check", str(log)]),
        )
    goals = Goals()
    for name, amount, base, peak, _ in rows:
        goals.record(f"{name} ({amount}): MiB of RSS added", peak - base, BUDGET_MIB, at_most=True)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
