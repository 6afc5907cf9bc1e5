"""What a caller is handed back, whatever carried the call (the stdio
``Client``, a NATS ``NatsCall``): each frame with what it added, the error of
a call that failed, and the handle both kinds of call share (sans-IO)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from kigi_tool_protocol import ToolCallProgressFrame, ToolCallResult, ToolErrorWire, error_code_for

from .._closing import AsyncClosing
from .._consumer._reassembler import Appended
from .._tools._errors import ToolError

__all__ = ("CallProgress", "RemoteToolError")

#: Seconds after a call's ``timeout`` that the client waits for the server's own
#: ``timeout`` reply (the server enforces ``deadline_ms`` and kills the tool)
#: before failing the call itself. Covers a kill's grace on a loaded machine.
TIMEOUT_GRACE_S: Final = 5.0


class RemoteToolError(ToolError):
    """Raised when a call fails: the server replied with an error, the connection
    was lost, or the call timed out.

    A :class:`ToolError` made from the received ``ToolErrorWire`` (see
    :meth:`ToolError.from_wire`): ``kind`` is the wire's code and the fields are
    the wire's, so :meth:`to_wire` gives the wire back unchanged. ``wire`` is the
    ``ToolErrorWire`` as received; ``number`` the JSON-RPC ``error.code``.
    ``message`` is the wire's own sentence when its variant carries one, else
    the reply's ``error.message`` (or the client's account of the failure).
    """

    def __init__(self, wire: ToolErrorWire, message: str, *, number: int | None = None) -> None:
        self._init_from_wire(wire, message)
        self.wire = wire
        self.number = error_code_for(wire) if number is None else number

    def __repr__(self) -> str:
        return f"RemoteToolError({self.wire.code!r}, {self.message!r})"


@dataclass(frozen=True, slots=True)
class CallProgress:
    """One progress frame of a call, as yielded by iterating a :class:`Call`:
    the frame, its envelope ``seq``, and what it added to the reassembled view
    (``appended.render()`` is the text to print, gap marker included)."""

    frame: ToolCallProgressFrame[Any]
    seq: int | None
    appended: Appended


class CallHandle(AsyncClosing):
    """What every call handle shares, whatever carries the call: ``await
    result()`` consumes it to its result, and ``async with`` closes it
    (:meth:`aclose`, which cancels a call still running). A subclass iterates
    ``CallProgress`` items and, last, the ``ToolCallResult``."""

    def __aiter__(self) -> AsyncIterator[CallProgress | ToolCallResult]:
        raise NotImplementedError

    async def result(self) -> ToolCallResult:
        """Consume the call and return its result.

        Raises:
            RemoteToolError: the call failed.
        """
        async for item in self:
            if isinstance(item, ToolCallResult):
                return item
        raise AssertionError("a call always ends with a result or an error")  # pragma: no cover
