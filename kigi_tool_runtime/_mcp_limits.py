"""The limits of the MCP server, here rather than in ``mcp`` so the CLI's help
can state them without importing the optional SDK."""

from __future__ import annotations

from typing import Final

from ._transport._rpc_server import MAX_CALLS_IN_FLIGHT as MAX_CALLS_IN_FLIGHT

__all__ = ()

#: Streamable HTTP sessions open at once; the next initialize is answered 503
#: until one ends. A tool server has a few hosts, each with one session; the
#: SDK's default (10,000) lets any local process hold hundreds of MiB.
MAX_HTTP_SESSIONS: Final = 64

#: Seconds a streamable HTTP session may go without a request in flight before
#: it is closed (its id then answers 404 and the host initializes again). A
#: call in flight, or an open GET stream, keeps its session open.
HTTP_SESSION_IDLE_S: Final = 600.0
