"""The tokens running calls hold: a token names one running call.

Rule 1. A call claims all its keys at once or none: :meth:`Claims.claim` takes
        every key when none is held, and otherwise takes nothing and answers
        the first key already held (the call is then refused).
Rule 2. :meth:`Claims.release` gives back exactly what one successful claim
        took; a key is held by at most one call at any time.
Rule 3. Bounded: only keys of running calls are held.

Nothing here performs I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

__all__: tuple[str, ...] = ()

K = TypeVar("K", bound=Hashable)


class Claims(Generic[K]):
    """Keys held by running calls (see the module's rules)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: set[K] = set()

    def claim(self, keys: Sequence[K]) -> K | None:
        """Hold every key of ``keys`` and answer ``None``; or, when one is
        held already, hold nothing and answer that key (Rule 1)."""
        for key in keys:
            if key in self._held:
                return key
        self._held.update(keys)
        return None

    def release(self, keys: Sequence[K]) -> None:
        """Give back the keys one successful :meth:`claim` took (Rule 2)."""
        self._held.difference_update(keys)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held
