"""``KigiToolset``: kigi tools served to a pydantic-ai agent, their output
streamed live into the run's events. The thin driver over :class:`ServedCall`.

Invariants:

Rule 1. Each call is one :class:`ServedCall` under the pydantic-ai call's
        ``tool_call_id``: every frame is emitted as one ``kigi.tool_output``
        event as it is produced, then one ``kigi.tool_output_end``, then the
        call returns (see ``_events`` and ``_mapping``).
Rule 2. The call lives in the task pydantic-ai runs the tool in: when the run
        is cancelled or times out, that task is cancelled, the served call is
        left, and the tool is stopped (the shell tool's whole process group)
        before the cancellation goes on.
Rule 3. A call's time limit (the tool definition's ``timeout``, which
        ``KigiToolset(timeout=...)`` sets and a ``prepared`` toolset may change)
        is the served call's deadline: past it the tool is stopped the same way
        and the model sees a failed call saying it timed out.
Rule 4. Backpressure, not buffering: ``ctx.emit`` returns at once, leaving the
        event in the run's event buffer until the run's consumer takes it. While
        more than ``max_pending_events`` wait there (default
        :data:`MAX_PENDING_EVENTS`), a call takes no new
        frame, so a slow consumer pauses the tool (the shell tool's bounded
        tail then reports what it skipped as a gap) and the buffer stays
        bounded. The buffer is pydantic-ai's own (an internal of 2.x, read
        only in ``_privates``): a run whose buffer is not being drained live
        is not paced; where the buffer cannot be read at all, each call emits
        at most ``_call/_held.py`` ``BLIND_FRAMES`` frames, holds the rest
        back, and emits the last one at the end, its text after one marker
        line (``_privates`` Rule 1).
        ``live=False`` serves calls without live output (no frame is made; the
        result is the same).
Rule 5. A live call silent for ``heartbeat_s`` emits a ``kigi.tool_heartbeat``
        event (``_events`` Rule 5) every ``heartbeat_s`` of its silence
        (``ServedCall.events``); 0 emits none.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Sized
from dataclasses import replace
from functools import partial
from typing import Any, Final

from pydantic_ai import AbstractToolset, RunContext, ToolReturn, ToolsetTool

from .._call._heartbeat import HEARTBEAT_S, Beat
from .._call._held import BlindCap, HeldBack
from .._call._limits import CALL_BUFFER_FRAMES, PENDING_POLL_S
from .._call._served import ServedCall
from .._tools._tool import Tool
from .._upstream import UNSEEN
from ._events import KigiToolHeartbeat, KigiToolOutput, KigiToolOutputEnd
from ._mapping import ARGS_OBJECT, check_or_retry, return_of, tool_definition, tool_name
from ._privates import event_buffer

__all__ = ("KigiToolset",)

_call_ids = itertools.count(1)

#: Events that may wait in a run's event buffer for its consumer before a call
#: stops taking frames (Rule 4), as many as the stdio client holds for a call:
#: 1024 full 16 KiB deltas are 16 MiB, so a consumer busy elsewhere for a while
#: loses nothing, and one that falls behind for good costs a bounded amount. A
#: paused call looks at the buffer again every ``PENDING_POLL_S``.
MAX_PENDING_EVENTS: Final = CALL_BUFFER_FRAMES


def _live_buffer(ctx: RunContext[Any]) -> Sized | None:
    """The run's event buffer when a stream merger drains it live (it keeps a
    waiter registered while it does), else ``None``: a buffer drained only
    when the tool returns must never be waited on (``_privates`` Rule 1)."""
    buffer = event_buffer(ctx)
    return None if buffer is UNSEEN else buffer


async def _paced(ctx: RunContext[Any], bound: int) -> None:
    """Wait while more than ``bound`` events wait for the run's consumer (Rule 4)."""
    buffer = _live_buffer(ctx)
    while buffer is not None and len(buffer) > bound:
        await asyncio.sleep(PENDING_POLL_S)
        buffer = _live_buffer(ctx)


def _check(tool: Tool[Any], ctx: RunContext[Any], /, **arguments: Any) -> None:
    # Positional-only: a tool may take arguments named `tool` or `ctx`.
    check_or_retry(tool, arguments)


class KigiToolset(AbstractToolset[Any]):
    """A pydantic-ai toolset serving ``tools`` (any kigi :class:`Tool`, the
    shell tool included); see the module's rules.

    ``id`` names the toolset (pydantic-ai wants one for durable execution);
    ``max_retries`` bounds the model's retries of refused arguments (``None``:
    the agent's); ``timeout`` is each call's time limit in seconds (``None``:
    the tool's own deadline; the agent's ``tool_timeout`` applies only to the
    agent's own function tools); ``live``: stream each call's output as events;
    ``max_pending_events``: how many events may wait for the run's consumer
    before a call pauses (Rule 4); ``heartbeat_s``: the silence after which a
    live call says it is alive (Rule 5; 0: never).

    Raises:
        ValueError: two tools have the same pydantic-ai name, a tool's input
            schema is not an object at the root, ``timeout`` is not positive,
            ``max_pending_events`` is below 1, or ``heartbeat_s`` is negative.
    """

    def __init__(
        self,
        tools: Iterable[Tool[Any]],
        *,
        id: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        live: bool = True,
        max_pending_events: int = MAX_PENDING_EVENTS,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        if not heartbeat_s >= 0:
            raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
        self.heartbeat_s = heartbeat_s
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        if max_pending_events < 1:
            raise ValueError(f"max_pending_events must be at least 1, got {max_pending_events}")
        self.max_pending_events = max_pending_events
        self._id = id
        self.max_retries = max_retries
        self.live = live
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            name = tool_name(tool.id)
            other = self._tools.get(name)
            if other is not None:
                raise ValueError(f"tools {other.id!r} and {tool.id!r} would both be named {name!r}")
            self._tools[name] = tool
        self._definitions = {
            name: replace(tool_definition(tool, name), timeout=timeout)
            for name, tool in self._tools.items()
        }

    def __repr__(self) -> str:
        return f"KigiToolset({[tool.id for tool in self._tools.values()]!r})"

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The kigi tools served, by their pydantic-ai names."""
        return dict(self._tools)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        retries = self.max_retries if self.max_retries is not None else ctx.max_retries
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=self._definitions[name],
                max_retries=retries,
                args_validator=ARGS_OBJECT,
                args_validator_func=partial(_check, tool),
            )
            for name, tool in self._tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> ToolReturn:
        """Serve one call (Rules 1-3).

        Raises:
            ToolFailed: the kigi call failed.
            ModelRetry: the arguments were refused.
            KeyError: no tool of this toolset has ``name``.
        """
        kigi_tool = self._tools[name]
        args = check_or_retry(kigi_tool, tool_args)
        call_id = ctx.tool_call_id or f"kigi-pydantic-{next(_call_ids)}"
        limit = tool.tool_def.timeout
        served = ServedCall(
            kigi_tool,
            args,
            call_id=call_id,
            wants_progress=self.live,
            timeout_ms=None if limit is None else limit * 1000,
            heartbeat_s=self.heartbeat_s if self.live else 0.0,
        )
        blind = BlindCap() if event_buffer(ctx) is UNSEEN else None
        held_back = HeldBack()
        async with served as call:
            async for item in call.events():
                if isinstance(item, Beat):
                    await ctx.emit(KigiToolHeartbeat.of(item))
                    continue
                if blind is not None and not blind.admits():
                    held_back.add(item)  # Rule 4: a buffer that cannot be seen
                    continue
                await ctx.emit(KigiToolOutput.of(item))
                held_back.shown(item.text)
                await _paced(ctx, self.max_pending_events)
        if held_back.last is not None:
            last = KigiToolOutput.of(held_back.last)
            await ctx.emit(replace(last, text=held_back.closing_text()))
        end = call.end
        await ctx.emit(KigiToolOutputEnd.of(end))
        return return_of(end)
