"""``run_agent``: an ACP agent served on this process's stdin and stdout, the
wire fenced from the tools' output and ended with its editor.

The SDK's own runner (``acp.run_agent``, 0.12) writes the wire on descriptor 1,
where whatever a tool prints lands too, and its writer waits forever on a pipe
whose editor died: the agent process outlives its editor. This runner hands the
SDK a message transport of its own instead (the SDK's ``Transport``: ``send``,
``receive``, ``close``).

Rule 1. The wire is fenced first (:func:`fence_stdio`): it is read from and
        written to private copies of descriptors 0 and 1, and what any code
        prints (``print``, ``os.write(1, ...)``, a thread, a child process)
        goes to stderr, never into the JSON-RPC stream.
Rule 2. The connection ends when the editor goes away: end of input (the
        editor closed its end, or died), or the output gone (the editor closed
        its reading end, or died; the event loop sees it on a pipe or a
        socket). A send waiting on a full pipe then fails with
        ``ConnectionError`` instead of waiting forever.
Rule 3. At its end the connection is closed: the SDK cancels the handlers
        still running, so each running :class:`AcpToolCalls` call stops its
        tool (the shell tool's whole process group). What was written is then
        flushed for at most :data:`FLUSH_WAIT_S` seconds, and the runner
        returns: the process can exit.
Rule 4. Each line read is one JSON-RPC message: a blank line, one that is not
        JSON or not a JSON object is logged and skipped (the SDK's reading
        does the same for the first two); a line may be of any length.
Rule 5. Only the agent's own messages fail for a lost output (Rule 2), so
        that its calls stop. An answer to one of the editor's requests is
        dropped once the output is gone (nothing could take it), and a message
        sent once the connection is closed (the SDK's ``close`` cancels the
        handlers still running, and one that answers its cancelled request,
        ``stopReason: "cancelled"`` as the protocol asks, sends that answer)
        is written without waiting, the flush of Rule 3 bounding the wait for
        it, or dropped when the output is gone. Neither raises: the SDK logs
        a handler's failed answer with a traceback, and a failure in its
        ``close`` would fail ``run_agent``, for every editor that goes away
        while prompts run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Final

from acp import Agent, Client
from acp.agent.connection import AgentSideConnection

from .._call._sink import Sink
from .._scope import TaskScope
from .._transport._fence import fence_stdio
from .._transport._stdio import open_stdio

__all__ = ("run_agent",)

#: How long the wire may take to flush what was written once the connection
#: ended (Rule 3): an editor still reading takes it at once; one that stopped
#: reading must not keep the process alive.
FLUSH_WAIT_S: Final = 2.0

_log = logging.getLogger(__name__)


def parse_message(line: bytes) -> dict[str, Any] | None:
    """One wire line's JSON-RPC message, or ``None`` for a line to skip (Rule 4)."""
    line = line.strip()
    if not line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        _log.warning("skipped an ACP line that is not JSON: %.200r", line)
        return None
    if not isinstance(message, dict):
        _log.warning("skipped an ACP line that is not a JSON object: %.200r", line)
        return None
    return message


class StdioWire:
    """The SDK's message transport over the fenced stdio wire (Rules 2, 4, 5)."""

    def __init__(
        self, reader: asyncio.StreamReader, sink: Sink, lost: asyncio.Future[None]
    ) -> None:
        self._reader = reader
        self._sink = sink
        self._lost = lost
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        answer = "method" not in message  # to one of the editor's requests
        if self._lost.done():
            if self._closed or answer:
                return  # Rule 5: nothing could take it
            raise ConnectionError("the editor no longer reads the ACP connection")
        # As the SDK writes it: compact JSON, one line.
        self._sink.write((json.dumps(message, separators=(",", ":")) + "\n").encode())
        if self._closed:
            return  # the flush bounds the wait for it (Rule 5)
        try:
            await self._sink.drain()  # fails once the output is gone (Rule 2)
        except ConnectionError:
            if not answer:
                raise

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._line()
            if not line:
                return None  # end of input (Rule 2)
            message = parse_message(line)
            if message is not None:
                return message

    async def _line(self) -> bytes:
        """The next line, however long (the reader's limit bounds a chunk of
        it), or what precedes the end of input."""
        chunks: list[bytes] = []
        reader = self._reader
        while True:
            try:
                chunks.append(await reader.readuntil(b"\n"))
            except asyncio.LimitOverrunError as exc:
                chunks.append(await reader.readexactly(exc.consumed))
            except asyncio.IncompleteReadError as exc:
                chunks.append(exc.partial)
                return b"".join(chunks)
            else:
                return b"".join(chunks)

    async def close(self) -> None:
        self._closed = True

    async def flush(self, seconds: float) -> None:
        """Write out what is buffered, for at most ``seconds`` (Rule 3)."""
        sink = self._sink
        if not isinstance(sink, asyncio.StreamWriter) or self._lost.done():
            return  # a file is written as it goes; a lost output takes nothing
        sink.close()  # the transport writes its buffer, then reports the loss
        try:
            async with asyncio.timeout(seconds):
                await asyncio.shield(self._lost)
        except TimeoutError:
            sink.transport.abort()


async def run_agent(agent: Agent | Callable[[Client], Agent], **connection_kwargs: Any) -> None:
    """Serve ``agent`` (an ACP ``Agent``, or a function of the connection that
    makes one, as the SDK takes) on this process's stdin and stdout until its
    editor goes away; ``connection_kwargs`` go to the SDK's
    ``AgentSideConnection`` (``use_unstable_protocol``, for one).

    In place of the SDK's ``acp.run_agent``: the wire is fenced first (what
    the tools print goes to stderr), and the agent returns when its editor
    closes the connection or dies, its running calls stopped (see the
    module's rules). Call it before importing code that prints at import for
    that to be fenced too, or call :func:`~kigi_tool_runtime.fence_stdio`
    first.

    Raises:
        OSError: stdin or stdout is closed.
    """
    fence_stdio()
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reader, sink = await open_stdio(lost=lost)
    wire = StdioWire(reader, sink, lost)
    connection = AgentSideConnection(agent, wire, listening=False, **connection_kwargs)
    try:
        async with TaskScope() as tasks:
            listening = tasks.start(connection.listen(), name="kigi ACP agent")
            # Leaving the scope ends the listening when the output went first.
            await asyncio.wait((listening, lost), return_when=asyncio.FIRST_COMPLETED)
    finally:
        await connection.close()  # Rule 3: the handlers still running are cancelled
        with contextlib.suppress(Exception):
            await wire.flush(FLUSH_WAIT_S)
