"""What a test that speaks MCP to a real server by hand (raw JSON lines over
stdio, or raw HTTP POSTs) sends: the handshake (the ``initialize`` request,
protocol 2025-11-25 from a client named ``raw``, and the
``notifications/initialized`` sent after its answer; send them as they are,
never changed in place), a ``tools/call`` of the ``bash`` tool, and the
over-long-line exchange both the in-process and the real-process tests run."""

from __future__ import annotations

from typing import Any, Final, Protocol

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


def bash_call(request_id: Any, command: str | list[str], token: Any = None) -> dict[str, Any]:
    """A ``tools/call`` request of the ``bash`` tool running ``command``, with
    ``token`` as its ``progressToken`` when one is given."""
    params: dict[str, Any] = {"name": "bash", "arguments": {"command": command}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def http_headers(session: str | None = None) -> dict[str, str]:
    """The headers of a raw POST to a streamable HTTP endpoint: JSON in, JSON
    or an event stream back, protocol :data:`VERSION`; ``session`` is the
    ``Mcp-Session-Id`` of every request after ``initialize``."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return headers


class RawHost(Protocol):
    """A raw host's side of a line-served MCP server: send a message, read one."""

    async def send(self, message: Any) -> None: ...

    async def read(self) -> Any: ...


async def over_long_line_refused(raw: RawHost) -> None:
    """Against a server whose line limit is 4096 bytes: a ``tools/list`` line
    of about 9 KB gets ``-32600`` (``id`` null: never parsed) naming the
    limit, and the next request is served."""
    await raw.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 9000}})
    reply = await raw.read()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32600
    assert "exceeds the limit of 4096 bytes" in reply["error"]["message"]
    await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    assert (await raw.read())["id"] == 2
