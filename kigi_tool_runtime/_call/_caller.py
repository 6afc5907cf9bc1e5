"""What a caller is handed back, whatever carried the call (the stdio
``Client``, a NATS ``NatsCall``): each frame with what it added, the error of
a call that failed, and the handle both kinds of call share (sans-IO: the
time is passed in, as a number on the driver's clock).

Invariants:

Rule 1. A call has exactly one outcome: the first of its result or error
        from the transport, its deadline passing here (``timeout``), and
        leaving it (``aclose``: ``cancelled``, "was abandoned"). What comes
        after the first changes nothing.
Rule 2. A call with a ``timeout`` ends here its grace after it (by default
        :data:`TIMEOUT_GRACE_S`; the server's own ``timeout`` reply has that
        long to arrive), with a ``timeout`` error that says how long it waited
        and why.
Rule 3. The handle gives a call up (stops waiting for it and sends its cancel)
        once, and only when its own deadline or ``aclose`` ended it; ``cancel()``
        asks the far side to cancel a call that has not ended, and the call
        goes on to the reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from kigi_tool_protocol import ToolCallProgressFrame, ToolCallResult, ToolErrorWire
from kigi_tool_protocol._tool_error import CancelledWire, TimeoutWire, error_code_for

from .._closing import AsyncClosing
from .._consumer._reassembler import Appended
from .._tools._errors import ToolError

# CallHandle and CallTerms are the handles' shared plumbing, not exported.
__all__ = ("CallLoss", "CallProgress", "RemoteToolError")

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

    wire: ToolErrorWire
    number: int

    def __init__(self, wire: ToolErrorWire, message: str, *, number: int | None = None) -> None:
        self._init_from_wire(wire, message)
        self._set("wire", wire)
        self._set("number", error_code_for(wire) if number is None else number)

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


@dataclass(frozen=True, slots=True)
class CallLoss:
    """Progress of a call that its transport knows it lost, with no frame to show
    for it (frames a stream's limits discarded, a ``seq`` hole, frames lost
    after the last one received), as yielded by iterating a NATS call or
    follower: ``appended`` is what the reassembler recorded for it
    (``Reassembler.appended_loss``): its ``gap`` and ``anomalies``, and
    ``appended.render()`` the marker to print where the bytes went missing.
    ``frame`` and ``seq`` are ``None``, so code that reads a
    :class:`CallProgress` item's ``appended`` reads this one alike."""

    appended: Appended

    @property
    def frame(self) -> None:
        """No frame carried this loss."""
        return None

    @property
    def seq(self) -> None:
        """No frame, so no envelope ``seq``."""
        return None


class CallTerms:
    """When a call ends on the caller's side, and with which error (Rules 2, 3):
    its deadline on the driver's clock, ``grace`` seconds past its ``timeout``
    (``started`` and every ``now`` are times on it, in seconds), and the errors
    of a timeout and of an abandoned call. ``late`` ends the timeout's message:
    what did not arrive in time."""

    __slots__ = ("_late", "deadline", "started", "timeout", "tool_call_id", "tool_id")

    def __init__(
        self,
        tool_id: str,
        tool_call_id: str,
        timeout: float | None,
        started: float,
        late: str,
        *,
        grace: float = TIMEOUT_GRACE_S,
    ) -> None:
        self.tool_id = tool_id
        self.tool_call_id = tool_call_id
        self.timeout = timeout
        self.started = started
        self._late = late
        #: When the call times out here (``None``: never).
        self.deadline = None if timeout is None else started + timeout + grace

    def remaining(self, now: float) -> float | None:
        """Seconds left before the deadline at ``now`` (``None``: no deadline;
        0 or less: it has passed)."""
        return None if self.deadline is None else self.deadline - now

    def timed_out(self, now: float) -> RemoteToolError:
        """The ``timeout`` error of a call whose deadline passed, at ``now``."""
        elapsed_ms = int((now - self.started) * 1000)
        wire = TimeoutWire(tool_id=self.tool_id, elapsed_ms=elapsed_ms)
        message = (
            f"tool {self.tool_id!r} call {self.tool_call_id!r} timed out after {elapsed_ms} ms"
            f" (timeout {self.timeout} s; {self._late})"
        )
        return RemoteToolError(wire, message)

    def abandoned(self) -> RemoteToolError:
        """The ``cancelled`` error of a call its caller left before it ended."""
        wire = CancelledWire(tool_id=self.tool_id)
        return RemoteToolError(wire, f"call {self.tool_call_id!r} was abandoned")


class CallHandle(AsyncClosing):
    """What every call handle shares, whatever carries the call: ``await
    result()`` consumes it to its result, and ``async with`` closes it
    (:meth:`aclose`, which cancels a call still running). A subclass iterates
    ``CallProgress`` items (and, over a transport that can learn of a loss no
    frame carries, ``CallLoss`` items) and, last, the ``ToolCallResult``.

    The decisions are here (Rules 1-3); a subclass, the driver of its
    transport, says how the call ends (:meth:`_settle`), gives it up
    (:meth:`_give_up`), asks for its cancel (:meth:`_ask_cancel`), and calls
    :meth:`_time_out` with its clock's time when the deadline in
    ``_terms`` passed.
    """

    _terms: CallTerms
    _finished: bool = False  # the consumer has seen the end (or closed the call)

    def __aiter__(self) -> AsyncIterator[CallProgress | CallLoss | ToolCallResult]:
        raise NotImplementedError

    # -- what a transport provides ------------------------------------------------

    def _settle(self, outcome: ToolCallResult | RemoteToolError) -> bool:
        """End the call with ``outcome`` unless it has ended (Rule 1); whether
        this ended it."""
        raise NotImplementedError

    def _has_ended(self) -> bool:
        """Whether the call has its outcome."""
        raise NotImplementedError

    def _give_up(self) -> None:
        """Stop waiting for the call and send its cancel, without waiting."""
        raise NotImplementedError

    async def _ask_cancel(self) -> None:
        """Send the call's cancel (it goes on to the reply)."""
        raise NotImplementedError

    async def _abandoned(self) -> None:
        """After :meth:`aclose` gave the call up: wait (bounded) for the cancel
        to go out, if the transport needs to."""

    async def _release(self) -> None:
        """Last step of :meth:`aclose`: let go of what the handle holds."""

    # -- the decisions -------------------------------------------------------------

    def _time_out(self, now: float) -> None:
        """The deadline passed at ``now`` (Rule 2): the call ends with its
        ``timeout`` error, unless it ended already, and is given up (Rule 3)."""
        if self._settle(self._terms.timed_out(now)):
            self._give_up()

    async def cancel(self) -> None:
        """Ask the far side to cancel the call; iterating goes on to its reply,
        normally a ``cancelled`` error. Nothing is sent for a call that ended."""
        if not self._has_ended():
            await self._ask_cancel()

    async def aclose(self) -> None:
        """Stop caring about the call: cancel it if it is still running; it
        ends "abandoned" (Rules 1, 3)."""
        if not self._has_ended() and self._settle(self._terms.abandoned()):
            self._give_up()
            await self._abandoned()
        self._finished = True
        await self._release()

    async def result(self) -> ToolCallResult:
        """Consume the call and return its result.

        Raises:
            RemoteToolError: the call failed.
        """
        async for item in self:
            if isinstance(item, ToolCallResult):
                return item
        raise AssertionError("a call always ends with a result or an error")  # pragma: no cover
