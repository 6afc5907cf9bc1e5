"""The JSON-RPC lines a server writes, built without I/O: responses (a result,
an error, a call's end) and the ``tool_call_heartbeat`` notification. The
stdio server's core (``_transport/_rpc_server``) and the NATS worker and
caller write with them, so a reply reads the same on every transport.

Rule 1. Each builder returns one whole line, its newline included, in the
        key order a typed :class:`JsonRpcResponse` encodes with; an error
        whose request id could not be read is written with ``"id": null``
        (JSON-RPC 2.0), which the typed response cannot express.
Rule 2. An error carrying a ``ToolErrorWire`` is numbered by its code
        (``error_code_for``), so one error kind gets one JSON-RPC code on
        every transport.
"""

from __future__ import annotations

from typing import Any

from kigi_tool_protocol import (
    JsonRpcError,
    JsonRpcNotification,
    JsonRpcResponse,
    ToolErrorWire,
    json_codec,
)
from kigi_tool_protocol._tool_error import error_code_for

from .._call._heartbeat import METHOD_TOOL_CALL_HEARTBEAT, Beat
from .._call._outcome import CallEnd
from .._tools._result import ToolResult

__all__ = ()


def heartbeat_line(call_id: str, session_id: str | None, beat: Beat) -> bytes:
    """The ``tool_call_heartbeat`` line of ``beat`` (whole milliseconds)."""
    note: JsonRpcNotification[Any] = JsonRpcNotification(
        session_id=session_id,
        method=METHOD_TOOL_CALL_HEARTBEAT,
        params={
            "tool_call_id": call_id,
            "elapsed_ms": int(beat.elapsed_s * 1000),
            "silent_ms": int(beat.silent_s * 1000),
        },
    )
    return json_codec.encode(note) + b"\n"


def null_id_error(code: int, message: str, data: Any = None) -> bytes:
    """An error response with ``"id": null`` (Rule 4), which JSON-RPC 2.0 requires
    when the request's id could not be read and :class:`JsonRpcResponse` cannot
    express; the same key order as a typed response."""
    error = JsonRpcError(code=code, message=message, data=data)
    return b'{"jsonrpc":"2.0","id":null,"error":' + json_codec.encode(error) + b"}\n"


def error_line(
    request_id: str | int | None,
    session_id: str | None,
    code: int,
    message: str,
    data: Any = None,
) -> bytes:
    """An error response line; ``request_id`` None writes ``"id": null``."""
    if request_id is None:
        return null_id_error(code, message, data)
    error = JsonRpcError(code=code, message=message, data=data)
    response: JsonRpcResponse[Any] = JsonRpcResponse(
        id=request_id, session_id=session_id, error=error
    )
    return json_codec.encode(response) + b"\n"


def wire_error_line(
    request_id: str | int | None, session_id: str | None, message: str, wire: ToolErrorWire
) -> bytes:
    """An error response line carrying ``wire`` as its data, numbered by its code."""
    return error_line(request_id, session_id, error_code_for(wire), message, wire)


def result_line(request_id: str | int, session_id: str | None, result: Any) -> bytes:
    """A result response line."""
    response: JsonRpcResponse[Any] = JsonRpcResponse(
        id=request_id, session_id=session_id, result=result
    )
    return json_codec.encode(response) + b"\n"


def end_line(request_id: str | int, session_id: str | None, end: CallEnd) -> bytes:
    """The response line of a call's end (``_call/_outcome`` Rule 4): its
    ``ToolCallResult``, or its error (the error's message, its
    ``ToolErrorWire`` as data).

    Raises:
        Exception: the result cannot be encoded (the host then answers with
            ``end.failed(...)``).
    """
    terminal = end.terminal
    if isinstance(terminal, ToolResult):
        return result_line(request_id, session_id, terminal.to_wire(end.call_id))
    error = terminal.with_tool_id(end.tool_id)
    return wire_error_line(request_id, session_id, error.message, error.to_wire())
