"""Tests for ``TaskScope``: no task outlives its block, no failure is lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kigi_tool_runtime._scope import TaskScope

#: Every wait in these tests is bounded by this, far above what any of them needs.
PATIENCE_S = 30.0


async def _fail(after: asyncio.Event, error: Exception) -> None:
    await after.wait()
    raise error


def test_a_failure_is_raised_from_the_block_that_went_on() -> None:
    """A task's failure does not cancel the block (Rule 3) and is raised when it
    ends (Rule 2)."""

    async def main() -> list[str]:
        steps: list[str] = []
        go = asyncio.Event()

        async def block() -> None:
            async with TaskScope() as tasks:
                task = tasks.start(_fail(go, ValueError("boom")))
                go.set()
                await asyncio.wait({task})
                steps.append("the block went on")
                await asyncio.sleep(0)
                steps.append("and on")

        async with asyncio.timeout(PATIENCE_S):
            with pytest.raises(ExceptionGroup) as caught:
                await block()
        assert [type(e) for e in caught.value.exceptions] == [ValueError]
        return steps

    assert asyncio.run(main()) == ["the block went on", "and on"]


def test_leaving_cancels_and_awaits_every_task() -> None:
    """Tasks still running when the block ends are cancelled, and have ended
    (their cleanup included) when ``__aexit__`` returns (Rule 1)."""

    async def main() -> None:
        cleaned: list[bool] = []

        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0)  # a cleanup that suspends
                cleaned.append(True)

        async with asyncio.timeout(PATIENCE_S):
            async with TaskScope() as tasks:
                started = [tasks.start(forever()) for _ in range(3)]
                await asyncio.sleep(0)
        assert all(task.done() for task in started)
        assert cleaned == [True, True, True]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


def test_a_cancel_while_leaving_waits_for_the_tasks_then_propagates() -> None:
    """Cancelling the task that leaves the block does not leave a task behind
    (Rule 1): the cancellation is raised once they have ended."""

    async def main() -> None:
        release = asyncio.Event()
        child_done = asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await release.wait()  # its cleanup waits for the test
                child_done.set()

        async def leaver(entered: asyncio.Event) -> None:
            async with TaskScope() as tasks:
                tasks.start(stubborn())
                await asyncio.sleep(0)
                entered.set()

        async with asyncio.timeout(PATIENCE_S):
            entered = asyncio.Event()
            outer = asyncio.create_task(leaver(entered))
            await entered.wait()
            await asyncio.sleep(0)  # outer is now waiting in __aexit__
            outer.cancel()
            await asyncio.sleep(0)
            assert not outer.done(), "it waits for its task"
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await outer
            assert child_done.is_set()

    asyncio.run(main())


def test_the_block_error_and_the_task_failure_are_raised_together() -> None:
    """An error of the block and a failure of a task both reach the caller."""

    async def main() -> None:
        go = asyncio.Event()

        async def block() -> None:
            async with TaskScope() as tasks:
                task = tasks.start(_fail(go, KeyError("task")))
                go.set()
                await asyncio.wait({task})
                raise LookupError("block")

        with pytest.raises(ExceptionGroup) as caught:
            await block()
        assert [type(e) for e in caught.value.exceptions] == [LookupError, KeyError]

    asyncio.run(main())


def test_a_scope_across_a_generator_yield_does_not_cancel_the_consumer() -> None:
    """Held across ``yield`` (as the shell tool holds it), a failing task
    leaves its consumer alone and is raised from the generator's end."""

    async def produce(go: asyncio.Event) -> AsyncIterator[int]:
        async with TaskScope() as tasks:
            task = tasks.start(_fail(go, RuntimeError("watchdog")))
            yield 1
            await asyncio.wait({task})
            yield 2

    async def main() -> None:
        go = asyncio.Event()
        seen: list[int] = []

        async def consume() -> None:
            async for item in produce(go):
                seen.append(item)
                go.set()
                await asyncio.sleep(0)  # the consumer's own await is not cancelled

        async with asyncio.timeout(PATIENCE_S):
            with pytest.raises(ExceptionGroup) as caught:
                await consume()
        assert seen == [1, 2]
        assert [type(e) for e in caught.value.exceptions] == [RuntimeError]

    asyncio.run(main())


def test_start_outside_the_block_is_refused() -> None:
    """A task cannot be started in a scope that is not running its block."""

    async def main() -> None:
        scope = TaskScope()
        coro = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="outside"):
            scope.start(coro)
        async with scope:
            pass
        with pytest.raises(RuntimeError, match="outside"):
            scope.start(asyncio.sleep(0))
        with pytest.raises(RuntimeError, match="entered once"):
            async with scope:
                pass

    asyncio.run(main())


def test_a_long_scope_holds_only_running_and_failed_tasks() -> None:
    """Tasks that ended well are let go as they end (Rule 4); a failed one is
    kept until the block's end raises it (Rule 2)."""

    async def main() -> None:
        async def quick() -> None:
            await asyncio.sleep(0)

        async def block() -> None:
            async with TaskScope() as tasks:
                done = [tasks.start(quick()) for _ in range(100)]
                tasks.start(asyncio.Event().wait())  # runs until the block ends
                await asyncio.wait(done)
                await asyncio.sleep(0)
                assert len(tasks._tasks) == 1  # the one still running
                tasks.start(_raise(ValueError("kept")))
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                assert len(tasks._tasks) == 2  # it, and the failed one

        async with asyncio.timeout(PATIENCE_S):
            with pytest.raises(ExceptionGroup) as caught:
                await block()
        assert [str(e) for e in caught.value.exceptions] == ["kept"]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


async def _raise(error: Exception) -> None:
    raise error


def test_a_failure_the_block_took_is_not_raised_again() -> None:
    """``result`` raises a task's failure in the block, as itself; the scope
    then does not raise it a second time (Rule 2)."""

    async def main() -> None:
        async def block() -> None:
            async with TaskScope() as tasks:
                task = tasks.start(_raise(LookupError("took it")))
                await asyncio.wait({task})
                tasks.result(task)

        async with asyncio.timeout(PATIENCE_S):
            with pytest.raises(LookupError, match="took it"):
                await block()
            async with TaskScope() as tasks:
                task = tasks.start(asyncio.sleep(0, result=7))
                await asyncio.wait({task})
                assert tasks.result(task) == 7

    asyncio.run(main())
