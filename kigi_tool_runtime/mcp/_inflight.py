"""Which requests read from a stdio host are open (still wait for their
answer): a request reusing an open id is refused, and those still in flight
when its input ends are answered before the server stops.

Rule 1. A request is *open* under its id from the moment it is handed to the
        server until a response or error with that id is written, or the host
        cancels it (``notifications/cancelled``: it gave the id up). Ids are
        compared as the SDK correlates them (``coerce_request_id``: ``7`` and
        ``"7"`` are one id).
Rule 2. A request whose id is open is refused (:meth:`InFlight.forwarded` says
        so) and never reaches the server: the SDK tracks one request per id,
        so a second would take over the first's cancellation and both would
        answer with the same id. The refusal is the HTTP transport's
        (``-32600``, the id echoed) and does not close the first request.
Rule 3. A ``tools/call`` is not awaited at end of input: end of input cancels it
        (its tool is stopped) and a cancelled request gets no response. Nor is
        a request the host cancelled. Everything else (``ping``,
        ``tools/list``, ``server/discover``, ...) is answered in a moment, so
        the server waits for it (bounded by the final flush).
Rule 4. Bounded: one entry per open request, dropped when it is answered or
        cancelled.

Nothing here performs I/O: ids and methods in, decisions and a count out.
"""

from __future__ import annotations

from typing import Final

__all__: tuple[str, ...] = ()

#: Requests that end of input cancels rather than waits for (Rule 3).
CANCELLED_AT_END: Final = frozenset({"tools/call"})


def correlated(request_id: str | int) -> str | int:
    """``request_id`` as the SDK correlates it (Rule 1): a string that spells
    an integer is that integer (``mcp.shared.dispatcher.coerce_request_id``,
    whose module loads the SDK's I/O; a test pins that both agree)."""
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:
            pass
    return request_id


def _key(request_id: str | int) -> tuple[str, object]:
    key = correlated(request_id)
    return (type(key).__name__, key)


class InFlight:
    """The requests a host sent that the server has not answered yet."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[tuple[str, object], str] = {}  # key: method

    def forwarded(self, request_id: str | int, method: str) -> bool:
        """Open a request going to the server (Rule 1); false, and nothing
        changes, when its id is open already: refuse it (Rule 2)."""
        key = _key(request_id)
        if key in self._open:
            return False
        self._open[key] = method
        return True

    def cancelled(self, request_id: str | int) -> None:
        """The host cancelled a request: no answer will come (Rules 1, 3)."""
        self._open.pop(_key(request_id), None)

    def answered(self, request_id: str | int) -> None:
        """A response or error with this id was written (Rule 1)."""
        self._open.pop(_key(request_id), None)

    def is_open(self, request_id: str | int) -> bool:
        """Whether a request with this id is open (Rule 1)."""
        return _key(request_id) in self._open

    @property
    def open(self) -> int:
        """Requests open (Rule 4)."""
        return len(self._open)

    @property
    def awaited(self) -> int:
        """Open requests end of input waits for (Rule 3)."""
        return sum(method not in CANCELLED_AT_END for method in self._open.values())
