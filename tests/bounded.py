"""Running a test's async body with a bound on the whole of it: a hang fails
the test (``TimeoutError``) instead of blocking the suite. The bound is far
above what the body takes; it is never a timing assertion."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_within(main: Coroutine[Any, Any, T], seconds: float) -> T:
    """``asyncio.run(main)``, cancelled and failed after ``seconds``."""

    async def bounded() -> T:
        async with asyncio.timeout(seconds):
            return await main

    return asyncio.run(bounded())
