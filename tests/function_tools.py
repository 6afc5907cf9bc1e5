"""Function tools the tests serve (``serve --tools tests/function_tools.py:TOOLS``),
each a few lines, as a user writes them."""

from __future__ import annotations

import sys
import threading
from typing import Annotated, Literal

import msgspec

from kigi_tool_runtime import CommandResult, Output, ToolError, ToolErrorKind, tool

#: A child that writes its argv's hex strings one write at a time, pausing
#: between: characters split across writes wherever the caller cut them.
SPLIT_CHILD = (
    "import os, sys, time\n"
    "for part in sys.argv[1:]:\n"
    "    os.write(1, bytes.fromhex(part))\n"
    "    time.sleep(0.002)\n"
)

#: What the tests have the split child write: 2-, 3- and 4-byte characters,
#: each cut inside across the child's writes (``SPLIT_PARTS``, hex).
SPLIT_TEXT = "aé€😀\nb"
_SOURCE = SPLIT_TEXT.encode()
SPLIT_PARTS = [_SOURCE[:2].hex(), _SOURCE[2:5].hex(), _SOURCE[5:9].hex(), _SOURCE[9:].hex()]


class Point(msgspec.Struct, forbid_unknown_fields=True):
    x: int
    y: int


@tool
async def count(
    out: Output, to: Annotated[int, msgspec.Meta(ge=0, description="The last number.")] = 3
) -> int:
    """Count from 1 to `to`, a line each."""
    for n in range(1, to + 1):
        out.write(f"{n}\n")
    return to


@tool(name="split-child", max_delta_bytes=2)
async def split_child(out: Output, parts: list[str]) -> CommandResult:
    """Run a child that writes the hex `parts` one write each."""
    return await out.run([sys.executable, "-c", SPLIT_CHILD, *parts])


@tool
async def sleeper(out: Output, pid_file: str) -> None:
    """Start a process group that sleeps, write its pid, and wait for it."""
    script = (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({pid_file!r}, 'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    await out.run([sys.executable, "-c", script])


@tool
async def fails(out: Output, how: Literal["tool_error", "value_error"]) -> None:
    """Write a line, then fail the way `how` says."""
    out.write("about to fail\n")
    if how == "tool_error":
        raise ToolError(ToolErrorKind.FORBIDDEN, "no such thing")
    raise ValueError("the value was wrong")


@tool
def threaded(out: Output, lines: int = 3) -> dict[str, object]:
    """A plain def: runs in a worker thread and writes from there."""
    for n in range(lines):
        out.write(f"line {n}\n".encode())
    return {"thread": threading.current_thread().name, "main": threading.main_thread().name}


@tool
async def typed(
    out: Output,
    name: str,
    size: int,
    ratio: float = 0.5,
    flag: bool = False,
    tags: list[str] | None = None,
    meta: dict[str, int] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    point: Point | None = None,
    nothing: None = None,
) -> dict[str, object]:
    """Echo the arguments it was given."""
    return {
        "name": name,
        "size": size,
        "ratio": ratio,
        "flag": flag,
        "tags": tags,
        "meta": meta,
        "mode": mode,
        "point": None if point is None else [point.x, point.y],
        "nothing": nothing,
    }


@tool
async def big(out: Output, size: int) -> str:
    """Return a string of `size` x's."""
    return "x" * size


TOOLS = [count, split_child, sleeper, fails, threaded, typed, big]


async def _split(out: Output, parts: list[str]) -> CommandResult:
    """Run a child that writes the hex `parts` one write each."""
    return await out.run([sys.executable, "-c", SPLIT_CHILD, *parts])


#: The split child at caps 0 to 4: ``split-0`` .. ``split-4``.
SPLIT_BY_CAP = [tool(name=f"split-{cap}", max_delta_bytes=cap)(_split) for cap in range(5)]

TOOLS += SPLIT_BY_CAP
