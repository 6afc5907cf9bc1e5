"""Tests for ``run_tool``: the ``Progress* Terminal`` grammar, enforced."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import CustomProgress, PartialResultPayload, TextProgress, ToolCapabilities
from kigi_tool_runtime import (
    ShellTool,
    Tool,
    ToolContext,
    ToolError,
    ToolErrorKind,
    ToolEvent,
    ToolResult,
    run_tool,
)
from kigi_tool_runtime._tools._result import non_finite_error, non_finite_path
from kigi_tool_runtime._tools._runner import (
    AFTER_TERMINAL_WAIT_S,
    CHANNEL_DEPTH,
    CHANNEL_TEXT_BYTES,
    MAX_ITEMS_AFTER_TERMINAL,
    SUPPRESSED_BURST,
    RunStats,
    ToolRun,
    decode_args,
    item_text_bytes,
)

#: Every wait in these tests is bounded by this, far above what any of them needs.
PATIENCE_S = 30.0


class Count(msgspec.Struct, forbid_unknown_fields=True):
    count: int = 2
    word: str = "tick"


def text(i: int) -> TextProgress:
    return TextProgress(text=f"p{i}")


class Counter(Tool[Count]):
    """Yields ``count`` progress items, then a result."""

    id = "counter"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i in range(args.count):
            yield text(i)
        yield ToolResult(value={"done": args.count})


async def drive(run: ToolRun) -> list[ToolEvent]:
    items: list[ToolEvent] = []
    async with asyncio.timeout(PATIENCE_S):
        async for item in run:
            items.append(item)
    return items


def run_all(tool: Tool[Any], raw: Any = b"{}", **kw: Any) -> tuple[list[ToolEvent], ToolRun]:
    ctx = kw.pop("ctx", None) or ToolContext("call-1", wants_progress=kw.pop("wants", True))
    run = run_tool(tool, raw, ctx=ctx, **kw)
    return asyncio.run(drive(run)), run


def terminal_of(items: list[ToolEvent]) -> ToolResult | ToolError:
    terminals = [i for i in items if isinstance(i, (ToolResult, ToolError))]
    assert len(terminals) == 1, "exactly one terminal"
    assert items[-1] is terminals[0], "the terminal comes last"
    return terminals[0]


def error_of(items: list[ToolEvent]) -> ToolError:
    terminal = terminal_of(items)
    assert isinstance(terminal, ToolError)
    return terminal


# -- the happy path and argument decoding -------------------------------------------


def test_progress_then_one_result() -> None:
    """A well-behaved tool's progress passes through in order, then its result."""
    items, run = run_all(Counter(), b'{"count": 3}')
    assert items == [text(0), text(1), text(2), ToolResult(value={"done": 3})]
    assert run.statistics() == RunStats(progress=3, suppressed=0, after_terminal=0)
    assert run.terminal == ToolResult(value={"done": 3})


@pytest.mark.parametrize(
    "raw",
    [b'{"count": 1}', '{"count": 1}', {"count": 1}, Count(count=1), bytearray(b'{"count":1}')],
)
def test_arguments_come_as_json_text_values_or_the_struct(raw: Any) -> None:
    """Raw JSON (bytes or str), decoded JSON values and the Struct itself all work."""
    items, _ = run_all(Counter(), raw)
    assert terminal_of(items) == ToolResult(value={"done": 1})


@pytest.mark.parametrize(
    ("raw", "path", "reason"),
    [
        (b'{"count": "3"}', "$.count", "Expected `int`, got `str`"),
        ({"count": 1.5}, "$.count", "Expected `int`, got `float`"),
        (b'{"word": 7}', "$.word", "Expected `str`, got `int`"),
        (b"[]", "$", "Expected `object`, got `array`"),
        ({"cuont": 1}, "$", "Object contains unknown field `cuont`"),
    ],
)
def test_arguments_that_do_not_fit_name_the_field(raw: Any, path: str, reason: str) -> None:
    """Arguments that do not fit the input type are an ``invalid_params`` terminal
    naming the field; the tool never runs."""
    items, _ = run_all(Counter(), raw)
    error = error_of(items)
    assert items == [error]
    assert error.kind is ToolErrorKind.INVALID_PARAMS
    assert error.message.startswith("invalid arguments for tool 'counter': " + reason)
    assert error.details == {"path": path, "reason": error.details["reason"]}
    assert reason in error.details["reason"]
    if path != "$":
        assert f"at `{path}`" in error.message
        assert "it takes" not in error.message
    else:  # the object itself is wrong: the error says what it takes
        assert error.message.endswith("; it takes {count, word}")
    assert error.tool_id == "counter"


def test_malformed_json_arguments_are_invalid_params() -> None:
    """Text that is not JSON is an ``invalid_params`` terminal saying so."""
    error = error_of(run_all(Counter(), b'{"count": ')[0])
    assert error.kind is ToolErrorKind.INVALID_PARAMS
    assert "are not valid JSON" in error.message


def test_decode_args_raises_the_terminal_it_would_yield() -> None:
    """``decode_args`` alone raises the same ``invalid_params`` error."""
    with pytest.raises(ToolError, match=r"Expected `int`, got `str` at `\$\.count`"):
        decode_args(Counter(), {"count": "x"})


@pytest.mark.parametrize(
    ("raw", "place"),
    [
        ({"\ud800": 1}, "the object key '\\ud800' is not valid Unicode"),
        ({"count": 1, "word": "a\udfff"}, "the string 'a\\udfff' is not valid Unicode at `$.word`"),
        (
            '{"count": 1, "word": "a\udfff"}',
            "not valid Unicode (surrogates not allowed at character 23)",
        ),
    ],
)
def test_arguments_utf8_cannot_encode_are_invalid_params_naming_the_place(
    raw: Any, place: str
) -> None:
    """A lone surrogate in a key or a value (Python values, or JSON text as a
    ``str``) is an ``invalid_params`` terminal naming where it is, never a
    ``UnicodeEncodeError``."""
    error = error_of(run_all(Counter(), raw)[0])
    assert error.kind is ToolErrorKind.INVALID_PARAMS
    assert place in error.message
    with pytest.raises(ToolError) as caught:
        decode_args(Counter(), raw)
    assert caught.value.message == error.message


class Loose(msgspec.Struct):
    extra: Any = None


class Echo(Tool[Loose]):
    """Accepts any ``extra`` value and returns ``ok``."""

    id = "echo"
    args_type = Loose

    async def execute(self, ctx: ToolContext, args: Loose) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value={"ok": True})


@pytest.mark.parametrize("opening", [b"[", b'{"a":'])
@pytest.mark.parametrize("depth", [1000, 5000, 100_000])
def test_arguments_nested_too_deeply_are_invalid_params(opening: bytes, depth: int) -> None:
    """JSON arguments nested deeper than the decoder recurses are an
    ``invalid_params`` terminal, never a ``RecursionError``."""
    text = b'{"extra":' + opening * depth
    error = error_of(run_all(Echo(), text)[0])
    assert error.kind is ToolErrorKind.INVALID_PARAMS
    assert "nested too deeply" in error.message
    with pytest.raises(ToolError, match="nested too deeply"):
        decode_args(Echo(), text.decode())


# -- a misbehaving tool: the runner repairs the grammar ------------------------------


class Raiser(Tool[Count]):
    id = "raiser"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)
        raise KeyError("boom")


def test_an_exception_becomes_an_execution_terminal() -> None:
    """A tool that raises: its progress so far, then an ``execution`` error naming
    the exception."""
    items, _ = run_all(Raiser())
    assert items[0] == text(0)
    error = error_of(items)
    assert error.kind is ToolErrorKind.EXECUTION
    assert error.message == "tool 'raiser' failed: KeyError: 'boom'"
    assert error.tool_id == "raiser"


class Refuser(Tool[Count]):
    id = "refuser"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)
        raise ToolError.forbidden("not in this directory")


def test_a_raised_tool_error_is_the_terminal_as_is() -> None:
    """A ``ToolError`` raised by the tool is its terminal, kind and message kept."""
    error = error_of(run_all(Refuser())[0])
    assert error.kind is ToolErrorKind.FORBIDDEN
    assert error.message == "not in this directory"


class Mute(Tool[Count]):
    id = "mute"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)


def test_a_stream_without_a_terminal_gets_an_error_terminal() -> None:
    """A tool whose stream ends without a terminal ends in an ``execution`` error."""
    items, _ = run_all(Mute())
    assert items[0] == text(0)
    error = error_of(items)
    assert error.kind is ToolErrorKind.EXECUTION
    assert error.message == "tool 'mute' ended its stream without a result"


class Chatty(Tool[Count]):
    id = "chatty"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value=1)
        for i in range(args.count):
            yield text(i)
        yield ToolResult(value=2)
        yield ToolError.execution("late")


def test_items_after_the_terminal_are_dropped_and_counted() -> None:
    """Whatever follows the terminal (progress, another result, an error) is dropped
    and counted; the first terminal stands."""
    items, run = run_all(Chatty(), {"count": 3})
    assert items == [ToolResult(value=1)]
    assert run.statistics().after_terminal == 5


class Endless(Tool[Count]):
    id = "endless"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value="first")
        while True:
            yield text(0)


def test_counting_after_the_terminal_is_bounded() -> None:
    """A tool that yields forever after its terminal: counting stops at
    ``MAX_ITEMS_AFTER_TERMINAL`` and the run ends."""
    items, run = run_all(Endless())
    assert items == [ToolResult(value="first")]
    assert run.statistics().after_terminal == MAX_ITEMS_AFTER_TERMINAL


class Lingering(Tool[Count]):
    id = "lingering"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value="done")
        yield text(0)
        await asyncio.sleep(PATIENCE_S * 10)
        yield text(1)


def test_a_tool_that_lingers_after_its_terminal_does_not_hold_the_run() -> None:
    """A tool that awaits after its terminal is given up on after
    ``AFTER_TERMINAL_WAIT_S``; what it yielded before is counted."""
    assert AFTER_TERMINAL_WAIT_S < PATIENCE_S
    items, run = run_all(Lingering())
    assert items == [ToolResult(value="done")]
    assert run.statistics().after_terminal == 1


class Odd(Tool[Count]):
    id = "odd"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)
        yield 42  # type: ignore[misc]


def test_a_value_that_is_neither_progress_nor_terminal_is_an_error() -> None:
    """Yielding something else ends the call with an ``execution`` error naming it."""
    items, _ = run_all(Odd())
    error = error_of(items)
    assert error.message == "tool 'odd' yielded a int, which is neither progress nor a terminal"


class SelfCancel(Tool[Count]):
    id = "self_cancel"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)
        raise asyncio.CancelledError


def test_a_tool_raising_cancelled_error_by_itself_is_an_execution_error() -> None:
    """``CancelledError`` nobody asked for is a tool failure, not a cancellation."""
    error = error_of(run_all(SelfCancel())[0])
    assert error.kind is ToolErrorKind.EXECUTION
    assert "raised CancelledError by itself" in error.message


# -- run(): sync and async ----------------------------------------------------------


class AsyncAdder(Tool[Count]):
    id = "async_adder"
    args_type = Count

    async def run(self, ctx: ToolContext, args: Count) -> Any:
        await asyncio.sleep(0)
        return {"sum": args.count + 1}


class SyncAdder(Tool[Count]):
    id = "sync_adder"
    args_type = Count

    def run(self, ctx: ToolContext, args: Count) -> Any:
        return ToolResult.text(f"{args.count + 1} in {threading.current_thread().name}")


class SyncFailer(Tool[Count]):
    id = "sync_failer"
    args_type = Count

    def run(self, ctx: ToolContext, args: Count) -> Any:
        if args.count:
            raise ToolError.invalid_params("count must be 0", details={"count": args.count})
        return ToolError.execution("returned, not raised")


def test_an_async_run_returns_its_value_as_json_output() -> None:
    """``async def run`` returning a plain value: a JSON result, no progress."""
    items, run = run_all(AsyncAdder(), {"count": 4})
    assert items == [ToolResult(value={"sum": 5})]
    assert run.statistics() == RunStats(0, 0, 0)


def test_a_sync_run_runs_off_the_event_loop() -> None:
    """A plain ``def run`` runs in a worker thread and may return a ``ToolResult``."""
    result = terminal_of(run_all(SyncAdder(), {"count": 1})[0])
    assert isinstance(result, ToolResult)
    assert result.kind == "text"
    assert result.value.startswith("2 in ")
    assert result.value != f"2 in {threading.main_thread().name}"


def test_a_run_may_raise_or_return_a_tool_error() -> None:
    """``run`` fails by raising a ``ToolError`` or returning one."""
    raised = error_of(run_all(SyncFailer(), {"count": 1})[0])
    assert raised.kind is ToolErrorKind.INVALID_PARAMS
    assert raised.details == {"count": 1}
    returned = error_of(run_all(SyncFailer(), {"count": 0})[0])
    assert returned.kind is ToolErrorKind.EXECUTION
    assert returned.message == "returned, not raised"


# -- wants_progress ------------------------------------------------------------------


class Considerate(Tool[Count]):
    """Streams only when progress is wanted; the result is the same either way."""

    id = "considerate"
    args_type = Count
    capabilities = ToolCapabilities(supports_cancel=True)

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i in range(args.count):
            if ctx.wants_progress:
                yield CustomProgress(subkind="x", payload=i)
        yield ToolResult(value=args.count)


def test_without_progress_a_tool_skips_it_and_still_returns_its_result() -> None:
    """``wants_progress=False``: no progress reaches the caller, the full result does."""
    items, run = run_all(Considerate(), {"count": 3}, wants=False)
    assert items == [ToolResult(value=3)]
    assert run.statistics() == RunStats(0, 0, 0)


def test_without_progress_the_runner_withholds_what_a_tool_yields_anyway() -> None:
    """A tool that ignores ``wants_progress``: its progress is withheld and counted."""
    items, run = run_all(Counter(), {"count": 5}, wants=False)
    assert items == [ToolResult(value={"done": 5})]
    assert run.statistics() == RunStats(progress=0, suppressed=5, after_terminal=0)


class Spinner(Tool[Count]):
    """Yields progress without ever awaiting, so it never lets the event loop run;
    gives up after PATIENCE_S, so a runner that cannot stop it fails, not hangs."""

    id = "spinner"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        give_up = time.monotonic() + PATIENCE_S
        while time.monotonic() < give_up:
            yield text(0)


def test_withheld_progress_without_awaits_cannot_starve_the_deadline() -> None:
    """A tool yielding unwanted progress in a tight loop still meets its deadline:
    the runner hands the loop a turn every SUPPRESSED_BURST items."""
    items, run = run_all(Spinner(), wants=False, timeout_ms=50)
    assert error_of(items).kind is ToolErrorKind.TIMEOUT
    assert items == [error_of(items)]
    assert run.statistics().suppressed >= SUPPRESSED_BURST


# -- stopping: deadline, cancel, the consumer going away ----------------------------


class Sleeper(Tool[Count]):
    """Yields one item, then sleeps; records whether it saw cancellation."""

    id = "sleeper"
    args_type = Count

    def __init__(self) -> None:
        self.saw_cancel = False
        self.cleaned_up = False

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        try:
            yield text(0)
            await asyncio.sleep(PATIENCE_S * 10)
            yield ToolResult(value="woke")
        except asyncio.CancelledError:
            self.saw_cancel = True
            raise
        finally:
            self.cleaned_up = True


def test_the_deadline_is_a_timeout_terminal() -> None:
    """A tool past its deadline is cancelled; the terminal is ``timeout``."""
    tool = Sleeper()
    items, run = run_all(tool, timeout_ms=50)
    assert items[0] == text(0)
    error = error_of(items)
    assert error.kind is ToolErrorKind.TIMEOUT
    assert error.tool_id == "sleeper"
    assert error.elapsed_ms is not None
    assert error.message.startswith("tool 'sleeper' timed out after ")
    assert tool.saw_cancel
    assert tool.cleaned_up
    assert run.ctx.cancelled, "a thread-bound tool can poll the context"


def test_the_deadline_comes_from_the_capabilities() -> None:
    """Without an override, ``capabilities.timeout_ms`` is the deadline."""

    class Quick(Sleeper):
        id = "quick"
        capabilities = ToolCapabilities(timeout_ms=50)

    error = error_of(run_all(Quick())[0])
    assert error.kind is ToolErrorKind.TIMEOUT
    assert "(limit 50 ms)" in error.message


class Napper(Tool[Count]):
    """Sleeps a little longer than its declared deadline, then returns."""

    id = "napper"
    args_type = Count
    capabilities = ToolCapabilities(timeout_ms=50)

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        await asyncio.sleep(0.3)
        yield ToolResult(value="rested")


def test_an_infinite_timeout_lifts_the_deadline() -> None:
    """``timeout_ms=math.inf``: no deadline, so a tool slower than its declared one
    still returns its result (and without the override it times out)."""
    assert error_of(run_all(Napper())[0]).kind is ToolErrorKind.TIMEOUT
    items, _ = run_all(Napper(), timeout_ms=math.inf)
    assert items == [ToolResult(value="rested")]


def _cancelled_after_the_first(
    tool: Tool[Any], ctx: ToolContext, cancel: Callable[[], Awaitable[None]]
) -> list[ToolEvent]:
    """Every item of ``tool``'s run on ``ctx``, awaiting ``cancel()`` once its
    first item is in."""

    async def main() -> list[ToolEvent]:
        items: list[ToolEvent] = []
        async with asyncio.timeout(PATIENCE_S):
            async for item in run_tool(tool, {}, ctx=ctx):
                items.append(item)
                if len(items) == 1:
                    await cancel()
        return items

    return asyncio.run(main())


def test_ctx_cancel_ends_the_call_with_cancelled() -> None:
    """``ctx.cancel()`` mid-call cancels the tool's task: the tool sees
    ``CancelledError``, and the terminal is ``cancelled``."""
    tool = Sleeper()
    ctx = ToolContext("call-7")

    async def cancel() -> None:
        ctx.cancel()

    items = _cancelled_after_the_first(tool, ctx, cancel)
    error = error_of(items)
    assert error.kind is ToolErrorKind.CANCELLED
    assert error.message == "tool 'sleeper' call 'call-7' was cancelled"
    assert tool.saw_cancel
    assert tool.cleaned_up


def test_the_cancel_reason_is_the_cancelled_errors_message() -> None:
    """``ctx.cancel(reason)``: the call's ``cancelled`` error says the reason
    (made so by the runner, never rewritten by a host); the first cancel's
    reason is kept."""
    ctx = ToolContext("call-7r")

    async def cancel() -> None:
        ctx.cancel("tool call cancelled by server")
        ctx.cancel("a later reason")

    error = error_of(_cancelled_after_the_first(Sleeper(), ctx, cancel))
    assert error.kind is ToolErrorKind.CANCELLED
    assert error.message == "tool call cancelled by server"
    assert ctx.cancel_reason == "tool call cancelled by server"
    before = ToolContext("call-7s")
    before.cancel("the peer went away")
    assert error_of(run_all(Sleeper(), ctx=before)[0]).message == "the peer went away"


def test_a_deadline_says_why_on_the_context() -> None:
    """A deadline cancels the context with its reason, for a tool that polls it."""
    items, run = run_all(Sleeper(), timeout_ms=50)
    assert error_of(items).kind is ToolErrorKind.TIMEOUT
    assert run.ctx.cancel_reason == "the call's deadline (50 ms) passed"


def test_ctx_cancel_from_another_thread() -> None:
    """``ctx.cancel()`` may come from another thread."""
    tool = Sleeper()
    ctx = ToolContext("call-8")

    async def cancel() -> None:
        await asyncio.to_thread(ctx.cancel)

    assert error_of(_cancelled_after_the_first(tool, ctx, cancel)).kind is ToolErrorKind.CANCELLED
    assert tool.saw_cancel


def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    """A context cancelled already: the terminal is ``cancelled``, the tool never runs."""
    tool = Sleeper()
    ctx = ToolContext("call-9")
    ctx.cancel()
    items, _ = run_all(tool, ctx=ctx)
    assert items == [error_of(items)]
    assert error_of(items).kind is ToolErrorKind.CANCELLED
    assert not tool.cleaned_up


def test_cancelling_the_consumers_task_stops_the_tool_and_propagates() -> None:
    """Cancelling the task that iterates the run cancels the tool's task too (its
    cleanup runs) and the ``CancelledError`` propagates."""
    tool = Sleeper()

    async def main() -> None:
        ctx = ToolContext("call-10")
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in run_tool(tool, {}, ctx=ctx):
                started.set()

        task = asyncio.get_running_loop().create_task(consume())
        async with asyncio.timeout(PATIENCE_S):
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert ctx.cancelled

    asyncio.run(main())
    assert tool.saw_cancel
    assert tool.cleaned_up


def test_leaving_early_stops_the_tool() -> None:
    """Leaving ``async with run_tool(...)`` early closes the run and stops the tool."""
    tool = Sleeper()

    async def main() -> None:
        async with asyncio.timeout(PATIENCE_S):
            async with run_tool(tool, {}, ctx=ToolContext("call-11")) as run:
                async for _ in run:
                    break

    asyncio.run(main())
    assert tool.saw_cancel
    assert tool.cleaned_up


class Stubborn(Tool[Count]):
    """Ignores cancellation until released."""

    id = "stubborn"
    args_type = Count

    def __init__(self) -> None:
        self.release = threading.Event()

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield text(0)
        while not self.release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue  # refuses to stop
        yield ToolResult(value="finally")


def test_a_tool_that_ignores_cancellation_cannot_hang_the_run() -> None:
    """After ``stop_wait`` a tool that ignores cancellation is given up on: the run
    ends with its ``timeout`` terminal anyway."""
    tool = Stubborn()

    async def main() -> list[ToolEvent]:
        run = run_tool(tool, {}, ctx=ToolContext("call-12"), timeout_ms=20, stop_wait=0.1)
        items = await drive(run)
        tool.release.set()  # let the abandoned task end before the loop closes
        await asyncio.sleep(0.05)
        return items

    items = asyncio.run(main())
    assert error_of(items).kind is ToolErrorKind.TIMEOUT


def test_a_tool_left_running_is_said_by_its_stop_error() -> None:
    """The stop's error itself says the tool was left running (never added by
    a host later), and the run says so; a tool that stops in time is not."""
    tool = Stubborn()

    async def main(run: ToolRun) -> list[ToolEvent]:
        items = await drive(run)
        tool.release.set()  # let the abandoned task end before the loop closes
        await asyncio.sleep(0.05)
        return items

    stuck = run_tool(tool, {}, ctx=ToolContext("call-12m"), timeout_ms=20, stop_wait=0.1)
    error = error_of(asyncio.run(main(stuck)))
    assert error.kind is ToolErrorKind.TIMEOUT
    assert error.message.endswith("; the tool did not stop within 0.1 s and was left running")
    assert stuck.left_running
    quick = run_tool(Sleeper(), {}, ctx=ToolContext("call-12n"), timeout_ms=20, stop_wait=5)
    stopped = error_of(asyncio.run(main(quick)))
    assert "left running" not in stopped.message
    assert not quick.left_running


class Flood(Tool[Count]):
    """Yields as fast as it is allowed to, recording how far it got."""

    id = "flood"
    args_type = Count

    def __init__(self) -> None:
        self.yielded = 0

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i in range(args.count):
            self.yielded += 1
            yield text(i)
        yield ToolResult(value=args.count)


class WideFlood(Tool[Count]):
    """Yields ``count`` 16 KiB deltas of ASCII beside one character past
    U+FFFF (each character 4 bytes in memory, as a binary flood's text)."""

    id = "wide_flood"
    args_type = Count

    def __init__(self) -> None:
        self.yielded = 0

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i in range(args.count):
            self.yielded += 1
            delta = f"{i:05d}" + "y" * (16 * 1024 - 9) + "😀"
            yield CustomProgress(
                subkind="output_chunk",
                payload=PartialResultPayload(delta=delta, total_bytes=i * 16 * 1024),
            )
        yield ToolResult(value=args.count)


def _stalled_after_the_first(tool: WideFlood | Flood, count: int) -> tuple[list[ToolEvent], int]:
    """Run ``tool`` for ``count`` items with a consumer that stalls after the
    first (giving the tool every chance to run ahead): every item, and how far
    ahead of the consumer the tool had got then."""

    async def main() -> tuple[list[ToolEvent], int]:
        items: list[ToolEvent] = []
        ahead = 0
        async with asyncio.timeout(PATIENCE_S):
            async for item in run_tool(tool, {"count": count}, ctx=ToolContext("c")):
                items.append(item)
                if len(items) == 1:
                    for _ in range(20):
                        await asyncio.sleep(0)  # give the tool every chance to run
                    await asyncio.sleep(0.05)
                    ahead = tool.yielded - len(items)
        return items, ahead

    return asyncio.run(main())


def test_a_slow_consumer_holds_back_the_tool_within_the_channels_text_bytes() -> None:
    """A consumer that stalls on deltas of 4-byte characters: the tool runs
    ahead only as far as :data:`CHANNEL_TEXT_BYTES` of their text in memory
    (16 such deltas, not the 64 the depth allows), plus the one in hand;
    nothing is lost."""
    tool = WideFlood()
    count = CHANNEL_DEPTH * 2
    wide = "y" * (16 * 1024 - 4) + "😀"
    each = item_text_bytes(
        CustomProgress(subkind="k", payload=PartialResultPayload(delta=wide, total_bytes=0))
    )
    items, ahead = _stalled_after_the_first(tool, count)
    assert each >= 4 * 16 * 1024
    assert ahead == -(-CHANNEL_TEXT_BYTES // each) + 1  # the text bound reached, one in hand
    assert ahead < CHANNEL_DEPTH
    deltas = [item.payload.delta for item in items[:-1]]  # type: ignore[union-attr]
    assert [int(delta[:5]) for delta in deltas] == list(range(count))
    assert terminal_of(items) == ToolResult(value=count)


def test_a_slow_consumer_holds_back_the_tool_within_the_channel_depth() -> None:
    """A consumer that stalls: the tool runs at most ``CHANNEL_DEPTH`` (plus the one
    item in hand) ahead; nothing is lost, and the terminal still comes last."""
    tool = Flood()
    count = CHANNEL_DEPTH * 10
    items, ahead = _stalled_after_the_first(tool, count)
    assert ahead == CHANNEL_DEPTH + 1  # the channel full, one more in hand
    assert items[:-1] == [text(i) for i in range(count)]
    assert terminal_of(items) == ToolResult(value=count)


def test_run_tool_checks_its_bounds() -> None:
    """A negative deadline or a non-positive stop wait is refused at the call."""
    ctx = ToolContext("c")
    for bad in (-1, float("nan"), -math.inf):
        with pytest.raises(
            ValueError, match=f"timeout_ms must be >= 0, math.inf or None, got {bad}"
        ):
            run_tool(Counter(), {}, ctx=ctx, timeout_ms=bad)
    with pytest.raises(ValueError, match="stop_wait must be > 0 seconds, got 0"):
        run_tool(Counter(), {}, ctx=ctx, stop_wait=0)


class SyncPoller(Tool[Count]):
    """A synchronous tool that polls ``ctx.cancelled`` (a thread cannot be cancelled)."""

    id = "sync_poller"
    args_type = Count

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def run(self, ctx: ToolContext, args: Count) -> Any:
        while not ctx.cancelled:
            threading.Event().wait(0.005)
        self.stopped.set()
        return "stopped"


def test_a_sync_run_sees_the_deadline_through_the_context() -> None:
    """At the deadline a thread-bound ``run`` cannot be interrupted; it sees
    ``ctx.cancelled`` and stops, and the call ends with ``timeout`` at once."""
    tool = SyncPoller()
    items, _ = run_all(tool, timeout_ms=50)
    assert error_of(items).kind is ToolErrorKind.TIMEOUT
    assert tool.stopped.wait(PATIENCE_S)


def test_leaving_right_after_the_terminal_does_not_cancel_the_call() -> None:
    """A consumer that stops at the terminal: the tool's lingering is cut short, but
    the finished call is not marked cancelled."""
    ctx = ToolContext("call-13")

    async def main() -> list[ToolEvent]:
        items: list[ToolEvent] = []
        async with asyncio.timeout(PATIENCE_S), run_tool(Lingering(), {}, ctx=ctx) as run:
            async for item in run:
                items.append(item)
                break
        return items

    assert asyncio.run(main()) == [ToolResult(value="done")]
    assert not ctx.cancelled


# -- any behaviour at all ------------------------------------------------------------

ACTIONS = ("progress", "result", "yield_error", "raise_error", "raise", "junk", "pause")


class Scripted(Tool[Count]):
    """Acts out a script of actions, whatever they are."""

    id = "scripted"
    args_type = Count

    def __init__(self, script: list[str]) -> None:
        self.script = script

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        for i, action in enumerate(self.script):
            if action == "progress":
                yield text(i)
            elif action == "result":
                yield ToolResult(value=i)
            elif action == "yield_error":
                yield ToolError.execution(f"yielded {i}")
            elif action == "raise_error":
                raise ToolError.execution(f"raised {i}")
            elif action == "raise":
                raise RuntimeError(f"bug {i}")
            elif action == "junk":
                yield i  # type: ignore[misc]
            else:
                await asyncio.sleep(0)


def expected_run(script: list[str], wants_progress: bool) -> tuple[list[ToolEvent], int, int]:
    """What the runner must produce for ``script``: the items, then the suppressed
    and after-terminal counts."""
    items: list[ToolEvent] = []
    suppressed = 0
    for i, action in enumerate(script):
        if action == "progress":
            if wants_progress:
                items.append(text(i))
            else:
                suppressed += 1
        elif action in ("result", "yield_error", "junk"):
            after = script[i + 1 :]
            stop = next((j for j, a in enumerate(after) if a in ("raise_error", "raise")), None)
            counted = after if stop is None else after[:stop]
            yielded = sum(a != "pause" for a in counted)
            return [*items, terminal_for(action, i)], suppressed, yielded
        elif action in ("raise_error", "raise"):
            return [*items, terminal_for(action, i)], suppressed, 0
    ended = ToolError.execution("tool 'scripted' ended its stream without a result")
    return [*items, ended], suppressed, 0


def terminal_for(action: str, i: int) -> ToolResult | ToolError:
    if action == "result":
        return ToolResult(value=i)
    if action == "yield_error":
        return ToolError.execution(f"yielded {i}")
    if action == "raise_error":
        return ToolError.execution(f"raised {i}")
    if action == "raise":
        return ToolError.execution(f"tool 'scripted' failed: RuntimeError: bug {i}")
    return ToolError.execution(
        "tool 'scripted' yielded a int, which is neither progress nor a terminal"
    )


def same_event(got: ToolEvent, want: ToolEvent) -> bool:
    if isinstance(want, ToolError):
        return isinstance(got, ToolError) and (got.kind, got.message) == (want.kind, want.message)
    return got == want


@given(st.lists(st.sampled_from(ACTIONS), max_size=12), st.booleans())
def test_any_tool_behaviour_becomes_progress_then_one_terminal(
    script: list[str], wants_progress: bool
) -> None:
    """Whatever a tool does, in any order, the run is its progress (if wanted) up to
    its first terminal, then exactly that terminal; later items are counted."""
    items, run = run_all(Scripted(script), wants=wants_progress)
    want, suppressed, after = expected_run(script, wants_progress)
    assert len(items) == len(want)
    assert all(same_event(g, w) for g, w in zip(items, want, strict=True))
    stats = run.statistics()
    assert stats.suppressed == suppressed
    assert stats.after_terminal == after
    assert stats.progress == len(items) - 1


def test_an_object_missing_a_required_field_is_told_what_it_takes() -> None:
    """A missing required field: the error lists the fields, the required ones
    said so, as the shell tool's arguments show it."""
    error = error_of(run_all(ShellTool(), {"cmd": "echo hi"})[0])
    assert error.kind is ToolErrorKind.INVALID_PARAMS
    assert error.message == (
        "invalid arguments for tool 'bash': Object contains unknown field `cmd`;"
        " it takes {command (required), cwd, env, timeout_ms, output_limit}"
    )
    error = error_of(run_all(ShellTool(), {})[0])
    assert "missing required field `command`; it takes {command (required), " in error.message


class _NoArgs(msgspec.Struct):
    pass


class _Stats(msgspec.Struct):
    mean: float


class _NanResult(Tool[_NoArgs]):
    id = "nan_result"
    args_type = _NoArgs

    async def run(self, ctx: ToolContext, args: _NoArgs) -> Any:
        return {"stats": _Stats(mean=math.nan), "ok": [1.5]}


def test_a_result_holding_nan_ends_with_an_error_naming_its_place() -> None:
    """A JSON result holding NaN (here inside a Struct) is no result: the call
    ends with an ``internal_error`` naming ``$.stats.mean``, never a ``null``."""
    items, _ = run_all(_NanResult())
    error = error_of(items)
    assert error.kind is ToolErrorKind.INTERNAL_ERROR
    assert "nan at $.stats.mean" in error.message
    assert "JSON cannot carry" in error.message


def test_a_text_result_and_finite_numbers_are_results() -> None:
    """Finite floats pass, and a text result is never inspected."""
    assert non_finite_error(ToolResult(value={"a": [1.0, -2.5e300]})) is None
    assert non_finite_error(ToolResult.text("nan")) is None


_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False)
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def _replace_at(value: Any, at: int, bad: float) -> tuple[Any, bool]:
    """``value`` with its leaf number ``at`` (depth first) replaced by ``bad``."""
    count = [0]

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        count[0] += 1
        return bad if count[0] - 1 == at else item

    return walk(value), count[0] > at


@given(_JSON, st.integers(0, 30), st.sampled_from([math.nan, math.inf, -math.inf]))
def test_non_finite_path_finds_the_one_bad_number(value: Any, at: int, bad: float) -> None:
    """Whatever the tree, the path ``non_finite_path`` names leads to the one
    non-finite number put in it, and a tree without one has no path."""
    assert non_finite_path(value) is None
    replaced, placed = _replace_at(value, at, bad)
    found = non_finite_path(replaced)
    if not placed:
        assert found is None
        return
    assert found is not None
    path, number = found
    assert number is bad or (math.isnan(number) and math.isnan(bad))
    # The path, read back as JSON steps, reaches the number.
    item: Any = replaced
    for step in re.findall(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]', path):
        name, index, quoted = step
        item = item[name] if name else item[int(index)] if index else item[json.loads(quoted)]
    assert item is number
