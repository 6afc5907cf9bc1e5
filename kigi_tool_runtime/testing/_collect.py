"""``collect``: run a tool through :func:`run_tool` and keep what it yields.

An I/O edge of the testing kit: it runs an event loop (``asyncio.run``) for
the synchronous variant, so a plain test function can run a tool in one line.

The synchronous variant can also put a deadline on the whole call that holds
even when the tool never suspends (a loop that spins without awaiting starves
every asyncio timer): a watchdog thread sends :data:`HANG_SIGNAL` to the main
thread, whose handler raises :class:`ToolHangError` wherever the code is.
"""

from __future__ import annotations

import asyncio
import math
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final, NamedTuple

from kigi_tool_protocol import CustomProgress, PartialResultPayload, ToolProgress

from .._tools._errors import ToolError
from .._tools._runner import run_tool
from .._tools._tool import Tool, ToolContext, ToolResult

__all__ = ("Collected", "ToolHangError", "collect", "collect_async")

#: The signal the watchdog of :func:`collect` sends to interrupt a call past its
#: deadline; its handler is installed only while such a call runs.
HANG_SIGNAL: Final = signal.SIGUSR2


class ToolHangError(AssertionError):
    """A call collected with a deadline did not end in time: the tool (or the
    code it runs) never finished, or never suspended, so nothing else on its
    event loop could run."""


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
    deadline_s: float | None = None,
) -> Collected:
    """:func:`collect_async` in a fresh event loop, for synchronous tests.

    ``deadline_s`` bounds the whole call, the event loop's shutdown included,
    even for a tool that never suspends: past it the call is interrupted where
    it is, the tool's own cleanup runs as for a cancel, and
    :class:`ToolHangError` is raised. It needs the main thread (the watchdog
    interrupts with :data:`HANG_SIGNAL`).

    Raises:
        IdentifierError: ``call_id`` is empty.
        RuntimeError: called from a running event loop (use
            :func:`collect_async` there).
        ToolHangError: the call outlived ``deadline_s``.
        ValueError: ``deadline_s`` is not a positive number, or is given
            outside the main thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("collect() cannot run inside an event loop; await collect_async() there")
    call = collect_async(
        tool,
        args,
        wants_progress=wants_progress,
        call_id=call_id,
        timeout_ms=timeout_ms,
        on_frame=on_frame,
        keep=keep,
    )
    if deadline_s is None:
        return asyncio.run(call)
    try:
        with _watchdog(tool.id, deadline_s) as fired:
            collected = asyncio.run(call)
    finally:
        call.close()  # never started when the watchdog refused the deadline
    if fired:
        # The runner turned the interruption into the call's error terminal.
        raise ToolHangError(fired[0])
    return collected


@contextmanager
def _watchdog(tool_id: str, deadline_s: float) -> Iterator[list[str]]:
    if not (isinstance(deadline_s, (int, float)) and deadline_s > 0 and math.isfinite(deadline_s)):
        raise ValueError(f"deadline_s must be a positive number of seconds, got {deadline_s!r}")
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("deadline_s needs the main thread: the watchdog interrupts it by signal")
    armed = True
    fired: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if armed and not fired:
            fired.append(
                f"tool {tool_id!r} did not finish within {deadline_s:g} s: it never ended, or"
                " it never suspended (a loop that neither awaits nor ends starves the event"
                " loop, so no timer, reader or signal handler runs)"
            )
            raise ToolHangError(fired[0])

    main = threading.main_thread().ident
    assert main is not None
    previous = signal.signal(HANG_SIGNAL, on_signal)
    timer = threading.Timer(deadline_s, signal.pthread_kill, (main, HANG_SIGNAL))
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        armed = False
        timer.cancel()
        timer.join()  # a signal already on its way meets the disarmed handler
        signal.signal(HANG_SIGNAL, previous)
