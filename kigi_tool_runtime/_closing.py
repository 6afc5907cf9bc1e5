"""``AsyncClosing``: ``async with`` for an object that is closed by ``await
obj.aclose()`` (sans-IO: it imports no event loop, so a core may use it).

Invariants:

Rule 1. ``async with obj as bound:`` binds ``obj`` itself and does nothing on
        the way in.
Rule 2. Leaving the block, however it is left (its end, an exception, the
        task cancelled), awaits ``obj.aclose()`` once, and never suppresses
        the block's exception.
Rule 3. A subclass says how it closes: :meth:`AsyncClosing.aclose` is
        abstract, so a class that forgets it cannot be instantiated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ()  # internal: the package exports none of it


class AsyncClosing(ABC):
    """An object closed by :meth:`aclose`, usable as ``async with obj:`` (see
    the module's rules)."""

    __slots__ = ()

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds; the block's end awaits it (Rule 2)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
