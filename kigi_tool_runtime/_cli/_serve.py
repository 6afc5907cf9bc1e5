"""``kigi-stream serve``: the shell tool, or the tools ``--tools`` names
(``_tools_spec``), over stdin and stdout as JSON-RPC lines until end of input
or a stop signal (then 128 + N), or over MCP or NATS when asked.

Served on stdio (JSON-RPC or MCP), the process is fenced (``_transport/_fence``)
before ``--tools`` is imported: what the tools print, at import, from a thread
or during a call, goes to stderr and never onto the wire."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, Final

from .._call._heartbeat import HEARTBEAT_S
from .._tools._runner import STOP_WAIT_S
from .._tools._shell import ShellTool
from .._tools._tool import Tool
from .._transport._fence import fence_stdio, stdio_wire
from .._transport._rpc_server import SERVED_METHODS
from .._transport._server import Server
from .._transport._stdio import open_stdio
from ._exits import UsageError
from ._loop_watch import watching_loop
from ._nats import serve_nats
from ._parser import SERVE_EXAMPLE
from ._signals import StopSignals
from ._tools_spec import ToolSpecError, load_tools

__all__ = ()

# The hint `serve` prints when a person, not a program, is at its input.
_SERVE_TTY_HINT: Final = (
    "kigi-stream serve: reading JSON-RPC 2.0 requests on stdin, one per line"
    f" (methods: {', '.join(SERVED_METHODS)}); Ctrl-D ends. Try: {SERVE_EXAMPLE}\n"
)


def serve(args: argparse.Namespace) -> int:
    """Serve as ``args`` say; return the exit status.

    Raises:
        UsageError: ``--nats`` with ``--mcp``, ``--stop-wait`` with either, a
            bad ``--mcp-http`` address, the ``mcp`` extra missing, or a
            ``--tools`` spec that names no usable tools.
        NatsUsageError: a ``--nats`` worker cannot start.
    """
    if args.nats and (args.mcp or args.mcp_http is not None):
        raise UsageError("--nats and --mcp serve in two different ways; give one")
    stop_wait = stop_wait_of(args)
    if not args.nats and args.mcp_http is None:
        fence_stdio()  # before the tools' modules run (the fence's Rule 3)
    tools = _tools(args)
    if args.nats:
        return serve_nats(args, tools)
    if args.mcp or args.mcp_http is not None:
        return _serve_mcp(args, tools)
    return serve_tools(
        tools, max_frame_bytes=args.max_frame_bytes, stop_wait=stop_wait, heartbeat_s=args.heartbeat
    )


def stop_wait_of(args: argparse.Namespace) -> float:
    """``--stop-wait``, else the runner's ``STOP_WAIT_S``: seconds a cancelled
    call's tool has to stop when serving JSON-RPC on stdio.

    Raises:
        UsageError: ``--stop-wait`` with ``--nats`` or ``--mcp``, which it
            does not apply to.
    """
    if args.stop_wait is None:
        return STOP_WAIT_S
    if args.nats:
        raise UsageError("--stop-wait applies to JSON-RPC on stdio; --nats has --stop-bound")
    if args.mcp or args.mcp_http is not None:
        raise UsageError("--stop-wait applies to JSON-RPC on stdio, not to --mcp")
    return float(args.stop_wait)


def serve_tools(
    tools: list[Tool[Any]],
    *,
    max_frame_bytes: int,
    stop_wait: float = STOP_WAIT_S,
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """Serve ``tools`` on stdin and stdout as the whole of this process's work,
    until end of input or a stop signal; return the exit status. A tool left
    running because it ignored its cancellation (Server Rule 7) is named on
    stderr, and the process exits at once without waiting for it: the process
    groups held on the lifeline then end with it."""
    return asyncio.run(_serve_stdio(tools, max_frame_bytes, stop_wait, heartbeat_s))


def _tools(args: argparse.Namespace) -> list[Tool[Any]]:
    """The tools to serve: those ``--tools`` names, and the shell tool when
    ``--shell`` asks for it or no ``--tools`` is given."""
    shell = [ShellTool()] if args.shell or not args.tools else []
    try:
        return load_tools(args.tools, shell)
    except ToolSpecError as exc:
        raise UsageError(str(exc)) from None


def _serve_mcp(args: argparse.Namespace, tools: list[Tool[Any]]) -> int:
    try:
        from ._mcp import parse_http_address, run_mcp_serve
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    try:
        address = None if args.mcp_http is None else parse_http_address(args.mcp_http)
    except ValueError as exc:
        raise UsageError(f"--mcp-http: {exc}") from None
    return run_mcp_serve(
        address,
        max_frame_bytes=args.max_frame_bytes,
        tools=tools,
        message_mode=args.mcp_message,
        heartbeat_s=args.heartbeat,
    )


async def _serve_stdio(
    tools: list[Tool[Any]], max_frame_bytes: int, stop_wait: float, heartbeat_s: float
) -> int:
    # A stop signal ends serving as end of input does: every call in flight is
    # cancelled (its command's process group stopped) and answered, the final
    # flush bounded, then 128 + N. A second signal cuts the wait short: the
    # calls are cancelled again, which kills their process groups at once.
    serving = asyncio.current_task()
    assert serving is not None

    def on_signal(number: int) -> None:
        if stops.count <= 2:
            serving.cancel()

    server = Server(
        tools, max_frame_bytes=max_frame_bytes, stop_wait=stop_wait, heartbeat_s=heartbeat_s
    )
    reader, sink = await open_stdio()
    with StopSignals(on_signal, exit_when_blocked="serve", ends_process=True) as stops:
        if os.isatty(stdio_wire().input_fd):
            sys.stderr.write(_SERVE_TTY_HINT)
            sys.stderr.flush()
        try:
            async with watching_loop("serve"):
                await server.serve(reader, sink)
        except asyncio.CancelledError:
            if not stops.count:
                raise
            while serving.uncancel():
                pass
    stats = server.statistics()
    if stats.lines_abandoned:
        sys.stderr.write(
            f"kigi-stream serve: stdout was not being read; {stats.lines_abandoned} lines"
            " (replies and progress frames) were never written\n"
        )
    status = stops.exit_status()
    if stats.calls_abandoned:
        calls = ", ".join(repr(call) for call in stats.calls_abandoned)
        sys.stderr.write(
            f"kigi-stream serve: the tool of call {calls} did not stop within {stop_wait:g} s"
            " of its cancellation; exiting without waiting for it\n"
        )
        sys.stderr.flush()
        # asyncio.run would wait for the tool's task on its way out, for as
        # long as the tool likes: end here instead (Server Rule 7).
        os._exit(status)
    return status
