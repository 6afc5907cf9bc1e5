"""Run a :class:`McpToolServer` over stdio (JSON lines) or streamable HTTP.

Invariants:

Rule 1. stdio: the process's stdin and stdout are fenced (nothing printed
        reaches the wire) and served as JSON lines by ``_lines``'s
        :func:`serve_lines_mcp`, whose rules say how lines are read, answered,
        batched, held and flushed.
Rule 2. HTTP: streamable HTTP on ``host:port``, loopback by default, with the
        SDK's DNS-rebinding protection on for loopback hosts. Closing a session,
        or the socket of a call's SSE response (the host leaving), cancels its calls;
        sessions, calls and shutdown are bounded as ``_http`` says.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Final

from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING

from .._mcp_limits import HTTP_SESSION_IDLE_S, MAX_HTTP_SESSIONS
from .._transport._fence import fence_stdio
from .._transport._stdio import open_stdio
from ._http import serve_http
from ._lines import serve_lines_mcp
from ._server import McpToolServer

__all__ = ("serve_http_mcp", "serve_stdio_mcp")

#: Where the HTTP transport listens unless told otherwise: this machine only.
DEFAULT_HTTP_HOST: Final = "127.0.0.1"


async def serve_stdio_mcp(
    server: McpToolServer,
    *,
    max_line_bytes: int = MAX_FRAME_BYTES_CEILING,
    hold_responses: bool = True,
) -> None:
    """Serve MCP over this process's stdin and stdout until end of input
    (``hold_responses``: see :func:`serve_lines_mcp`). The process is fenced
    first (:func:`~kigi_tool_runtime._transport._fence.fence_stdio`): from then on what any code
    prints to stdout goes to stderr, never onto the wire.

    Raises:
        OSError: stdin or stdout is closed or cannot be watched.
    """
    fence_stdio()
    reader, sink = await open_stdio()
    await serve_lines_mcp(
        server, reader, sink, max_line_bytes=max_line_bytes, hold_responses=hold_responses
    )


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: any free port).

    Raises:
        OSError: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http_mcp(
    server: McpToolServer,
    host: str = DEFAULT_HTTP_HOST,
    port: int = 0,
    *,
    sock: socket.socket | None = None,
    on_ready: Callable[[str], None] | None = None,
    path: str = "/mcp",
    max_sessions: int = MAX_HTTP_SESSIONS,
    session_idle_s: float = HTTP_SESSION_IDLE_S,
) -> None:
    """Serve MCP over streamable HTTP on ``host:port`` (Rule 2), or on the
    listening ``sock`` (from :func:`bind_socket`; it is closed at the end),
    until cancelled; then every call is stopped and the connections closed,
    in a bounded time, before the cancellation goes on (``_http`` Rule 5).
    ``on_ready`` gets the endpoint's URL once the socket listens (with the
    real port when ``port`` is 0). At most ``max_sessions`` sessions are open
    at once, and one idle for ``session_idle_s`` seconds is closed.

    Raises:
        OSError: the address cannot be bound.
        ValueError: ``max_sessions`` or ``session_idle_s`` is not positive.
    """
    if max_sessions < 1 or not session_idle_s > 0:
        raise ValueError(
            f"max_sessions and session_idle_s must be positive, got {max_sessions}"
            f" and {session_idle_s}"
        )
    if sock is None:
        sock = bind_socket(host, port)
    host, bound_port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    try:
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound_port}{path}")
        await serve_http(
            server, sock, path=path, max_sessions=max_sessions, session_idle_s=session_idle_s
        )
    finally:
        sock.close()
