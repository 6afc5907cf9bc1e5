"""``TaskScope``: tasks whose life is a block, where ``asyncio.TaskGroup`` cannot
be used (inside an async generator) or would do too much (cancel the block on a
helper's failure).

Invariants:

Rule 1. No task outlives its scope: leaving the block cancels the tasks still
        running and waits until every one has ended. A cancellation of the
        task leaving the block does not cut that wait short; it is raised once
        the tasks have ended.
Rule 2. No failure is lost: a task that ended with an exception (other than
        its cancellation) has it raised from the block, in an exception group
        that also holds the error the block itself raised, if any. As from a
        ``TaskGroup``, the group is raised even when the block was cancelled.
        A failure the block took itself (:meth:`TaskScope.result`, which
        raises it in the block) is the block's, and not raised again.
Rule 3. A task's failure does not cancel the task running the block, as
        ``TaskGroup`` does: the failure waits for the block's end (Rule 2). So
        a scope may be held across the ``yield`` of an async generator, whose
        consumer runs in the same task between items (a ``TaskGroup`` there
        would cancel the consumer, wherever it is). A block that must react to
        a failure at once watches the task :meth:`TaskScope.start` returned.
Rule 4. A scope holds only its running tasks and its failed ones: a task that
        ended without failing (or was cancelled) is let go as it ends, so a
        scope that lives long and starts many tasks (a worker's calls) holds
        memory for what runs, not for what ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

__all__ = ()  # internal: the package exports none of it

_T = TypeVar("_T")


class TaskScope:
    """``async with TaskScope() as tasks:`` then ``tasks.start(coro)``: see the
    module's rules. A scope is entered once.

    Raises (leaving the block):
        BaseExceptionGroup: a task of the scope failed (Rule 2).
    """

    def __init__(self) -> None:
        # Running tasks, then those that failed (Rule 4), in start order.
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._entered = False
        self._open = False

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a TaskScope is entered once")
        self._entered = self._open = True
        return self

    def start(self, coro: Coroutine[Any, Any, _T], *, name: str | None = None) -> asyncio.Task[_T]:
        """Run ``coro`` in a task of this scope, which it cannot outlive.

        Raises:
            RuntimeError: the scope's block is not running (``coro`` is closed).
        """
        if not self._open:
            coro.close()
            raise RuntimeError("TaskScope.start outside the scope's block")
        # The one task this module starts: owned by the scope, ended by __aexit__.
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._ended)
        return task

    def result(self, task: asyncio.Task[_T]) -> _T:
        """The result of ``task``, a task of this scope that has ended; its
        failure is raised here, as itself, and so not by the scope (Rule 2).

        Raises:
            InvalidStateError: ``task`` has not ended.
            BaseException: what ``task`` raised.
        """
        if task.done():
            self._tasks.pop(task, None)
        return task.result()

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """Let go of a task that ended without failing (Rule 4)."""
        if task.cancelled() or task.exception() is None:
            self._tasks.pop(task, None)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()  # a no-op for a task that has ended
        interrupted: asyncio.CancelledError | None = None
        while pending := [task for task in tasks if not task.done()]:
            try:
                await asyncio.wait(pending)
            except asyncio.CancelledError as cancel:  # Rule 1: wait all the same
                interrupted = cancel
        errors = [
            error
            for task in tasks
            if not task.cancelled() and (error := task.exception()) is not None
        ]
        self._tasks.clear()
        if errors:
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                errors.insert(0, exc)
            raise BaseExceptionGroup("a task of a TaskScope failed", errors)
        if interrupted is not None:
            raise interrupted
