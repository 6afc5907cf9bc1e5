"""``KigiAdkTool``: a kigi tool given to a Google ADK agent, its output
streamed live as partial events. The thin driver over :class:`ServedCall`.

Invariants:

Rule 1. Each call runs an async generator as an ADK (2.x) ``FunctionNode``
        in the tool's context (``ToolContext.run_node``), as ADK runs its own
        generator tools: each frame of the call is yielded as one partial
        ``Event`` (``_mapping`` Rule 2) as it is produced, then the function
        response (``_mapping`` Rule 3) is yielded last, the one non-event item
        (ADK takes a plain yielded value as the node's output, so a second
        would be a second output: adk-python #3955, #2014).
Rule 2. The call's id is the ADK function call's id, so a folder matches the
        frames to the function response.
Rule 3. The call lives in the generator ADK drives: when the run is cancelled
        or its consumer stops iterating, ADK closes the generator, the served
        call is left, and the tool is stopped (the shell tool's whole process
        group) before the close returns.
Rule 4. Backpressure, not buffering: ADK passes partial events to the run's
        consumer through a queue that never blocks. While more than
        ``max_pending_events`` (default :data:`MAX_PENDING_EVENTS`) wait there
        the call takes no new frame, so a slow consumer pauses the tool (the
        shell tool's bounded tail reports what it skipped as a gap) and memory
        stays bounded. The queue is an internal of ADK 2.x, read only in
        ``_privates`` (behind :func:`_pending_events`); where it cannot be
        read, each call yields at most ``_call/_held.py`` ``BLIND_FRAMES``
        partial events, holds the rest back, and yields the last one at the
        end, its text after one marker line.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.adk.workflow import FunctionNode
from google.genai import types

from .._call._held import BlindCap, HeldBack
from .._call._limits import CALL_BUFFER_FRAMES, PENDING_POLL_S
from .._call._served import ServedCall
from .._tools._tool import Tool
from .._upstream import UNSEEN
from ._mapping import (
    adk_tool_name,
    closing_event,
    function_declaration,
    partial_event,
    response_of,
)
from ._privates import pending_events

__all__ = ("KigiAdkTool", "adk_tools")

#: Partial events that may wait for the run's consumer before a call stops
#: taking frames (Rule 4): as many frames as the stdio client holds for a call
#: (1024 full 16 KiB deltas are 16 MiB).
MAX_PENDING_EVENTS: Final = CALL_BUFFER_FRAMES

_call_ids = itertools.count(1)


def _pending_events(tool_context: ToolContext) -> int | None:
    """How many events wait for the run's consumer, or ``None`` when it cannot
    be read (Rule 4; ``_privates`` Rule 1)."""
    pending = pending_events(tool_context)
    return None if pending is UNSEEN else pending


async def _paced(tool_context: ToolContext, bound: int) -> None:
    """Wait while more than ``bound`` events wait for the consumer (Rule 4)."""
    pending = _pending_events(tool_context)
    while pending is not None and pending > bound:
        await asyncio.sleep(PENDING_POLL_S)
        pending = _pending_events(tool_context)


class KigiAdkTool(BaseTool):
    """An ADK tool serving the kigi ``tool`` (see the module's rules).

    ``name`` overrides the ADK name made from its id; ``timeout`` is each
    call's time limit in seconds (``None``: the tool's own deadline);
    ``max_pending_events``: how many events may wait for the run's consumer
    before a call pauses (Rule 4).

    Raises:
        ValueError: the tool's input schema is not an object at the root,
            ``timeout`` is not positive, or ``max_pending_events`` is below 1.
    """

    def __init__(
        self,
        tool: Tool[Any],
        *,
        name: str | None = None,
        timeout: float | None = None,
        max_pending_events: int = MAX_PENDING_EVENTS,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        if max_pending_events < 1:
            raise ValueError(f"max_pending_events must be at least 1, got {max_pending_events}")
        adk_name = name if name is not None else adk_tool_name(tool.id)
        super().__init__(name=adk_name, description=tool.description)
        self._kigi = tool
        self._declaration = function_declaration(tool, adk_name)
        self._timeout_ms = None if timeout is None else timeout * 1000
        self._max_pending = max_pending_events
        node_name = re.sub(r"[^a-zA-Z0-9_]", "_", adk_name)
        self._node_name = node_name if node_name.isidentifier() else f"_{node_name}"

    @property
    def kigi_tool(self) -> Tool[Any]:
        """The kigi tool served."""
        return self._kigi

    def _get_declaration(self) -> types.FunctionDeclaration:
        return self._declaration.model_copy(deep=True)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Serve one call as a generator node (Rules 1-4); its output, the
        function response, is the return."""
        call_id = tool_context.function_call_id or f"kigi-adk-{next(_call_ids)}"
        node = FunctionNode(
            func=self._frames(args, call_id, tool_context),
            name=self._node_name,
            rerun_on_resume=True,
        )
        # As ADK's own generator tools run: on a branch of the call's own.
        segment = f"{self.name}@{call_id}"
        branch = f"{tool_context.branch}.{segment}" if tool_context.branch else segment
        return await tool_context.run_node(
            node, node_input=None, override_branch=branch, use_sub_branch=False, raise_on_wait=True
        )

    def _frames(
        self, arguments: dict[str, Any], call_id: str, tool_context: ToolContext
    ) -> Callable[[], AsyncGenerator[Any, None]]:
        tool, timeout_ms, bound = self._kigi, self._timeout_ms, self._max_pending

        async def frames() -> AsyncGenerator[Any, None]:
            served = ServedCall(tool, arguments, call_id=call_id, timeout_ms=timeout_ms)
            blind = BlindCap() if _pending_events(tool_context) is None else None
            held_back = HeldBack()
            async with served as call:
                async for delta in call:
                    if blind is not None and not blind.admits():
                        held_back.add(delta)  # Rule 4: a queue that cannot be seen
                        continue
                    yield partial_event(delta)
                    held_back.shown(delta.text)
                    await _paced(tool_context, bound)
            if held_back.last is not None:
                yield partial_event(held_back.last, text=held_back.closing_text())
            end = call.end
            if end.closing:
                yield closing_event(end.closing, call_id)
            yield response_of(end)

        return frames


def adk_tools(tools: list[Tool[Any]] | tuple[Tool[Any], ...], **options: Any) -> list[KigiAdkTool]:
    """One :class:`KigiAdkTool` per kigi tool, for ``Agent(tools=...)``;
    ``options`` are :class:`KigiAdkTool`'s.

    Raises:
        ValueError: two tools would have the same ADK name (or as
            :class:`KigiAdkTool`).
    """
    made = [KigiAdkTool(tool, **options) for tool in tools]
    names = [tool.name for tool in made]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"two tools would both be named {name!r} in ADK")
    return made
