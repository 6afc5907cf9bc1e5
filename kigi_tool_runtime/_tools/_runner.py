"""``run_tool``: run one tool call and enforce ``Progress* Terminal``.

Invariants:

Rule 1. A run yields zero or more ``ToolProgress`` values and then exactly one
        terminal (:class:`ToolResult` or :class:`ToolError`), always last, and
        nothing after it. Bad arguments, an exception, a stream that ends without
        a terminal, a deadline and a cancellation all become an error terminal.
Rule 2. Whatever a tool yields after its terminal is dropped and counted
        (``statistics().after_terminal``); at most
        :data:`MAX_ITEMS_AFTER_TERMINAL` items or :data:`AFTER_TERMINAL_WAIT_S`
        seconds are spent finding out.
Rule 3. A run never hangs: a stopped tool (deadline, ``ctx.cancel()``) gets
        ``stop_wait`` seconds to clean up, after which the run ends anyway and
        the tool's task is left to finish on its own (:attr:`ToolRun.left_running`;
        the stop's error says so). A failure nobody can be
        handed any more (the tool raises once its run gave up on it, or after
        its terminal) goes to the event loop's exception handler (logged by
        default), never nowhere.
Rule 4. Memory between a tool and a slow consumer is bounded: at most
        :data:`CHANNEL_DEPTH` items wait, and once their text (a delta's, a
        text progress item's) takes :data:`CHANNEL_TEXT_BYTES` of memory no
        more is added; past that the tool is paused at its ``yield`` (a
        streaming tool's own bounded tail keeps the newest bytes).
Rule 5. A stopped call's error is made once, right: a cancel's message is
        the reason its ``ctx.cancel(reason)`` gave (else the runner's own
        sentence), a deadline's says the time, and either ends with how long
        the tool was waited for when it was left running (Rule 3).

The tool runs in a task of its own (the call's task): stopping the call cancels
that task, so the tool sees ``CancelledError`` at its next ``await``. That task
is in no task group on purpose: a group would wait for it, and a tool that
ignores its cancellation would hang the run (Rule 3). If the
task iterating the run is itself cancelled, the tool's task is cancelled too,
its cleanup awaited (bounded by ``stop_wait``), and the ``CancelledError``
propagates: there is then nobody to hand a terminal to.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import re
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final, NamedTuple

import msgspec

from kigi_tool_protocol import CustomProgress, PartialResultPayload, TextProgress
from kigi_tool_protocol._capabilities import effective_timeout_ms

from .._closing import AsyncClosing
from .._text import text_bytes
from ._errors import ToolError, ToolErrorKind
from ._result import non_finite_error
from ._tool import PROGRESS_TYPES, Tool, ToolContext, ToolEvent, ToolResult
from ._unencodable import find_unencodable

__all__ = ("run_tool",)

#: Items that may wait between a tool and its consumer. One shell drain yields up
#: to ``tail capacity / cap`` frames; 64 lets a whole drain of the default tail
#: pass without a round trip per frame, while a stalled consumer pins at most
#: 64 frames (about 1 MiB of deltas at the 16 KiB cap) before the tool pauses.
CHANNEL_DEPTH: Final = 64

#: The memory the text of the items waiting may take (Rule 4): 64 ASCII
#: deltas at the 16 KiB cap. A delta holding one character past U+FFFF (a
#: binary flood's text) takes 4 bytes a character, so 64 such would pin 4 MiB.
CHANNEL_TEXT_BYTES: Final = 1024 * 1024

#: How long a stopped tool may take to clean up before the run ends without it.
#: The shell tool needs its SIGTERM grace plus its bounded pipe drain (about 3 s
#: by default); 10 s covers that on a loaded machine. A tool that ignores
#: cancellation is abandoned after it, so its caller always gets a terminal.
STOP_WAIT_S: Final = 10.0

#: Items pulled from a tool after its terminal, only to count them. A tool that
#: keeps yielding forever must not keep the run alive.
MAX_ITEMS_AFTER_TERMINAL: Final = 1024

#: Seconds spent pulling items after a terminal, for a tool that awaits after it.
AFTER_TERMINAL_WAIT_S: Final = 1.0

#: Withheld progress items (the caller wants none) after which the runner gives
#: the event loop a turn. A tool that yields without awaiting never suspends
#: while its items are only counted, so the deadline and a cancel could never
#: run and the call would hang; one turn per 256 items costs nothing measurable.
SUPPRESSED_BURST: Final = 256

# msgspec reports a validation error as "<reason> - at `$.path`".
_AT_PATH: Final = re.compile(r"^(?P<reason>.*?) - at `(?P<path>\$[^`]*)`$", re.DOTALL)

# Tasks of tools that ignored cancellation past `stop_wait`: kept referenced so
# the event loop does not destroy them pending.
_ABANDONED: set[asyncio.Task[None]] = set()


class RunStats(NamedTuple):
    """Counters of a :class:`ToolRun`: progress items passed on, progress items
    withheld because the caller wants none, and items the tool yielded after its
    terminal (dropped)."""

    progress: int
    suppressed: int
    after_terminal: int


class _Closed:
    """The channel's end-of-items marker."""


_CLOSED: Final = _Closed()


def item_text_bytes(item: object) -> int:
    """The memory the text of a waiting item takes (Rule 4): a delta's or a
    text progress item's; 0 for anything else."""
    kind = type(item)
    if kind is CustomProgress:
        payload = item.payload  # type: ignore[attr-defined]
        return text_bytes(payload.delta) if type(payload) is PartialResultPayload else 0
    if kind is TextProgress:
        return text_bytes(item.text)  # type: ignore[attr-defined]
    return 0


class _Channel:
    """A bounded single-producer, single-consumer handoff of tool events: at
    most ``depth`` items, and no item added once their text takes
    ``text_limit`` bytes (Rule 4)."""

    __slots__ = ("_closed", "_depth", "_getter", "_items", "_putter", "_text", "_text_limit")

    def __init__(self, depth: int, text_limit: int = CHANNEL_TEXT_BYTES) -> None:
        self._items: deque[ToolEvent] = deque()
        self._depth = depth
        self._text = 0
        self._text_limit = text_limit
        self._closed = False
        self._getter: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None

    def _full(self) -> bool:
        return len(self._items) >= self._depth or self._text >= self._text_limit

    def offer(self, item: ToolEvent) -> bool:
        """Hand ``item`` over without waiting if there is room (the hot path)."""
        if self._full() or self._closed:
            return False
        self._items.append(item)
        self._text += item_text_bytes(item)
        getter = self._getter  # _wake, inlined: this runs once per frame
        if getter is not None and not getter.done():
            getter.set_result(None)
        return True

    async def put(self, item: ToolEvent) -> None:
        while self._full() and not self._closed:
            self._putter = asyncio.get_running_loop().create_future()
            await self._putter
        if not self._closed:
            self._items.append(item)
            self._text += item_text_bytes(item)
            _wake(self._getter)

    def take(self) -> ToolEvent | None:
        """The next item if one is waiting, else ``None`` (the hot path)."""
        if not self._items:
            return None
        item = self._items.popleft()
        self._text -= item_text_bytes(item)
        putter = self._putter  # _wake, inlined: this runs once per frame
        if putter is not None and not putter.done():
            putter.set_result(None)
        return item

    async def get(self) -> ToolEvent | _Closed:
        while not self._items:
            if self._closed:
                return _CLOSED
            self._getter = asyncio.get_running_loop().create_future()
            await self._getter
        item = self._items.popleft()
        self._text -= item_text_bytes(item)
        _wake(self._putter)
        return item

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        _wake(self._getter)
        _wake(self._putter)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def decode_args(tool: Tool[Any], raw_args: Any) -> Any:
    """Decode ``raw_args`` as ``tool.args_type``: JSON text (``bytes`` or
    ``str``), already-decoded JSON values, or an instance of the type itself.
    A string UTF-8 cannot encode (a lone surrogate, in a key or a value) is
    refused like any other bad argument, never raised as ``UnicodeEncodeError``.

    Raises:
        ToolError: ``invalid_params``, naming the offending field's JSON path
            (also in ``details["path"]``).
    """
    args_type = tool.args_type
    if isinstance(raw_args, args_type):
        return raw_args
    try:
        if isinstance(raw_args, (bytes, bytearray, memoryview, str)):
            return msgspec.json.decode(raw_args, type=args_type)
        bad = find_unencodable(raw_args)
        if bad is not None:
            where = "" if bad.path == "$" else f" at `{bad.path}`"
            raise ToolError.invalid_params(
                f"invalid arguments for tool {tool.id!r}: {bad.reason}{where}",
                details={"path": bad.path, "reason": bad.reason},
            )
        return msgspec.convert(raw_args, args_type)
    except msgspec.ValidationError as exc:
        match = _AT_PATH.match(str(exc))
        reason, path = (match["reason"], match["path"]) if match else (str(exc), "$")
        where = "" if path == "$" else f" at `{path}`"
        raise ToolError.invalid_params(
            f"invalid arguments for tool {tool.id!r}: {reason}{where}{_accepted(args_type, path)}",
            details={"path": path, "reason": reason},
        ) from exc
    except msgspec.DecodeError as exc:
        raise ToolError.invalid_params(
            f"arguments for tool {tool.id!r} are not valid JSON: {exc}",
            details={"path": "$", "reason": str(exc)},
        ) from exc
    except UnicodeEncodeError as exc:  # JSON text (a ``str``) UTF-8 cannot encode
        reason = f"not valid Unicode ({exc.reason} at character {exc.start})"
        raise ToolError.invalid_params(
            f"arguments for tool {tool.id!r} are {reason}",
            details={"path": "$", "reason": reason},
        ) from None
    except RecursionError as exc:
        reason = "nested too deeply to decode"
        raise ToolError.invalid_params(
            f"arguments for tool {tool.id!r} are {reason}",
            details={"path": "$", "reason": reason},
        ) from exc


def _accepted(args_type: Any, path: str) -> str:
    """What arguments object ``args_type`` takes, said after an error in the
    object itself (an unknown or a missing field): ``"; it takes {command
    (required), cwd}"``; empty for other types and other places."""
    if path != "$" or not (isinstance(args_type, type) and issubclass(args_type, msgspec.Struct)):
        return ""
    fields = msgspec.structs.fields(args_type)
    if not fields:
        return "; it takes an empty object"
    names = [f"{f.encode_name} (required)" if f.required else f.encode_name for f in fields]
    return f"; it takes {{{', '.join(names)}}}"


class ToolRun(AsyncClosing):
    """One tool call in progress: an async iterator of progress, then one terminal.

    Iterate it with ``async for`` (or ``async with run_tool(...) as run:`` to
    have it closed, and the tool stopped, if you leave early).
    :meth:`statistics` is final once the iteration has ended.
    """

    def __init__(
        self,
        tool: Tool[Any],
        raw_args: Any,
        ctx: ToolContext,
        *,
        timeout_ms: float | None = None,
        stop_wait: float = STOP_WAIT_S,
    ) -> None:
        self._tool = tool
        self._raw_args = raw_args
        self._ctx = ctx
        self._timeout_ms = (
            effective_timeout_ms(tool.capabilities) if timeout_ms is None else timeout_ms
        )
        self._stop_wait = stop_wait
        self._progress = 0
        self._suppressed = 0
        self._after_terminal = 0
        self._terminal: ToolResult | ToolError | None = None
        self._stop_reason: ToolErrorKind | None = None
        self._stopped_at = 0.0
        self._left_running = False
        self._started = 0.0
        self._channel = _Channel(CHANNEL_DEPTH)
        self._task: asyncio.Task[None] | None = None
        self._gen: AsyncGenerator[ToolEvent, None] | None = None

    def __repr__(self) -> str:
        return f"ToolRun(tool={self._tool.id!r}, call_id={self._ctx.call_id!r})"

    @property
    def ctx(self) -> ToolContext:
        """The call's context."""
        return self._ctx

    @property
    def tool(self) -> Tool[Any]:
        """The tool it runs."""
        return self._tool

    @property
    def terminal(self) -> ToolResult | ToolError | None:
        """The terminal, once it has been yielded."""
        return self._terminal

    @property
    def left_running(self) -> bool:
        """Whether the run ended without its stopped tool: the tool did not
        stop within ``stop_wait`` and its task was left running (Rule 3)."""
        return self._left_running

    def statistics(self) -> RunStats:
        """The run's counters (see :class:`RunStats`)."""
        return RunStats(self._progress, self._suppressed, self._after_terminal)

    def __aiter__(self) -> AsyncIterator[ToolEvent]:
        # The generator itself: `async for` then skips a Python frame per item.
        return self._events()

    async def __anext__(self) -> ToolEvent:
        return await self._events().__anext__()

    def _events(self) -> AsyncGenerator[ToolEvent, None]:
        if self._gen is None:
            self._gen = self._drive()
        return self._gen

    async def aclose(self) -> None:
        """Stop the tool if it is still running and end the run."""
        if self._gen is not None:
            await self._gen.aclose()

    # -- the consumer side --------------------------------------------------------

    async def _drive(self) -> AsyncGenerator[ToolEvent, None]:
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        tool, ctx = self._tool, self._ctx
        try:
            args = decode_args(tool, self._raw_args)
        except ToolError as error:
            yield self._end(error)
            return
        if ctx.cancelled:
            yield self._end(self._stop_error(ToolErrorKind.CANCELLED))
            return
        # Not in a scope: a tool that ignores its cancellation is left running
        # after `stop_wait` (Rule 3); its late failures are reported (_report).
        task = loop.create_task(self._pump(args), name=f"tool {tool.id} call {ctx.call_id}")
        # A task cancelled before its first step never runs the pump's `finally`.
        task.add_done_callback(lambda _: self._channel.close())
        self._task = task

        def on_cancel() -> None:
            # The loop may have closed when a late cancel() comes from a thread.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._stop, ToolErrorKind.CANCELLED)

        unregister = ctx.on_cancel(on_cancel)
        deadline = (
            None
            if math.isinf(self._timeout_ms)
            else loop.call_at(
                self._started + self._timeout_ms / 1000, self._stop, ToolErrorKind.TIMEOUT
            )
        )
        channel = self._channel
        try:
            while True:
                item: ToolEvent | _Closed | None = channel.take()
                if item is None:
                    item = await channel.get()
                if item is _CLOSED:
                    break
                if isinstance(item, (ToolResult, ToolError)):
                    if self._terminal is not None:
                        self._after_terminal += 1  # e.g. its cleanup raised
                        continue
                    if deadline is not None:
                        deadline.cancel()
                    yield self._end(item)
                else:
                    self._progress += 1
                    yield item  # type: ignore[misc]
            if self._terminal is None:
                kind = self._stop_reason
                if kind is None:
                    # The pump always passes a terminal unless stopped.
                    yield self._end(ToolError(ToolErrorKind.INTERNAL_ERROR, "tool task vanished"))
                else:
                    # Ended by the stop wait (Rule 3), not by the tool.
                    self._left_running = not task.done()
                    yield self._end(self._stop_error(kind))
        finally:
            if deadline is not None:
                deadline.cancel()
            unregister()
            if not task.done():
                if self._stop_reason is None:
                    # The consumer left early or its task was cancelled.
                    self._stop_reason = ToolErrorKind.CANCELLED
                    if self._terminal is None:
                        ctx.cancel()  # the call did not finish: say so to the tool
                    task.cancel()
                    await self._settle(task)
                else:
                    _abandon(task)  # stopped already, and `stop_wait` has passed

    async def _settle(self, task: asyncio.Task[None]) -> None:
        """Wait (bounded) for a cancelled tool task to finish its cleanup."""
        done, _ = await asyncio.wait({task}, timeout=self._stop_wait)
        if not done:
            _abandon(task)

    def _end(self, terminal: ToolResult | ToolError) -> ToolResult | ToolError:
        if isinstance(terminal, ToolResult):
            terminal = non_finite_error(terminal) or terminal  # _result Rule 1
        if isinstance(terminal, ToolError):
            terminal = terminal.with_tool_id(self._tool.id)
        self._terminal = terminal
        return terminal

    def _stop_error(self, kind: ToolErrorKind) -> ToolError:
        """The error of a call stopped by its deadline or a cancel (Rule 5)."""
        loop_time = self._stopped_at or asyncio.get_running_loop().time()
        elapsed_ms = max(int((loop_time - self._started) * 1000), 0)
        left = (
            f"; the tool did not stop within {self._stop_wait:g} s and was left running"
            if self._left_running
            else ""
        )
        if kind is ToolErrorKind.TIMEOUT:
            return ToolError(
                kind,
                f"tool {self._tool.id!r} timed out after {elapsed_ms} ms"
                f" (limit {self._timeout_ms} ms){left}",
                elapsed_ms=elapsed_ms,
            )
        reason = self._ctx.cancel_reason
        if reason is None:
            reason = f"tool {self._tool.id!r} call {self._ctx.call_id!r} was cancelled"
        return ToolError(kind, f"{reason}{left}")

    def _stop(self, kind: ToolErrorKind) -> None:
        """Stop the call (deadline or cancel): the first reason wins."""
        task = self._task
        if self._stop_reason is not None or self._terminal is not None or task is None:
            return
        if task.done():
            return
        loop = asyncio.get_running_loop()
        self._stop_reason = kind
        self._stopped_at = loop.time()
        # A synchronous tool in a thread polls this; a deadline says so.
        self._ctx.cancel(
            f"the call's deadline ({self._timeout_ms} ms) passed"
            if kind is ToolErrorKind.TIMEOUT
            else None
        )
        task.cancel()
        # Rule 3: end the run even if the tool never finishes its cleanup.
        loop.call_later(self._stop_wait, self._channel.close)

    # -- the tool side ------------------------------------------------------------

    async def _pump(self, args: Any) -> None:
        """Run the tool, pass its events on, and close the channel."""
        tool = self._tool
        try:
            if not tool.streams():
                await self._channel.put(await self._call_run(args))
                return
            events = tool.execute(self._ctx, args)
            try:
                await self._pass_events(events)
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            if self._stop_reason is None and _spontaneous():
                await self._channel.put(
                    ToolError.execution(f"tool {tool.id!r} raised CancelledError by itself")
                )
                return
            raise
        except ToolError as error:
            await self._hand_over(error, error)
        except Exception as exc:
            await self._hand_over(
                ToolError.execution(f"tool {tool.id!r} failed: {type(exc).__name__}: {exc}"), exc
            )
        finally:
            self._channel.close()

    async def _hand_over(self, error: ToolError, cause: BaseException) -> None:
        """Pass the tool's failure on as its terminal, or, when the run has
        already given up on the tool (Rule 3), report it."""
        if self._channel.closed:
            _report(
                f"tool {self._tool.id!r} call {self._ctx.call_id!r} failed after its run"
                " had given up on it",
                cause,
            )
            return
        await self._channel.put(error)

    async def _call_run(self, args: Any) -> ToolResult | ToolError:
        tool, ctx = self._tool, self._ctx
        if inspect.iscoroutinefunction(tool.run):
            value = await tool.run(ctx, args)
        else:
            value = await asyncio.to_thread(tool.run, ctx, args)
        if isinstance(value, (ToolResult, ToolError)):
            return value
        return ToolResult(value=value)

    async def _pass_events(self, events: AsyncIterator[Any]) -> None:
        tool, channel = self._tool, self._channel
        wants_progress = self._ctx.wants_progress
        async for item in events:
            if isinstance(item, PROGRESS_TYPES):
                if wants_progress:
                    if not channel.offer(item):
                        await channel.put(item)
                else:
                    self._suppressed += 1
                    if not self._suppressed % SUPPRESSED_BURST:
                        await asyncio.sleep(0)  # let the deadline and a cancel in
                continue
            if not isinstance(item, (ToolResult, ToolError)):
                item = ToolError.execution(
                    f"tool {tool.id!r} yielded a {type(item).__name__},"
                    " which is neither progress nor a terminal"
                )
            await channel.put(item)
            await self._count_after_terminal(events)
            return
        await channel.put(
            ToolError.execution(f"tool {tool.id!r} ended its stream without a result")
        )

    async def _count_after_terminal(self, events: AsyncIterator[Any]) -> None:
        """Rule 2: count what the tool yields after its terminal, within bounds."""
        try:
            async with asyncio.timeout(AFTER_TERMINAL_WAIT_S):
                async for _ in events:
                    self._after_terminal += 1
                    if self._after_terminal >= MAX_ITEMS_AFTER_TERMINAL:
                        return
        except TimeoutError:
            return
        except Exception as exc:  # changes nothing for the call, but is not lost
            _report(
                f"tool {self._tool.id!r} call {self._ctx.call_id!r} failed after its terminal",
                exc,
            )


def _abandon(task: asyncio.Task[None]) -> None:
    """Keep a task that ignored cancellation referenced until it ends."""
    _ABANDONED.add(task)
    task.add_done_callback(_ABANDONED.discard)


def _report(message: str, exc: BaseException) -> None:
    """Hand a failure no caller can be given to the event loop's exception
    handler (Rule 3)."""
    asyncio.get_running_loop().call_exception_handler({"message": message, "exception": exc})


def _spontaneous() -> bool:
    """True when the current task was not cancelled from outside (the tool
    raised ``CancelledError`` itself)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


def run_tool(
    tool: Tool[Any],
    raw_args: Any,
    *,
    ctx: ToolContext,
    timeout_ms: float | None = None,
    stop_wait: float = STOP_WAIT_S,
) -> ToolRun:
    """Run ``tool`` with ``raw_args`` (JSON text, decoded JSON, or an
    ``args_type`` instance): progress, then exactly one terminal.

    ``timeout_ms`` overrides the tool's ``capabilities`` deadline (default:
    ``effective_timeout_ms(tool.capabilities)``; ``math.inf``: no deadline, the
    call runs until it ends or is cancelled); ``stop_wait`` bounds how long a
    stopped tool may clean up. A failing call never raises: its error is the
    terminal.

    Raises:
        ValueError: ``timeout_ms`` is negative or NaN, or ``stop_wait`` is not
            positive.
    """
    if timeout_ms is not None and not timeout_ms >= 0:
        raise ValueError(f"timeout_ms must be >= 0, math.inf or None, got {timeout_ms}")
    if not stop_wait > 0:
        raise ValueError(f"stop_wait must be > 0 seconds, got {stop_wait}")
    return ToolRun(tool, raw_args, ctx, timeout_ms=timeout_ms, stop_wait=stop_wait)
