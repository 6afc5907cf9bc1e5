"""Streamable HTTP for a :class:`McpToolServer`: the SDK's app behind a thin
ASGI layer, run by uvicorn, with one shutdown path.

Invariants:

Rule 1. Each POST is an :class:`Exchange`, reachable from the call's handler
        through the request the SDK hands it (``ctx.request.scope``). Refusals
        of reused and ``null`` ids happen here, before the SDK reads the body
        (``_exchange`` Rules 1-3).
Rule 2. A POST whose host goes away before its response has ended (the
        socket closed, with or without a DELETE) marks its exchange gone; the
        handler then cancels the call, stopping its command.
Rule 3. A call keeps at most :data:`PIPE_EVENTS` of its messages between the
        SDK and its socket. The SDK routes every message of a session through
        one task that waits for room in the request's own stream (16
        messages, ``mcp.server.streamable_http.REQUEST_STREAM_BUFFER_SIZE``),
        so a host that stops reading one call's stream would stall every call
        of its session; held below that, the one slow call waits alone (and
        its outbox drops its oldest frames, counted: the server's Rule 2).
Rule 4. At most :data:`~kigi_tool_runtime._mcp_limits.MAX_HTTP_SESSIONS`
        sessions are open at once (the next initialize is answered 503), and a
        session with no request in flight for
        :data:`~kigi_tool_runtime._mcp_limits.HTTP_SESSION_IDLE_S` is closed.
Rule 5. Stopping (the serving task cancelled) is bounded and in this order:
        new calls are refused and every running call is cancelled, its
        command stopped (the server's stop wait); then the listener closes,
        hosts get :data:`DRAIN_S` to take what is left, and the connections
        still open (hosts not reading) are cut. uvicorn's own signal handlers
        are never installed: the caller owns the signals.
Rule 6. uvicorn runs in a task of :func:`serve_http`'s own task group: it has
        ended when ``serve_http`` returns or raises (cancelled once the wind
        down has passed), and its failure is raised from ``serve_http``.
        The module is anyio code throughout, as the SDK it serves is.
"""

from __future__ import annotations

import contextlib
import socket
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final

import anyio
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

from .._mcp_limits import HTTP_SESSION_IDLE_S, MAX_HTTP_SESSIONS
from ._exchange import Refusal, RequestHead, count_events, read_head, reused_id_refusal

__all__ = ()

#: Messages of one call that may be on their way to its socket (Rule 3): half
#: the SDK's per-request buffer, so the response always finds room after them.
PIPE_EVENTS: Final = 8

#: Seconds hosts get, once the calls are stopped, to read what is left before
#: their connections are cut (Rule 5).
DRAIN_S: Final = 1.0

#: Seconds the HTTP side may take to wind down after the connections are cut,
#: before its task is cancelled (Rule 5).
WIND_DOWN_S: Final = 3.0

#: Where the exchange sits in the ASGI scope (Rule 1).
SCOPE_KEY: Final = "dev.kigi.exchange"

_SESSION_HEADER: Final = b"mcp-session-id"


class Exchange:
    """One POST as its call's handler sees it: whether the host is gone
    (Rule 2) and how many of the call's messages are on their way (Rule 3)."""

    __slots__ = ("_moved", "complete", "gone", "handed", "on_leave", "written")

    def __init__(self) -> None:
        #: Called once when the host leaves (the handler cancels its call).
        self.on_leave: Callable[[], object] | None = None
        self.handed = 0  # messages the handler gave the SDK
        self.written = 0  # SSE events written to the socket
        self.complete = False  # the response has ended
        self.gone = anyio.Event()  # the host left before it ended
        self._moved = anyio.Event()

    def _wake(self) -> None:
        moved, self._moved = self._moved, anyio.Event()
        moved.set()

    def wrote(self, events: int) -> None:
        self.written += events
        self._wake()

    def leave(self) -> None:
        if not self.complete and not self.gone.is_set():
            self.gone.set()
            self._wake()
            if self.on_leave is not None:
                self.on_leave()

    async def room(self) -> None:
        """Return once fewer than :data:`PIPE_EVENTS` messages are on their
        way (or the host is gone), then count one more."""
        while self.handed - self.written >= PIPE_EVENTS and not self.gone.is_set():
            await self._moved.wait()
        self.handed += 1


def exchange_of(request: object) -> Exchange | None:
    """The exchange of the HTTP request the SDK handed a handler (``None``
    over stdio, or when the request did not come through :class:`HttpGuard`)."""
    scope = getattr(request, "scope", None)
    exchange = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return exchange if isinstance(exchange, Exchange) else None


async def _respond(send: Callable[[Any], Any], refusal: Refusal) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": refusal.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(refusal.body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": refusal.body})


class HttpGuard:
    """The ASGI layer in front of the SDK's app (Rules 1-3)."""

    def __init__(self, app: Any, *, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self._app = app
        self._max_body = max_body
        self._open: set[tuple[bytes, str]] = set()  # (session, id key) of open requests

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        exchange = Exchange()
        scope[SCOPE_KEY] = exchange
        replay: deque[Any] = deque()
        size = 0
        whole = False
        while True:
            message = await receive()
            replay.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self._max_body:
                break  # the SDK answers 413 (_exchange Rule 3)
            if not message.get("more_body", False):
                whole = True
                break
        head = read_head(b"".join(m.get("body", b"") for m in replay)) if whole else None
        if isinstance(head, Refusal):
            await _respond(send, head)
            return
        key = self._claim(scope, head)
        if isinstance(key, Refusal):
            await _respond(send, key)
            return
        sse = False

        async def receive_replayed() -> Any:
            if replay:
                return replay.popleft()
            message = await receive()
            if message["type"] == "http.disconnect":
                exchange.leave()
            return message

        async def send_counted(message: Any) -> None:
            nonlocal sse
            await send(message)
            if message["type"] == "http.response.start":
                sse = any(
                    name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                    for name, value in message.get("headers", ())
                )
            elif message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    exchange.complete = True
                if sse:
                    exchange.wrote(count_events(message.get("body", b"")))

        try:
            await self._app(scope, receive_replayed, send_counted)
        finally:
            exchange.leave()
            if key is not None:
                self._open.discard(key)

    def _claim(self, scope: Any, head: RequestHead | None) -> tuple[bytes, str] | Refusal | None:
        """Open ``head``'s id in its session, or refuse it when it is open
        already (``_exchange`` Rule 1)."""
        if head is None:
            return None
        session = next((v for k, v in scope.get("headers", ()) if k == _SESSION_HEADER), None)
        if session is None:
            return None
        key = (session, head.key)
        if key in self._open:
            return reused_id_refusal(head)
        self._open.add(key)
        return key


def _uvicorn_server(config: Any) -> Any:
    """uvicorn's server without its signal handlers (Rule 5): they would take
    SIGINT and SIGTERM from the caller, wait forever for streams nobody reads,
    and re-raise the signal at the end (a traceback). ``capture_signals`` is
    the public method ``serve`` enters for them."""
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return _Server(config)


async def serve_http(
    server: Any,
    sock: socket.socket,
    *,
    path: str = "/mcp",
    max_sessions: int = MAX_HTTP_SESSIONS,
    session_idle_s: float = HTTP_SESSION_IDLE_S,
) -> None:
    """Serve ``server`` (a :class:`McpToolServer`) on the listening ``sock``
    until cancelled, then stop as Rule 5 says and re-raise.

    Raises:
        ExceptionGroup: uvicorn failed (Rule 6).
    """
    host = sock.getsockname()[0]
    app = server.server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        max_sessions=max_sessions,
        session_idle_timeout=session_idle_s,
    )
    import uvicorn

    config = uvicorn.Config(
        HttpGuard(app),
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=int(DRAIN_S + WIND_DOWN_S),
    )
    http = _uvicorn_server(config)
    served = anyio.Event()

    async def serving() -> None:
        try:
            await http.serve(sockets=[sock])
        finally:
            served.set()

    # Rule 6: uvicorn's task is this call's; the group raises its failure.
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(serving, name="kigi mcp http")
        try:
            await served.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await _stop(server, http, served, tasks.cancel_scope)
            raise


async def _stop(server: Any, http: Any, served: anyio.Event, serving: anyio.CancelScope) -> None:
    """Rule 5, each step bounded; uvicorn's task (in ``serving``) is cancelled
    if it has not ended by then."""
    await server.stop_calls()
    http.should_exit = True
    connections = http.server_state.connections
    with anyio.move_on_after(DRAIN_S):
        while connections and not served.is_set():
            await anyio.sleep(0.05)
    for connection in list(connections):
        transport = getattr(connection, "transport", None)
        if transport is not None:
            transport.abort()  # a host not reading: its unsent bytes are dropped
    with anyio.move_on_after(WIND_DOWN_S):
        await served.wait()
    if not served.is_set():
        serving.cancel()
