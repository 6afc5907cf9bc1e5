"""Tests for ``AsyncClosing``: ``async with`` binds the object and closes it
with ``aclose()`` however the block is left; a subclass must say how it closes."""

from __future__ import annotations

import asyncio

import pytest

from kigi_tool_runtime import ServedCall
from kigi_tool_runtime._call._caller import CallHandle
from kigi_tool_runtime._closing import AsyncClosing
from kigi_tool_runtime._tools._runner import ToolRun

#: Every wait in these tests is bounded by this, far above what any of them needs.
PATIENCE_S = 30.0


class _Counted(AsyncClosing):
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_the_block_binds_the_object_and_its_end_closes_it_once() -> None:
    """Rules 1 and 2: nothing happens on the way in; one close on the way out."""

    async def main() -> None:
        thing = _Counted()
        async with thing as bound:
            assert bound is thing
            assert thing.closed == 0
        assert thing.closed == 1

    asyncio.run(main())


def test_an_exception_closes_the_object_and_is_not_suppressed() -> None:
    """Rule 2: the block's error comes out, after the close."""

    async def main() -> None:
        thing = _Counted()
        with pytest.raises(ValueError, match="boom"):
            async with thing:
                raise ValueError("boom")
        assert thing.closed == 1

    asyncio.run(main())


def test_a_cancelled_block_closes_the_object() -> None:
    """Rule 2: the task running the block cancelled, the object is closed."""

    async def main() -> None:
        thing = _Counted()
        entered = asyncio.Event()

        async def block() -> None:
            async with thing:
                entered.set()
                await asyncio.Event().wait()

        async with asyncio.timeout(PATIENCE_S):
            task = asyncio.create_task(block())
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert thing.closed == 1

    asyncio.run(main())


def test_a_subclass_that_does_not_say_how_it_closes_cannot_be_made() -> None:
    """Rule 3: ``aclose`` is abstract."""

    class _Forgetful(AsyncClosing):
        pass

    with pytest.raises(TypeError, match="aclose"):
        _Forgetful()  # type: ignore[abstract]


@pytest.mark.parametrize("handle", [ServedCall, ToolRun, CallHandle])
def test_every_closing_handle_is_one(handle: type[object]) -> None:
    """The served call, the tool run and the caller's handle close the same way."""
    assert issubclass(handle, AsyncClosing)
