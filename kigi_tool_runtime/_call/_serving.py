"""The bounds every server of calls keeps, whatever carries them (the stdio
server, the MCP transports, the NATS worker), and the text of a call the server
itself stops (sans-IO)."""

from __future__ import annotations

from typing import Final

# Plumbing for the servers, not exported.
__all__: tuple[str, ...] = ()

#: Seconds in which no written byte left the output after which the peer counts
#: as having stopped reading (the stdio server's Rule 3): calls stop waiting for
#: queue space and drop their oldest frames instead, so a tool is never held
#: hostage by a stalled reader.
#: Long enough that a busy but live reader on a loaded machine is waited for.
WRITER_STALL_S: Final = 1.0

#: Seconds the final flush (the stdio server's Rule 6) may take in all, however
#: slowly the output moves: a live reader takes even the largest backlog (every call's queue full)
#: in far less, and a server asked to stop must stop.
FINAL_FLUSH_S: Final = 10.0

#: The message of the error a call gets when the server itself stops it (end of
#: input, broken output), as the Rust servers word it.
SERVER_CANCEL_MESSAGE: Final = "tool call cancelled by server"
