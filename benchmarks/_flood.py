"""The command every transport benchmark streams: a flood of mixed ASCII and
2- and 3-byte characters, written in 64 KiB blocks as fast as the pipe takes
them, ``size`` bytes in all."""

from __future__ import annotations

import sys

FLOOD = (
    "import os, sys\n"
    "line = b'the quick brown fox jumps over the lazy dog 0123456789 '\n"
    "line += '\u00e9\u20ac\\n'.encode()\n"
    "block = line * (65536 // len(line))\n"
    "left = int(sys.argv[1])\n"
    "while left > 0:\n"
    "    left -= os.write(1, block[: min(left, len(block))])\n"
)


def flood_command(size: int) -> list[str]:
    """The argv of a flood of ``size`` bytes."""
    return [sys.executable, "-c", FLOOD, str(size)]
