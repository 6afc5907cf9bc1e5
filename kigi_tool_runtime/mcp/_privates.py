"""Every read of an MCP SDK internal the MCP host makes, fenced
(``kigi_tool_runtime/_upstream.py``); docs/upstream.md says what each is for
and the public hook that would replace it.

Invariants:

Rule 1. The connection a request came on is ``ServerSession._connection``
        (the SDK makes a session object per request; a handler has no public
        way to the connection under it). :func:`connection_of` gives it, or,
        where it cannot be read (mcp outside the pinned range, the attribute
        gone), the session itself with one ``RuntimeWarning``: tokens are then
        unique per request, not per connection, so a token in use may be
        reused by another request of the same connection. Nothing grows. A
        session not of the SDK's ``ServerSession`` class is its own key.
"""

from __future__ import annotations

from typing import Any, Final

from mcp.server.session import ServerSession

from .._upstream import Upstream

__all__: tuple[str, ...] = ()

#: The dependency whose internals this module reads.
MCP: Final = Upstream("mcp", "mcp")

#: What degrades when a session's connection cannot be read (Rule 1).
TOKENS_DEGRADE: Final = (
    "progress and partial-result tokens are checked per request, not per"
    " connection: two calls of one connection may share a token"
)

_MISSING: Final = object()


def connection_of(session: Any) -> Any:
    """The connection under a request's ``session`` (Rule 1)."""
    if not isinstance(session, ServerSession):
        return session
    if not MCP.usable(TOKENS_DEGRADE):
        return session
    connection = getattr(session, "_connection", _MISSING)
    if connection is _MISSING:
        MCP.degrade(TOKENS_DEGRADE, "has no ServerSession._connection")
        return session
    return connection
