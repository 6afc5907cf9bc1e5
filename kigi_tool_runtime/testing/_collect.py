"""``collect``: run a tool through :func:`run_tool` and keep what it yields.

An I/O edge of the testing kit: it runs an event loop (``asyncio.run``) for
the synchronous variant, so a plain test function can run a tool in one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from kigi_tool_protocol import CustomProgress, PartialResultPayload, ToolProgress

from .._runner import run_tool
from .._tool import Tool, ToolContext, ToolError, ToolResult

__all__ = ("Collected", "collect", "collect_async")


class Collected(NamedTuple):
    """What one tool call produced: its progress ``frames`` in order, its
    ``terminal`` (a :class:`ToolResult` or :class:`ToolError`), and how many
    items it yielded after the terminal (dropped by the runner). ``frames`` is
    empty when the call was collected with ``keep=False``."""

    frames: tuple[ToolProgress, ...]
    terminal: ToolResult | ToolError
    dropped_after_terminal: int

    @property
    def payloads(self) -> list[PartialResultPayload]:
        """The ``PartialResultPayload`` of every custom frame that carries one."""
        return [
            frame.payload
            for frame in self.frames
            if isinstance(frame, CustomProgress) and isinstance(frame.payload, PartialResultPayload)
        ]

    @property
    def text(self) -> str:
        """The concatenated deltas of :attr:`payloads`."""
        return "".join(payload.delta for payload in self.payloads)

    @property
    def result(self) -> Any:
        """The terminal's value.

        Raises:
            AssertionError: the call ended with an error; the message is the
                error's kind and message.
        """
        terminal = self.terminal
        if isinstance(terminal, ToolError):
            raise AssertionError(
                f"the tool call failed ({terminal.kind.value}): {terminal.message}"
            )
        return terminal.value


async def collect_async(
    tool: Tool[Any],
    args: Any,
    *,
    wants_progress: bool = True,
    call_id: str = "call-0",
    timeout_ms: int | None = None,
    on_frame: Callable[[ToolProgress], Awaitable[None] | None] | None = None,
    keep: bool = True,
) -> Collected:
    """Run ``tool`` with ``args`` (an ``args_type`` instance, decoded JSON or JSON
    text) to its terminal and collect everything it yields.

    ``on_frame`` (a plain or ``async`` function) sees each progress frame as it
    arrives; the call waits while it runs, so a slow one is a slow consumer.
    ``keep=False`` keeps no frames (``on_frame`` sees them all), so a call that
    streams far more than fits in memory can still be checked frame by frame.

    Raises:
        IdentifierError: ``call_id`` is empty.
    """
    ctx = ToolContext(call_id, wants_progress=wants_progress)
    frames: list[ToolProgress] = []
    terminal: ToolResult | ToolError | None = None
    async with run_tool(tool, args, ctx=ctx, timeout_ms=timeout_ms) as run:
        async for item in run:
            if isinstance(item, (ToolResult, ToolError)):
                terminal = item
                continue
            if keep:
                frames.append(item)
            if on_frame is not None:
                pending = on_frame(item)
                if pending is not None:
                    await pending
    # The runner's grammar guarantees a terminal, always last.
    assert terminal is not None, "run_tool ended without a terminal"
    return Collected(tuple(frames), terminal, run.statistics().after_terminal)


def collect(
    tool: Tool[Any],
    args: Any,
    *,
    wants_progress: bool = True,
    call_id: str = "call-0",
    timeout_ms: int | None = None,
    on_frame: Callable[[ToolProgress], Awaitable[None] | None] | None = None,
    keep: bool = True,
) -> Collected:
    """:func:`collect_async` in a fresh event loop, for synchronous tests.

    Raises:
        IdentifierError: ``call_id`` is empty.
        RuntimeError: called from a running event loop (use
            :func:`collect_async` there).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("collect() cannot run inside an event loop; await collect_async() there")
    return asyncio.run(
        collect_async(
            tool,
            args,
            wants_progress=wants_progress,
            call_id=call_id,
            timeout_ms=timeout_ms,
            on_frame=on_frame,
            keep=keep,
        )
    )
