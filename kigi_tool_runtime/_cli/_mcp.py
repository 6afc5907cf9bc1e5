"""``kigi-stream serve --mcp`` (stdio) and ``--mcp-http [HOST:]PORT``: the shell
tool served to MCP hosts. The CLI's only contact with the optional ``mcp``
extra: importing this module raises ``ImportError`` naming the extra when it is
missing, so the CLI imports it only when asked to.

A host that stopped reading stdout gets no answer to the calls cancelled as
the server stops: the SDK says so in a warning per call, which ``--mcp``
counts instead and says once (as ``serve`` says its unwritten lines)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from .._call._heartbeat import HEARTBEAT_S
from .._call._status import MessageMode
from .._tools._shell import ShellTool
from .._tools._tool import Tool
from ..mcp._server import McpToolServer
from ..mcp._transports import DEFAULT_HTTP_HOST, bind_socket, serve_http_mcp, serve_stdio_mcp
from ._loop_watch import watching_loop
from ._signals import StopSignals

__all__ = ()


def parse_http_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPV6]:PORT`` as (host, port); the host is
    loopback when left out.

    Raises:
        ValueError: no valid port (0-65535) or an empty host.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = DEFAULT_HTTP_HOST, text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ValueError(f"expected [HOST:]PORT, got {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"expected [HOST:]PORT with a numeric port, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0-65535, got {port}")
    return host, port


def run_mcp_serve(
    address: tuple[str, int] | None,
    *,
    max_frame_bytes: int,
    tools: Sequence[Tool[Any]] | None = None,
    message_mode: MessageMode = "status",
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """Serve ``tools`` (default: the shell tool) over MCP: stdio when
    ``address`` is ``None``, else streamable HTTP on ``address`` (host, port),
    with progress messages in ``message_mode`` and a heartbeat every
    ``heartbeat_s`` of a call's silence. Returns the exit status."""
    return asyncio.run(
        _serve(
            address,
            max_frame_bytes,
            lambda: McpToolServer(
                [ShellTool()] if tools is None else tools,
                message_mode=message_mode,
                heartbeat_s=heartbeat_s,
            ),
        )
    )


async def _serve(
    address: tuple[str, int] | None,
    max_frame_bytes: int,
    make_server: Callable[[], McpToolServer],
) -> int:
    server = make_server()
    serving: Coroutine[Any, Any, None]
    if address is not None:

        def ready(url: str) -> None:
            print(f"kigi-stream: serving MCP over streamable HTTP at {url}", file=sys.stderr)
            sys.stderr.flush()

        host, port = address
        try:
            sock = bind_socket(host, port)
        except OSError as exc:
            print(f"kigi-stream serve: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        serving = serve_http_mcp(server, sock=sock, on_ready=ready)
    else:
        serving = serve_stdio_mcp(server, max_line_bytes=max_frame_bytes)
        unwritten = _UnwrittenAnswers()
        logger = logging.getLogger(_SDK_DISPATCHER)
        logger.addFilter(unwritten)
        try:
            return await _until_stopped(serving)
        finally:
            logger.removeFilter(unwritten)
            if unwritten.count:
                print(
                    f"kigi-stream serve: stdout was not being read; {unwritten.count}"
                    " answers to calls cancelled on the way out were never written",
                    file=sys.stderr,
                )
    return await _until_stopped(serving)


#: The SDK's logger that warns of each answer it could not write on shutdown.
_SDK_DISPATCHER = "mcp.shared.jsonrpc_dispatcher"


class _UnwrittenAnswers(logging.Filter):
    """Counts, and keeps off stderr, the SDK's warnings of shutdown answers it
    gave up writing (the output not being read)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().endswith("gave up: transport write blocked"):
            self.count += 1
            return False
        return True


async def _until_stopped(serving: Coroutine[Any, Any, None]) -> int:
    """Run ``serving`` until it returns or a stop signal comes. A stop signal
    cancels it: every call in flight is cancelled (its command's process group
    stopped) first, over HTTP the connections are closed (bounded), then the
    exit status is 128 + N. Later signals change nothing: the stop is bounded."""
    task = asyncio.current_task()
    assert task is not None

    def on_signal(number: int) -> None:
        if stops.count == 1:
            task.cancel()

    with StopSignals(on_signal, exit_when_blocked="serve", ends_process=True) as stops:
        try:
            async with watching_loop("serve"):
                await serving
        except asyncio.CancelledError:
            if not stops.count:
                raise
            task.uncancel()
    return stops.exit_status()
