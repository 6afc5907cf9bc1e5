"""``_exchange``: what the HTTP layer decides about a POST body, and how it
counts SSE events; and the SDK behaviour the HTTP layer is built on, pinned."""

from __future__ import annotations

import json
from typing import Any

import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.streamable_http import REQUEST_STREAM_BUFFER_SIZE
from mcp_types import JSONRPCNotification, jsonrpc_message_adapter
from sse_starlette import ServerSentEvent

from kigi_tool_runtime.mcp._exchange import (
    Refusal,
    RequestHead,
    count_events,
    read_head,
    reused_id_refusal,
)
from kigi_tool_runtime.mcp._http import PIPE_EVENTS


def _body(**message: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


def test_a_request_is_tracked_by_its_id_as_the_sdk_keys_it() -> None:
    """An integer and a string id that print alike are one key, as in the SDK."""
    assert read_head(_body(id=7, method="tools/call")) == RequestHead("7", 7, "tools/call")
    assert read_head(_body(id="7", method="tools/call")) == RequestHead("7", "7", "tools/call")


def test_a_null_id_is_refused_and_the_sdk_would_drop_it() -> None:
    """``"id": null`` is refused with -32600 and a null id; the SDK itself
    reads such a request as a notification (so nothing would answer)."""
    body = _body(id=None, method="tools/call", params={"name": "bash"})
    refusal = read_head(body)
    assert isinstance(refusal, Refusal)
    assert refusal.status == 400
    error = json.loads(refusal.body)
    assert error["id"] is None
    assert error["error"]["code"] == -32600
    assert "tools/call" in error["error"]["message"]
    sdk = jsonrpc_message_adapter.validate_json(body, by_name=False)
    assert isinstance(sdk, JSONRPCNotification)


def test_what_the_sdk_answers_itself_is_passed_on() -> None:
    """Not JSON, not an object, a notification, a response, an id of another
    type: ``None``, the SDK answers."""
    for body in (
        b'{"jsonrpc": "2.0", "id": 1, "method": ',
        b"[1, 2]",
        _body(method="notifications/initialized"),
        _body(id=1, result={}),
        _body(id=True, method="tools/list"),
        _body(id=[1], method="tools/list"),
        json.dumps({"jsonrpc": "1.0", "id": 1, "method": "x"}).encode(),
        b"[" * 100_000 + b"]" * 100_000,
    ):
        assert read_head(body) is None, body[:40]


@given(st.binary(max_size=200))
def test_any_body_is_read_without_raising(body: bytes) -> None:
    """Whatever a host sends, the layer decides without an exception."""
    assert read_head(body) is None or isinstance(read_head(body), RequestHead | Refusal)


@given(st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=20)))
def test_a_reused_id_refusal_echoes_the_id(request_id: int | str) -> None:
    """The refusal of a reused id carries that id back, so a raw client can
    match it (the refusal has an HTTP response of its own)."""
    head = read_head(_body(id=request_id, method="tools/call"))
    assert isinstance(head, RequestHead)
    error = json.loads(reused_id_refusal(head).body)
    assert error["id"] in (request_id, None)
    assert error["error"]["code"] == -32600


def test_events_are_counted_as_sse_starlette_writes_them() -> None:
    """One event per SDK message as sse_starlette encodes it (a single-line
    JSON ``data:`` field), none for a keep-alive comment."""
    message = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
    one = ServerSentEvent(data=message, event="message").encode()
    assert count_events(one) == 1
    assert count_events(one + one) == 2
    assert count_events(ServerSentEvent(comment="ping").encode()) == 0
    assert count_events(ServerSentEvent(data=message).encode()) == 1


def test_the_pipe_stays_below_the_sdks_per_request_buffer() -> None:
    """The SDK routes a session's messages through one task that waits for room
    in each request's stream of this size; a call's pipe must stay below it,
    with room left for the response (``_http`` Rule 3)."""
    assert PIPE_EVENTS + 1 <= REQUEST_STREAM_BUFFER_SIZE


def test_uvicorn_enters_its_signal_handlers_through_capture_signals() -> None:
    """``_http`` turns uvicorn's signal handling off by overriding this method,
    which ``Server.serve`` enters."""
    assert callable(uvicorn.Server.capture_signals)
    assert "capture_signals" in uvicorn.Server.serve.__code__.co_names
