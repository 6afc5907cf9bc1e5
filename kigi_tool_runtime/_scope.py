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
Rule 3. A task's failure does not cancel the task running the block, as
        ``TaskGroup`` does: the failure waits for the block's end (Rule 2). So
        a scope may be held across the ``yield`` of an async generator, whose
        consumer runs in the same task between items (a ``TaskGroup`` there
        would cancel the consumer, wherever it is). A block that must react to
        a failure at once watches the task :meth:`TaskScope.start` returned.
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
        self._tasks: list[asyncio.Task[Any]] = []
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
        self._tasks.append(task)
        return task

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        tasks = self._tasks
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
        tasks.clear()
        if errors:
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                errors.insert(0, exc)
            raise BaseExceptionGroup("a task of a TaskScope failed", errors)
        if interrupted is not None:
            raise interrupted
