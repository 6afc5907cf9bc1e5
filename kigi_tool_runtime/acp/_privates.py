"""Every read of an ACP SDK internal the ACP host makes, fenced
(``kigi_tool_runtime/_upstream.py``); docs/upstream.md says what each is for
and the public hook that would replace it.

Invariants:

Rule 1. Whether an ``AgentSideConnection``'s client is gone is kept by the SDK
        (0.12) on its inner connection only: ``_conn``, with the booleans
        ``_disconnected`` (the client closed the pipe) and ``_closed`` (the
        agent closed it). :func:`connection_gone` reads them; any other
        object sending updates is never gone (it says so itself, by raising).
Rule 2. Where they cannot be read (agent-client-protocol outside the pinned
        range, a name gone or not a boolean), :func:`connection_gone` gives
        :data:`UNSEEN` with one ``RuntimeWarning``, and the host bounds each
        update's send instead (``acp/_host.py`` ``UNSEEN_SEND_S``): past it,
        the connection is taken as gone.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from acp.agent.connection import AgentSideConnection

from .._upstream import UNSEEN, Unseen, Upstream

__all__: tuple[str, ...] = ()

#: The dependency whose internals this module reads.
ACP: Final = Upstream("agent-client-protocol", "acp")

#: What degrades when the connection's state cannot be read (Rule 2).
GONE_DEGRADES: Final = (
    "a client gone is no longer seen at once: an update not sent within 60 s"
    " ends its call as if the connection had closed"
)


def connection_gone(connection: Any) -> bool | Literal[Unseen.UNSEEN]:
    """Whether the SDK connection ``connection`` is gone (Rule 1), or
    :data:`UNSEEN` (Rule 2)."""
    if not isinstance(connection, AgentSideConnection):
        return False
    if not ACP.usable(GONE_DEGRADES):
        return UNSEEN
    inner = getattr(connection, "_conn", None)
    disconnected = getattr(inner, "_disconnected", None)
    closed = getattr(inner, "_closed", None)
    if not isinstance(disconnected, bool) or not isinstance(closed, bool):
        ACP.degrade(
            GONE_DEGRADES,
            "keeps no AgentSideConnection._conn with _disconnected and _closed booleans",
        )
        return UNSEEN
    return disconnected or closed
