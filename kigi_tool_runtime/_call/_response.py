"""A call's response, decoded once for every transport that carries it (the
stdio client's lines, a NATS call's end message): the ``ToolCallResult``, or
how the call failed (sans-IO).

Invariants:

Rule 1. An error response is a :class:`Failure` of the ``ToolErrorWire`` its
        ``error.data`` carries, with its ``error.message`` and ``error.code``;
        ``data`` that is no ``ToolErrorWire`` (or none) is an
        ``internal_error`` whose detail is the message.
Rule 2. A result that is no ``ToolCallResult``, and a line that is no
        JSON-RPC response at all, end the call with an ``internal_error`` that
        says so (``whose`` names what carried it: the server, the call's end
        message), never with a silent success.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcResponse,
    ToolCallResult,
    ToolErrorWire,
    json_codec,
)
from kigi_tool_protocol._codec import convert
from kigi_tool_protocol._tool_error import InternalErrorWire

from ._caller import RemoteToolError

# Plumbing for the servers and callers, not exported.
__all__: tuple[str, ...] = ()


class Failure(NamedTuple):
    """How a call or request failed: the error wire, the message, and the
    JSON-RPC ``error.code`` (None: the wire's own number)."""

    wire: ToolErrorWire
    message: str
    number: int | None = None

    def error(self) -> RemoteToolError:
        """The :class:`RemoteToolError` a caller is raised."""
        return RemoteToolError(self.wire, self.message, number=self.number)


def _internal(detail: str) -> Failure:
    return Failure(InternalErrorWire(detail=detail), detail)


def failure_of(response: JsonRpcResponse[Any]) -> Failure:
    """The failure an error response carries (Rule 1)."""
    error = response.error
    assert error is not None
    try:
        wire: ToolErrorWire = convert(error.data, ToolErrorWire)
    except DecodeError:
        wire = InternalErrorWire(detail=error.message)
    return Failure(wire, error.message, error.code)


def outcome_of(response: JsonRpcResponse[msgspec.Raw], whose: str) -> ToolCallResult | Failure:
    """What a call's response says: its result, or its failure (Rules 1, 2).
    ``whose`` begins the sentence of a result that is no ``ToolCallResult``
    (``"the server's"``: "the server's result is not a ToolCallResult: ...")."""
    if response.error is not None:
        return failure_of(response)
    assert response.result is not None
    try:
        return json_codec.decode(response.result, ToolCallResult)
    except DecodeError as exc:
        return _internal(f"{whose} result is not a ToolCallResult: {exc}")


def decode_outcome(line: bytes, whose: str) -> ToolCallResult | RemoteToolError:
    """What a response line (a NATS call's end message) says: its result, or
    the error a caller is raised (Rules 1, 2); ``whose`` names the line in
    the errors (``"the call's"``: "the call's end message is not ...")."""
    try:
        response = json_codec.decode_message(line, params=msgspec.Raw, result=msgspec.Raw)
    except DecodeError as exc:
        failure = _internal(f"{whose} end message is not a JSON-RPC response: {exc}")
    else:
        if isinstance(response, JsonRpcResponse):
            outcome = outcome_of(response, whose)
            if isinstance(outcome, ToolCallResult):
                return outcome
            failure = outcome
        else:
            failure = _internal(f"{whose} end message is a request or notification, not a response")
    return failure.error()
