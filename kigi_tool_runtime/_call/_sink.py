"""``Sink``: what every host that writes lines writes them into (the stdio
server, MCP over stdio, an ACP agent): an asyncio ``StreamWriter`` or the
blocking file writer ``_transport/_stdio.py`` gives for a file or a device."""

from __future__ import annotations

from typing import Protocol

# Plumbing for the hosts, not exported.
__all__: tuple[str, ...] = ()


class Sink(Protocol):
    """Where a host's lines go: ``write`` buffers, ``drain`` waits until the
    peer took what was written (raising when it went away)."""

    def write(self, data: bytes | bytearray) -> None: ...

    async def drain(self) -> None: ...
