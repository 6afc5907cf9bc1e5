"""The handshake of a test that speaks MCP to a real server by hand (raw JSON
lines over stdio, or raw HTTP POSTs): the ``initialize`` request, protocol
2025-11-25 from a client named ``raw``, and the ``notifications/initialized``
sent after its answer. Send them as they are; never change them in place."""

from __future__ import annotations

from typing import Any, Final

#: The protocol version a raw host asks for.
VERSION: Final = "2025-11-25"

#: The ``initialize`` request, id 0.
INITIALIZE: Final[dict[str, Any]] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}

#: The notification that ends the handshake.
INITIALIZED: Final[dict[str, Any]] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
