"""``stream_output``: run a tool's body against an :class:`Output` and yield its
frames as the pacer lets them go, then its result (the thin asyncio driver over
:class:`Pacer` and :class:`OutputStream`).

A class tool streams through it in three lines::

    async def execute(self, ctx, args):
        async for event in stream_output(ctx, SPEC, lambda out: self.work(out, args)):
            yield event

Invariants:

Rule 1. One loop per call: it polls the pacer, yields what it lets go, and
        then waits for a write that must wake it, the pacer's next poll, or the
        body's end. Every pass awaits (a pass that yielded frames gives the
        event loop a turn), so a pipe reader, timers and signal handlers run
        however the output arrives.
Rule 2. The body runs in a task of the call's scope: leaving the generator
        early (a cancel, a deadline, a consumer gone) cancels the body and
        waits for it (a command's group is stopped by then), and closes the
        output so a worker thread's next write fails instead of writing on.
Rule 3. When the body returns, everything it wrote is flushed (``finish``: a
        trailing incomplete character as U+FFFD) before the terminal, which is
        a :class:`ToolResult` of the body's value carrying the output's excerpt
        for the model (or the body's own :class:`ToolResult`); when it raises,
        the exception is raised after the flushed frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final

from kigi_tool_protocol import StreamingSpec

from .._producer._chunk import cap_of
from .._producer._output import OutputStream
from .._producer._pacer import DEFAULT_PACING_S, Pacer
from .._scope import TaskScope
from ._author_output import Output
from ._command import CommandSettings, default_shell
from ._result import ToolEvent, ToolResult
from ._tool import ToolContext

__all__ = ("stream_output",)

#: The newest bytes kept between drains. A consumer that falls further behind
#: than this loses the middle (reported as a gap). 1 MiB is 64 frames at the
#: 16 KiB cap: a consumer stalled for a moment loses nothing.
DEFAULT_TAIL_BYTES: Final = 1024 * 1024

#: Bytes of output handed to the model in the result: the first half and the
#: last half of the output around a marker. About 8k tokens: enough to see a
#: failure, little enough not to flood a context.
DEFAULT_OUTPUT_LIMIT: Final = 32 * 1024

Body = Callable[[Output], Awaitable[Any]]


async def stream_output(
    ctx: ToolContext,
    spec: StreamingSpec,
    body: Body,
    *,
    pacing: float = DEFAULT_PACING_S,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    limit: int | None = None,
    settings: CommandSettings | None = None,
    wait_for_reader: bool = False,
) -> AsyncGenerator[ToolEvent, None]:
    """Run ``body(out)`` and yield the frames of what it writes to ``out``
    (``spec``'s subkind and cap), paced (see :class:`Pacer`), then its
    :class:`ToolResult` (see the module's rules).

    ``pacing`` is the pacing interval in seconds; ``tail_bytes`` the newest
    bytes kept between drains; ``output_limit`` the bytes of output the
    result's excerpt keeps (half from the start, half from the end);
    ``limit`` a hard cap on the bytes accepted (past it the stream says
    ``truncated``); ``settings`` how ``out.run`` runs commands;
    ``wait_for_reader`` pauses a command's reading while the frames are not
    taken, instead of skipping what the tail cannot hold (only when the call
    wants progress: without it nothing drains).

    Raises:
        ValueError: ``pacing`` is not positive, ``tail_bytes`` is below one
            frame, ``output_limit`` is negative.
        Exception: whatever ``body`` raises, after the frames of its output.
    """
    pacer = Pacer(pacing)
    if output_limit < 0:
        raise ValueError(f"output_limit must be >= 0, got {output_limit}")
    if tail_bytes < cap_of(spec.max_delta_bytes):
        raise ValueError(
            f"tail_bytes {tail_bytes} is below one frame ({cap_of(spec.max_delta_bytes)} bytes)"
        )
    loop = asyncio.get_running_loop()
    stream = OutputStream(
        spec,
        capacity=tail_bytes,
        limit=limit,
        head_bytes=output_limit // 2,
        progress=ctx.wants_progress,
    )
    out = Output(
        stream,
        ctx,
        settings or CommandSettings(default_shell()),
        loop,
        wait_for_reader=wait_for_reader and ctx.wants_progress,
    )
    try:
        async with TaskScope() as tasks:
            task = tasks.start(_guarded(body, out), name=f"body of call {ctx.call_id}")
            task.add_done_callback(lambda _: out._wake())
            while True:  # Rule 1
                frames, next_poll, seen = out._poll(pacer, loop.time())
                for frame in frames:
                    yield frame
                if task.done():
                    break
                if frames:
                    await asyncio.sleep(0)
                else:
                    await out._wait(next_poll, seen)
    finally:
        out._close()  # Rule 2 (a no-op after _finish)
    for frame in out._finish():  # Rule 3
        yield frame
    value, error = task.result()
    if error is not None:
        raise error
    if isinstance(value, ToolResult):
        yield value
        return
    yield ToolResult(value=value, output=out._excerpt(output_limit).text)


async def _guarded(body: Body, out: Output) -> tuple[Any, Exception | None]:
    """The body's value, or what it raised (kept, not raised from the task: the
    scope would raise it as a group, before the flushed frames)."""
    try:
        return await body(out), None
    except Exception as exc:
        return None, exc
