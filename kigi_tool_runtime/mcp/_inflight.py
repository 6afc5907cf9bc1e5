"""Which requests read from a stdio host still wait for their answer, so that
those still in flight when its input ends are answered before the server stops.

Rule 1. Every request handed to the server is counted under its id (a reused
        id counts twice) until a response or error with that id is written.
Rule 2. A ``tools/call`` is not awaited at end of input: end of input cancels it
        (its tool is stopped) and a cancelled request gets no response. Nor is
        a request the host cancelled (``notifications/cancelled``). Everything
        else (``ping``, ``tools/list``, ``server/discover``, ...) is answered in
        a moment, so the server waits for it (bounded by the final flush).

Nothing here performs I/O: ids and methods in, a count out.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

__all__: tuple[str, ...] = ()

#: Requests that end of input cancels rather than waits for (Rule 2).
CANCELLED_AT_END: Final = frozenset({"tools/call"})


def _key(request_id: object) -> tuple[str, object]:
    # 1 and "1" are different ids (JSON-RPC compares them by type and value).
    return (type(request_id).__name__, request_id)


class InFlight:
    """The requests a host sent that the server has not answered yet."""

    __slots__ = ("_awaited", "_calls")

    def __init__(self) -> None:
        self._awaited: Counter[tuple[str, object]] = Counter()
        self._calls: Counter[tuple[str, object]] = Counter()

    def forwarded(self, request_id: object, method: str) -> None:
        """A request went to the server (Rule 1)."""
        kind = self._calls if method in CANCELLED_AT_END else self._awaited
        kind[_key(request_id)] += 1

    def cancelled(self, request_id: object) -> None:
        """The host cancelled a request: no answer will come (Rule 2)."""
        self._drop(self._awaited, _key(request_id))

    def answered(self, request_id: object) -> None:
        """A response or error with this id was written (Rule 1)."""
        key = _key(request_id)
        if self._awaited[key]:
            self._drop(self._awaited, key)
        else:
            self._drop(self._calls, key)

    @property
    def awaited(self) -> int:
        """Requests end of input waits for (Rule 2)."""
        return self._awaited.total()

    @staticmethod
    def _drop(counter: Counter[tuple[str, object]], key: tuple[str, object]) -> None:
        if counter[key] > 1:
            counter[key] -= 1
        else:
            counter.pop(key, None)
