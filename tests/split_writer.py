"""The script of a command whose characters reach a tick half-written: it
writes é, € and 😀 with every character cut across writes 150 ms apart (the
shell tool drains every 100 ms). Run it as ``[sys.executable, "-c", SPLIT]``;
its whole output is :data:`SPLIT_TEXT`."""

from __future__ import annotations

from typing import Final

SPLIT: Final = (
    "import sys, time\n"
    "pieces = [b'caf\\xc3', b'\\xa9 \\xe2\\x82', b'\\xac \\xf0\\x9f', b'\\x98\\x80', b' end\\n']\n"
    "for piece in pieces:\n"
    "    sys.stdout.buffer.write(piece); sys.stdout.flush(); time.sleep(0.15)\n"
)

#: What :data:`SPLIT` writes, decoded.
SPLIT_TEXT: Final = "café € 😀 end\n"
