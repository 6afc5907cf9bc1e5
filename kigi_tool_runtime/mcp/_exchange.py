"""What the HTTP layer in front of the SDK's streamable HTTP app decides about
one POST before the SDK sees it, and how it counts what the POST's event stream
has written (sans-IO; the ASGI driver is :mod:`._http`).

Invariants:

Rule 1. A request's id is *open* in its session from the moment its POST's
        body has been read until that POST's response has ended. A request
        whose id is open in the same session is refused with ``-32600`` (HTTP
        400, its id echoed: over HTTP the refusal has a response of its own, so
        it cannot be taken for the first call's): the SDK keys a request's
        event stream by ``str(id)`` and a second request would take the first's
        stream over, losing the first call's output. Ids are compared as the
        SDK compares them, so ``1`` and ``"1"`` are one id.
Rule 2. A request (a message with a ``method``) whose ``id`` is ``null`` is
        refused with ``-32600`` and a ``null`` id: the SDK reads it as a
        notification and drops it, so nothing would answer.
Rule 3. Anything else (not JSON, not an object, no ``method``, an id the SDK
        refuses itself, a body over the size limit) is passed on untouched:
        the SDK answers it.
Rule 4. The events an SSE response has written are counted from its body
        chunks: one event per ``data:`` line start (the SDK writes each
        message as one single-line JSON ``data:`` field; keep-alive comments
        have none).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

__all__ = ()

#: The JSON-RPC "invalid request" code (MCP and JSON-RPC 2.0 share it).
INVALID_REQUEST: Final = -32600

_encoder: Final = msgspec.json.Encoder()


class RequestHead(NamedTuple):
    """A request's id as sent (``request_id``) and as the SDK keys it (``key``)."""

    key: str
    request_id: str | int
    method: str


class Refusal(NamedTuple):
    """An HTTP answer given instead of passing the POST on: status and JSON body."""

    status: int
    body: bytes


def _error_body(request_id: str | int | None, message: str) -> bytes:
    error = {"code": INVALID_REQUEST, "message": message}
    try:
        return _encoder.encode({"jsonrpc": "2.0", "id": request_id, "error": error})
    except (msgspec.EncodeError, UnicodeEncodeError):  # an id JSON cannot carry back
        return _encoder.encode({"jsonrpc": "2.0", "id": None, "error": error})


def null_id_refusal(method: str) -> Refusal:
    """The answer to a request whose ``id`` is ``null`` (Rule 2)."""
    return Refusal(
        400,
        _error_body(
            None,
            f"Invalid request: a {method!r} request needs an integer or string id, got null"
            " (a notification has no id at all)",
        ),
    )


def reused_id_refusal(head: RequestHead) -> Refusal:
    """The answer to a request whose id is open in its session (Rule 1)."""
    return Refusal(
        400,
        _error_body(
            head.request_id,
            f"Invalid request: id {head.request_id!r} is already used by a request in"
            " flight in this session; use a new id",
        ),
    )


def read_head(body: bytes) -> RequestHead | Refusal | None:
    """What the layer does with a complete POST body: a request to track
    (Rule 1), a refusal (Rule 2), or ``None``, pass it on (Rule 3)."""
    try:
        value: Any = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return None
    method = value.get("method")
    if not isinstance(method, str) or "id" not in value:
        return None
    request_id = value["id"]
    if request_id is None:
        return null_id_refusal(method)
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return RequestHead(str(request_id), request_id, method)


def count_events(chunk: bytes) -> int:
    """How many SSE events a response body chunk holds (Rule 4)."""
    return chunk.count(b"\ndata:") + chunk.startswith(b"data:")
