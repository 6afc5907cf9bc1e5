"""The tool interface: ``Tool``, ``ToolContext``, ``ToolResult``, ``ToolError``.

A tool call is ``Progress* Terminal``: zero or more ``ToolProgress`` values,
then exactly one terminal, a :class:`ToolResult` or a :class:`ToolError`.

A streaming tool implements :meth:`Tool.execute` as an async generator that
yields progress and finally **yields** its :class:`ToolResult`; it fails by
raising (or yielding) a :class:`ToolError`. A tool that never streams
implements :meth:`Tool.run` instead, ``async def`` or plain ``def`` (a plain
``def`` runs in a worker thread), and returns its result: a
:class:`ToolResult`, or any JSON-able value, which becomes the JSON output.

A streaming tool, whole::

    class Grep(Tool[GrepArgs]):
        id = "grep"
        args_type = GrepArgs
        capabilities = ToolCapabilities(streaming=SPEC)

        async def execute(self, ctx, args):
            stream = OutputStream(SPEC, capacity=256 * 1024, progress=ctx.wants_progress)
            async for line in matching_lines(args):
                stream.write(line)
                for frame in stream.drain():
                    yield frame
            for frame in stream.finish():
                yield frame
            yield ToolResult(value={"bytes": stream.total})

Nothing here runs a tool: :func:`run_tool` in ``_runner`` does, and enforces
the grammar. This module is sans-IO (no event loop).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Generic, Self, TypeVar

import msgspec

from kigi_tool_protocol import ToolCapabilities
from kigi_tool_protocol._identifiers import validate_tool_call_id, validate_tool_id

from ._result import PROGRESS_TYPES as PROGRESS_TYPES
from ._result import ToolEvent
from ._result import ToolResult as ToolResult

__all__ = (
    "Tool",
    "ToolContext",
    "ToolEvent",
    "ToolResult",
)

ArgsT = TypeVar("ArgsT", bound=msgspec.Struct)


class ToolContext:
    """One call's context: its id, whether the caller wants progress, and its
    cancellation signal.

    Cancellation is asyncio-native: the runner runs the tool in its own task and
    cancels that task, so a tool observes cancellation as ``CancelledError`` at
    its next ``await`` (clean up in ``finally``). :attr:`cancelled` is for code
    that cannot await (a synchronous ``run`` in a worker thread polls it).
    :meth:`cancel` may be called from any thread; its ``reason`` (the first
    given) says why the call was stopped and is the message of the
    ``cancelled`` error the call ends with.

    Raises:
        IdentifierError: ``call_id`` is empty.
    """

    __slots__ = ("_callbacks", "_cancelled", "_lock", "_reason", "call_id", "wants_progress")

    def __init__(self, call_id: str, *, wants_progress: bool = True) -> None:
        self.call_id: Final = validate_tool_call_id(call_id)
        self.wants_progress: Final = wants_progress
        self._cancelled = False
        self._reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ToolContext(call_id={self.call_id!r}, wants_progress={self.wants_progress},"
            f" cancelled={self._cancelled})"
        )

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called: by the caller, or by the runner
        when the call's deadline passed or its consumer went away."""
        return self._cancelled

    @property
    def cancel_reason(self) -> str | None:
        """Why the call was stopped, as the first :meth:`cancel` said (``None``:
        not cancelled, or no reason given)."""
        return self._reason

    def cancel(self, reason: str | None = None) -> None:
        """Ask the call to stop. The runner cancels the tool's task and ends the
        call with a ``cancelled`` error whose message is ``reason`` (the
        server's shutdown, the peer gone, ...; else the runner's own
        sentence). Idempotent: the first cancel's reason is kept."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (once, with no arguments) when the call is cancelled,
        at once if it already was. Returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class Tool(Generic[ArgsT]):
    """Base class of every tool.

    A subclass sets ``id`` (``SEG`` or ``SEG:SEG``), ``description``,
    ``args_type`` (a msgspec Struct: its JSON Schema is the input schema) and
    ``capabilities`` (``streaming`` set when it streams), and implements either
    :meth:`execute` (streams) or :meth:`run` (does not). A tool whose JSON
    results have one type may declare it as ``result_type`` (its JSON Schema is
    the output schema, e.g. MCP's ``outputSchema``).

    Raises:
        TypeError: at class definition, a tool with an ``id`` that implements
            neither ``execute`` nor ``run``, or whose ``args_type`` is not a
            msgspec Struct.
        IdentifierError: at class definition, an invalid ``id``.
        TypeError: at instantiation, a class that sets no ``id`` (an abstract base).
    """

    id: str
    description: str = ""
    args_type: type[ArgsT]
    capabilities: ToolCapabilities = ToolCapabilities()
    result_type: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            return  # an intermediate base class
        validate_tool_id(cls.id)
        args_type = getattr(cls, "args_type", None)
        if not (isinstance(args_type, type) and issubclass(args_type, msgspec.Struct)):
            raise TypeError(f"tool {cls.id!r}: args_type must be a msgspec Struct class")
        if cls.execute is Tool.execute and cls.run is Tool.run:
            raise TypeError(f"tool {cls.id!r} must implement execute() or run()")

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # A class without `id` is an intermediate base (see __init_subclass__);
        # refusing its instances here keeps a missing `id` from surfacing later,
        # deep inside a call, as an AttributeError.
        if not isinstance(getattr(cls, "id", None), str):
            raise TypeError(
                f"{cls.__name__} cannot be instantiated: a tool class must set `id`"
                " (a class without one is an abstract base)"
            )
        return super().__new__(cls)

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of ``args_type``."""
        return msgspec.json.schema(self.args_type)

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of ``result_type``, or ``None`` when none is declared."""
        if self.result_type is None:
            return None
        return msgspec.json.schema(self.result_type)

    def execute(self, ctx: ToolContext, args: ArgsT) -> AsyncIterator[ToolEvent]:
        """Yield progress, then one terminal (yield a :class:`ToolResult`, or raise
        or yield a :class:`ToolError`). Honour ``ctx.wants_progress``.

        A tool that implements :meth:`run` instead leaves this alone; the runner
        calls ``run`` (in a thread when it is synchronous).
        """
        raise NotImplementedError(f"{type(self).__name__} implements run(), not execute()")

    def run(self, ctx: ToolContext, args: ArgsT) -> Any:
        """Return the result (``async def`` or plain ``def``): a
        :class:`ToolResult`, or any JSON-able value as the JSON output. Raise
        :class:`ToolError` to fail."""
        raise NotImplementedError(f"{type(self).__name__} implements execute(), not run()")

    @classmethod
    def streams(cls) -> bool:
        """True when the tool implements :meth:`execute`."""
        return cls.execute is not Tool.execute
