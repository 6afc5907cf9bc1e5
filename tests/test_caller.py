"""The caller's side of a call, sans-IO (``_call/_caller.py``,
``_call/_response.py``): the decisions every call handle makes (deadline,
abandon, cancel, the one outcome) over any order of events, and the one
decoder of a call's response that the stdio client and NATS share."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    JsonRpcError,
    JsonRpcResponse,
    ToolCallResult,
    ToolErrorWire,
    json_codec,
)
from kigi_tool_protocol._tool_call import ToolOutputText
from kigi_tool_protocol._tool_error import (
    CancelledWire,
    InternalErrorWire,
    TimeoutWire,
    error_code_for,
)
from kigi_tool_runtime._call._caller import (
    TIMEOUT_GRACE_S,
    CallHandle,
    CallTerms,
    RemoteToolError,
)
from kigi_tool_runtime._call._response import Failure, decode_outcome, outcome_of
from kigi_tool_runtime._transport._rpc_client import ClientProtocol
from kigi_tool_runtime.testing import wire_values

RESULT = ToolCallResult(tool_call_id="c", output=ToolOutputText(value="ok"))


def _drive(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (the model's hooks do not)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise AssertionError("the handle's decision suspended")  # pragma: no cover


class _Model(CallHandle):
    """A handle over no transport: it records what the decisions asked of it."""

    def __init__(self, timeout: float | None) -> None:
        self._terms = CallTerms("bash", "c", timeout, 100.0, "nothing arrived")
        self.outcome: ToolCallResult | RemoteToolError | None = None
        self.given_up = 0
        self.cancels = 0
        self.abandon_waits = 0
        self.released = 0

    def _settle(self, outcome: ToolCallResult | RemoteToolError) -> bool:
        if self.outcome is not None:
            return False
        self.outcome = outcome
        return True

    def _has_ended(self) -> bool:
        return self.outcome is not None

    def _give_up(self) -> None:
        self.given_up += 1

    async def _ask_cancel(self) -> None:
        self.cancels += 1

    async def _abandoned(self) -> None:
        self.abandon_waits += 1

    async def _release(self) -> None:
        self.released += 1


events = st.lists(st.sampled_from(["deadline", "abandon", "cancel", "result", "error"]), max_size=8)


@given(events)
def test_any_order_of_events_gives_exactly_one_outcome(order: list[str]) -> None:
    """Whatever the order of a deadline passing, the caller leaving, a cancel
    and the transport's result or error: the call has the first terminal's
    outcome and keeps it; it is given up once, exactly when its own deadline
    or leaving ended it; a cancel is sent only while it runs."""
    handle = _Model(timeout=1.0)
    transport_error = RemoteToolError(CancelledWire(tool_id="bash"), "stopped")
    first: str | None = None
    cancels_before = 0
    for event in order:
        if event == "deadline":
            handle._time_out(handle._terms.started + 1.0 + TIMEOUT_GRACE_S)
        elif event == "abandon":
            _drive(handle.aclose())
        elif event == "cancel":
            _drive(handle.cancel())
            cancels_before += first is None
            continue
        else:
            handle._settle(RESULT if event == "result" else transport_error)
        first = first or event
    assert handle.cancels == cancels_before
    if first is None:
        assert handle.outcome is None
        assert handle.given_up == 0
        return
    outcome = handle.outcome
    if first == "result":
        assert outcome is RESULT
    elif first == "error":
        assert outcome is transport_error
    elif first == "deadline":
        assert isinstance(outcome, RemoteToolError)
        assert outcome.kind == "timeout"
    else:
        assert isinstance(outcome, RemoteToolError)
        assert outcome.message == "call 'c' was abandoned"
    assert handle.given_up == (first in ("deadline", "abandon"))
    assert handle.abandon_waits == (first == "abandon")
    assert handle.released == order.count("abandon")


def test_the_deadline_and_the_errors_of_ending_here() -> None:
    """The deadline is the timeout plus the grace; the timeout error says how long
    the call ran and what did not arrive; an abandoned call is ``cancelled``."""
    terms = CallTerms("bash", "c7", 2.0, 10.0, "the server did not answer in time")
    assert terms.deadline == 12.0 + TIMEOUT_GRACE_S
    assert terms.remaining(11.0) == 1.0 + TIMEOUT_GRACE_S
    assert CallTerms("bash", "c7", None, 10.0, "").remaining(1e9) is None
    error = terms.timed_out(10.0 + 2.0 + TIMEOUT_GRACE_S)
    assert error.wire == TimeoutWire(tool_id="bash", elapsed_ms=int((2.0 + TIMEOUT_GRACE_S) * 1000))
    assert error.message == (
        f"tool 'bash' call 'c7' timed out after {error.wire.elapsed_ms} ms"
        " (timeout 2.0 s; the server did not answer in time)"
    )
    abandoned = terms.abandoned()
    assert abandoned.wire == CancelledWire(tool_id="bash")
    assert abandoned.message == "call 'c7' was abandoned"


@given(wire=wire_values(ToolErrorWire))
def test_an_error_response_decodes_alike_on_both_transports(wire: ToolErrorWire) -> None:
    """An error response line is the same ``RemoteToolError`` whether the stdio
    client reads it or a NATS call's end message carries it."""
    number = error_code_for(wire)
    line = json_codec.encode(
        JsonRpcResponse[Any](id=1, error=JsonRpcError(code=number, message="m", data=wire))
    )
    protocol = ClientProtocol("s")
    protocol.start_call("bash", {}, tool_call_id="c", deadline_ms=None)
    (ended,) = protocol.receive_line(line)
    assert isinstance(ended.outcome, Failure)  # type: ignore[union-attr]
    stdio = ended.outcome.error()  # type: ignore[union-attr]
    nats = decode_outcome(line, "the call's")
    assert isinstance(nats, RemoteToolError)
    assert (stdio.wire, stdio.message, stdio.number) == (nats.wire, nats.message, nats.number)
    assert json_codec.encode(nats.to_wire()) == json_codec.encode(wire)


def test_what_is_no_outcome_is_an_internal_error_naming_its_carrier() -> None:
    """A result that is no ``ToolCallResult``, a line that is not JSON-RPC, and a
    message that is no response end the call with an ``internal_error`` whose
    sentence names what carried it; error data that is no wire is one too."""
    bad_result = b'{"jsonrpc":"2.0","id":1,"result":{"not":"a result"}}'
    response = json_codec.decode_message(bad_result, params=Any, result=msgspec.Raw)
    assert isinstance(response, JsonRpcResponse)
    stdio = outcome_of(response, "the server's")
    assert isinstance(stdio, Failure)
    assert stdio.message.startswith("the server's result is not a ToolCallResult: ")
    nats = decode_outcome(bad_result, "the call's")
    assert isinstance(nats, RemoteToolError)
    assert nats.message.startswith("the call's result is not a ToolCallResult: ")
    assert nats.wire == InternalErrorWire(detail=nats.message)
    garbage = decode_outcome(b"not json", "the call's")
    assert isinstance(garbage, RemoteToolError)
    assert garbage.message.startswith("the call's end message is not a JSON-RPC response: ")
    note = decode_outcome(b'{"jsonrpc":"2.0","method":"x","params":{}}', "the call's")
    assert isinstance(note, RemoteToolError)
    assert note.message == ("the call's end message is a request or notification, not a response")
    no_data = decode_outcome(
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"it failed"}}', "x"
    )
    assert isinstance(no_data, RemoteToolError)
    assert (no_data.wire, no_data.number) == (InternalErrorWire(detail="it failed"), -32005)
    good = decode_outcome(json_codec.encode(JsonRpcResponse[Any](id=1, result=RESULT)), "x")
    assert good == RESULT
