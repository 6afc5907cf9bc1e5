"""What a caller is handed back, whatever carried the call (the stdio
``Client``, a NATS ``NatsCall``): each frame with what it added, and the error
of a call that failed (sans-IO)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kigi_tool_protocol import ToolCallProgressFrame, ToolErrorWire, error_code_for

from .._consumer._reassembler import Appended
from .._tools._errors import ToolError

__all__ = ("CallProgress", "RemoteToolError")


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
