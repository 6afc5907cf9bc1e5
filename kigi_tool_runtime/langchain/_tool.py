"""``as_langchain_tool``: any kigi tool as a LangChain tool that streams live on
LangGraph's ``tools`` channel, the thin driver over the served-call core.

Invariants:

Rule 1. One LangChain call is one :class:`ServedCall`: its arguments are
        checked by the core (the stdio server's check and error), each frame
        goes out through ``ToolRuntime.emit_output_delta`` as one
        :class:`LiveChunk` as it is produced, and the call's end is the
        ``ToolMessage`` content and artifact of the mapping. Without ``"tools"``
        streaming (or without the ``ToolRuntime`` LangGraph's ``ToolNode``
        injects) the call runs the same and emits nothing; its frames still
        make the artifact's loss report.
Rule 2. A kigi ``ToolError`` (bad arguments included) is raised as
        :class:`KigiToolError`, LangGraph's tool error path: the ``tool-error``
        event carries the model's error text, and ``ToolNode``'s default error
        handling answers the model with it in an error ``ToolMessage``
        (``KigiToolError`` is a ``ToolInvocationError``), never a traceback.
Rule 3. Leaving a call early (its task cancelled, a timeout around it, a
        ``KeyboardInterrupt``) stops the tool: the shell tool's process group is
        gone before the exception goes on. The async path runs on the caller's
        loop; the sync path runs its own loop in the calling thread
        (``asyncio.run``, whose Ctrl-C handling cancels the call), and refuses,
        with a clear error, a thread whose loop is running, where waiting
        would block that loop.
Rule 4. A sync graph runs tools in worker threads and, on Ctrl-C, waits for
        them; :func:`stop_on_interrupt` makes a ``SIGINT`` stop every running
        kigi call first, and :func:`cancel_running_calls` does it on demand,
        from any thread.
Rule 5. Backpressure, not buffering: while more than ``max_pending_events``
        items wait in the run's stream queue for a consumer that drains it
        live, a call takes no new frame (see ``_pacing``), so a slow consumer
        pauses the tool instead of growing LangGraph's queue without bound. A
        queue nobody drains until the node ends (LangGraph's default) takes
        frames only up to ``_pacing.STILL_EVENTS`` items; the frames held back
        are said at the end by one marker line, followed by the call's last
        frame (so a fold sees the loss in its ``seq`` and ``total_bytes``).
Rule 6. Leaving a sync run mid-call (closing its ``graph.stream`` generator)
        stops the call first (``_run_exit``): ``close()`` returns once the
        command's process group is gone, not at the call's deadline.
Rule 7. In a graph, a call silent for ``heartbeat_s`` writes a heartbeat to
        the graph's ``custom`` stream (``runtime.stream_writer``) every
        ``heartbeat_s`` of its silence: ``{"kigi": "heartbeat",
        "tool_call_id", "elapsed_s", "silent_s", "text"}``. The tool's output
        stream (``emit_output_delta``) never carries it, so the deltas
        concatenated stay the output; 0 writes none.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool, ToolException
from langgraph.prebuilt import ToolRuntime
from langgraph.prebuilt.tool_node import ToolInvocationError

from .._call._heartbeat import HEARTBEAT_S, Beat
from .._call._outcome import CallEnd, error_text
from .._call._served import ServedCall, check_arguments
from .._tools._errors import ToolError, ToolErrorKind
from .._tools._runner import STOP_WAIT_S
from .._tools._tool import Tool
from ._mapping import HeldBack, LiveChunk, args_schema, artifact, langchain_tool_name
from ._pacing import MAX_PENDING_EVENTS, Pacer
from ._run_exit import stop_when_run_exits

__all__ = (
    "KigiToolError",
    "as_langchain_tool",
    "cancel_running_calls",
    "stop_on_interrupt",
)

#: The parameter LangGraph's ``ToolNode`` fills with the call's ``ToolRuntime``.
RUNTIME_ARG = "runtime"

_running: set[ServedCall] = set()
_running_lock = threading.Lock()


class KigiToolError(ToolInvocationError):
    """A kigi tool call that failed (Rule 2): ``error`` is the kigi
    ``ToolError`` (``kind``, ``code``), ``message`` the model's text for it
    (with a loss line when the live output lost bytes), ``end`` how the call
    ended (``None`` when its arguments were refused before it started)."""

    def __init__(
        self,
        error: ToolError,
        *,
        tool_name: str,
        arguments: dict[str, Any],
        text: str,
        end: CallEnd | None = None,
    ) -> None:
        # ToolInvocationError formats a pydantic error; the kigi text is the message.
        ToolException.__init__(self, text)
        self.message = text
        self.tool_name = tool_name
        self.tool_kwargs = arguments
        self.source = error  # type: ignore[assignment]
        self.filtered_errors = None
        self.error = error
        self.end = end

    @property
    def kind(self) -> ToolErrorKind:
        return self.error.kind

    @property
    def code(self) -> int:
        return self.error.code


class _Served:
    """The two entry points LangChain calls (Rule 1), for one kigi tool."""

    def __init__(
        self,
        tool: Tool[Any],
        name: str,
        timeout_ms: float | None,
        stop_wait: float,
        max_pending_events: int,
        heartbeat_s: float,
    ) -> None:
        self.heartbeat_s = heartbeat_s
        self.tool = tool
        self.name = name
        self.timeout_ms = timeout_ms
        self.stop_wait = stop_wait
        self.max_pending_events = max_pending_events

    async def call(
        self,
        runtime: Annotated[ToolRuntime[Any, Any] | None, InjectedToolArg] = None,
        **arguments: Any,
    ) -> tuple[str, dict[str, Any]]:
        tool = self.tool
        try:
            args = check_arguments(tool, arguments)
        except ToolError as error:
            text = error_text(error, tool.id)
            raise KigiToolError(
                error, tool_name=self.name, arguments=arguments, text=text
            ) from None
        call_id = (runtime.tool_call_id if runtime is not None else None) or (
            f"lc-{uuid.uuid4().hex[:12]}"
        )
        emit = runtime.emit_output_delta if runtime is not None else None
        write = runtime.stream_writer if runtime is not None else None
        pacer = Pacer.of_current_call(self.max_pending_events) if emit is not None else None
        # Frames are made even with no emitter (a direct invoke): they are the
        # artifact's loss report, which then still says what the output lost
        # (a gap, the output limit), as it does in a graph.
        served = ServedCall(
            tool,
            args,
            call_id=call_id,
            timeout_ms=self.timeout_ms,
            stop_wait=self.stop_wait,
            heartbeat_s=self.heartbeat_s if write is not None else 0.0,
        )
        if runtime is not None:
            stop_when_run_exits(runtime.config, served)  # Rule 6
        with _running_lock:
            _running.add(served)
        held_back = HeldBack()
        try:
            async with served:
                async for delta in served.events():
                    if isinstance(delta, Beat):
                        if write is not None:
                            write(heartbeat_chunk(call_id, delta))
                        continue
                    if emit is not None and pacer is not None:
                        if pacer.admits():
                            emit(LiveChunk.of(delta))
                            held_back.shown(delta.text)
                            await pacer.pace()
                        else:
                            held_back.add(delta)  # Rule 5: a queue nobody drains yet
        finally:
            with _running_lock:
                _running.discard(served)
        if emit is not None and held_back.last is not None:
            if held_back.count > 1:
                emit(LiveChunk(held_back.marker()))
            emit(LiveChunk.of(held_back.last))
        end = served.end
        if end.closing and emit is not None:
            emit(LiveChunk(end.closing))
        if end.error is not None:
            raise KigiToolError(
                end.error, tool_name=self.name, arguments=arguments, text=end.text, end=end
            )
        return end.text, artifact(end)

    def call_sync(
        self,
        runtime: Annotated[ToolRuntime[Any, Any] | None, InjectedToolArg] = None,
        **arguments: Any,
    ) -> tuple[str, dict[str, Any]]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.call(runtime, **arguments))
        raise RuntimeError(
            f"tool {self.name!r} was invoked synchronously from a thread whose event loop"
            " is running, and waiting here would block that loop: use"
            " `await tool.ainvoke(...)` (or `graph.ainvoke` / `graph.astream`) instead"
        )


def as_langchain_tool(
    tool: Tool[Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_ms: float | None = None,
    stop_wait: float = STOP_WAIT_S,
    max_pending_events: int = MAX_PENDING_EVENTS,
    heartbeat_s: float = HEARTBEAT_S,
) -> BaseTool:
    """``tool`` as a LangChain tool (see the module's rules), for a ``ToolNode``,
    an agent, or a direct ``invoke`` / ``ainvoke``.

    ``name`` overrides the name made from the tool id; ``description`` the
    tool's own; ``timeout_ms`` gives every call a deadline (``None``: the
    tool's own); ``stop_wait`` is how long a stopped tool may take to clean up;
    ``max_pending_events`` how many items may wait in a streamed run's queue
    for its consumer before a call pauses (Rule 5); ``heartbeat_s`` the
    silence after which a call in a graph says it is alive (Rule 7; 0: never).
    Invoked with a tool call, the result is a ``ToolMessage`` whose content is
    the model's text and whose artifact holds the value and the loss report.

    Raises:
        ValueError: the name is not one a chat model accepts, the tool's
            argument schema is not an object, or it has an argument named
            ``runtime`` (the name LangGraph injects its ``ToolRuntime`` under),
            ``max_pending_events`` is below 1, or ``heartbeat_s`` is negative.
    """
    if not isinstance(tool, Tool):
        raise TypeError(f"as_langchain_tool takes a kigi Tool, not {type(tool).__name__}")
    if max_pending_events < 1:
        raise ValueError(f"max_pending_events must be at least 1, got {max_pending_events}")
    if not heartbeat_s >= 0:
        raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
    chosen = langchain_tool_name(tool.id, name)
    schema = args_schema(tool)
    if RUNTIME_ARG in (schema.get("properties") or {}):
        raise ValueError(
            f"tool {tool.id!r} has an argument named {RUNTIME_ARG!r}, the name LangGraph"
            " injects its ToolRuntime under"
        )
    served = _Served(tool, chosen, timeout_ms, stop_wait, max_pending_events, heartbeat_s)
    return StructuredTool(
        name=chosen,
        description=tool.description if description is None else description,
        args_schema=schema,
        func=served.call_sync,
        coroutine=served.call,
        response_format="content_and_artifact",
        metadata={"kigi_tool_id": tool.id},
    )


def heartbeat_chunk(call_id: str, beat: Beat) -> dict[str, Any]:
    """What a heartbeat writes to the graph's ``custom`` stream (Rule 7)."""
    return {
        "kigi": "heartbeat",
        "tool_call_id": call_id,
        "elapsed_s": round(beat.elapsed_s, 3),
        "silent_s": round(beat.silent_s, 3),
        "text": beat.text(),
    }


def cancel_running_calls() -> int:
    """Cancel every kigi call running in this process (Rule 4); safe from any
    thread and from a signal handler. Returns how many were running."""
    with _running_lock:
        calls = list(_running)
    for call in calls:
        call.cancel()
    return len(calls)


@contextmanager
def stop_on_interrupt() -> Iterator[None]:
    """While the block runs, a ``SIGINT`` first cancels every running kigi
    call (whatever thread runs it), then does what the handler before did
    (by default, raise ``KeyboardInterrupt``). For a sync ``graph.invoke``,
    whose tools run in worker threads that LangGraph waits for (Rule 4).

    Raises:
        ValueError: not called from the main thread (only it can set a signal
            handler).
    """
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        cancel_running_calls()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
