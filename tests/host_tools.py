"""In-process stand-ins for the commands the host tests run, where the
promise is how the host shows a call (its frames, its losses, its silences)
rather than what a real process does: no process is started. One real
command per host keeps the end-to-end proof.

``split_tool`` writes pieces one at a time, pausing past its pacing interval
between them, so every piece reaches the call on its own and each 2-, 3- or
4-byte character arrives half-written. ``quiet_tool`` writes a line, is
silent a while, and writes another (for heartbeats)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from kigi_tool_runtime import Output, tool
from kigi_tool_runtime._tools._function import FunctionTool

#: The pacing interval of the split tools, and the pause between pieces (past it).
PACING_S = 0.01
PAUSE_S = 0.03


def pieces_of(text: str, cuts: Sequence[int]) -> list[bytes]:
    """``text``'s UTF-8 bytes cut at the byte offsets ``cuts``."""
    data = text.encode()
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if data[a:b]]


def every_byte(text: str) -> list[bytes]:
    """``text``'s UTF-8 bytes one piece each."""
    return [bytes([byte]) for byte in text.encode()]


def split_tool(
    pieces: Sequence[bytes], *, cap: int, name: str = "bash", tail_bytes: int | None = None
) -> FunctionTool:
    """A function tool ``name`` (no arguments) that writes ``pieces`` one
    write each, :data:`PAUSE_S` apart, at the cap ``cap``; it returns
    ``"written"``."""
    parts = list(pieces)

    async def write_pieces(out: Output) -> str:
        """Write the pieces one at a time."""
        for piece in parts:
            out.write(piece)
            await asyncio.sleep(PAUSE_S)
        return "written"

    extra = {} if tail_bytes is None else {"tail_bytes": tail_bytes}
    return tool(name=name, max_delta_bytes=cap, pacing=PACING_S, **extra)(write_pieces)


def quiet_tool(silence_s: float, *, name: str = "bash") -> FunctionTool:
    """A function tool ``name`` (no arguments) that writes ``a``, is silent
    ``silence_s`` seconds, then writes ``b`` (each a line); it returns
    ``"written"``."""

    async def quiet(out: Output) -> str:
        """Write a line, wait, write another."""
        out.write("a\n")
        await asyncio.sleep(silence_s)
        out.write("b\n")
        return "written"

    return tool(name=name, pacing=PACING_S)(quiet)
