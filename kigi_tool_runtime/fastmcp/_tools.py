"""``add_kigi_tools``: kigi tools on an existing FastMCP server. A thin
adapter: FastMCP owns the server, the session and the transports; each call
is handed to the call handler of a :class:`McpToolServer`, the one
``kigi-stream serve --mcp`` runs.

Invariants:

Rule 1. One handler, one behaviour: a kigi tool's call on a FastMCP server is
        served by ``McpToolServer``'s own ``tools/call`` handler, given the
        request's session, id, ``_meta`` and HTTP request as FastMCP's public
        ``Context`` holds them. Progress ``message`` texts, the exact frame
        under ``_meta``, loss markers, the closing notification, the result's
        model text and loss report, the deadline, the stall rule and the
        cancel (the tool's process group gone before the handler returns) are
        therefore those of ``serve --mcp``, and whatever that handler learns
        (a ``message`` mode, a heartbeat) FastMCP tools learn with it.
Rule 2. A kigi tool is listed under the name, description, input and output
        schemas, annotations and ``_meta`` capabilities that ``serve --mcp``
        lists it with (``tool_definition``); FastMCP does not check the
        arguments, the kigi tool checks them strictly (an ``isError`` result
        naming the field).
Rule 3. The result goes out as the handler made it (FastMCP passes a
        ``CallToolResult`` through unchanged): ``isError`` with the kigi error
        for a failed call, the loss summary under ``_meta``.
Rule 4. A call with no MCP request behind it (``FastMCP.call_tool`` called
        in-process, outside a session) is served without live output: the
        same result, ``progress_requested`` false.

What FastMCP owns is FastMCP's: its transports, so ``serve --mcp-http``'s own
HTTP guard (a per-call bound on messages on their way to a socket, a call
cancelled when its host's stream closes) is not in front of these calls; a
host cancels a call with ``notifications/cancelled``, and a host that stops
reading is met by the stall rule as far as the SDK's sending waits for it.
FastMCP's refusal of an ``MCPError`` (a token in use, too many calls) reaches
the host as an ``isError`` result, as FastMCP reports every tool failure.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import mcp_types as types
from fastmcp import FastMCP
from fastmcp.server.dependencies import get_context
from fastmcp.tools import Tool as FastMCPTool
from fastmcp.tools import ToolResult as FastMCPResult
from mcp.server.context import ServerRequestContext
from pydantic import PrivateAttr

from .._call._served import ServedCall
from .._tools._tool import Tool
from ..mcp._mapping import result_from_terminal, tool_definition
from ..mcp._server import McpToolServer

__all__ = ("add_kigi_tools",)

_call_ids = itertools.count(1)


class KigiFastMCPTool(FastMCPTool):
    """One kigi tool as a FastMCP ``Tool``, served by a :class:`McpToolServer`
    (see the module's rules). Made by :func:`add_kigi_tools`."""

    _served: McpToolServer = PrivateAttr()
    _kigi: Tool[Any] = PrivateAttr()

    @classmethod
    def of(cls, server: McpToolServer, name: str) -> KigiFastMCPTool:
        """The FastMCP tool serving ``server``'s tool ``name`` (its MCP name).

        Raises:
            KeyError: ``server`` has no tool of that name.
        """
        kigi = server.tools[name]
        definition = tool_definition(kigi)
        annotations = definition.get("annotations")
        made = cls(
            name=definition["name"],
            description=definition["description"] or None,
            parameters=definition["inputSchema"],
            output_schema=definition.get("outputSchema"),
            annotations=(
                types.ToolAnnotations.model_validate(annotations)
                if annotations is not None
                else None
            ),
            meta=definition["_meta"],
        )
        made._served = server
        made._kigi = kigi
        return made

    @property
    def kigi_tool(self) -> Tool[Any]:
        """The kigi tool this serves."""
        return self._kigi

    async def run(self, arguments: dict[str, Any]) -> FastMCPResult:
        """Serve one call (Rules 1, 3, 4).

        Raises:
            MCPError: the server refused the call (``serve --mcp``'s refusals:
                a progress token in use, too many calls, shutting down).
        """
        try:
            request = get_context().request_context
        except RuntimeError:
            request = None
        if request is None:
            return FastMCPResult.from_mcp_result(await self._offline(arguments))
        params: dict[str, Any] = {"name": self.name, "arguments": arguments}
        if request.meta is not None:
            params["_meta"] = request.meta
        srctx: ServerRequestContext[Any, Any] = ServerRequestContext(
            session=request.session,
            lifespan_context=request.lifespan_context,
            protocol_version=request.protocol_version,
            method="tools/call",
            params=params,
            request_id=request.request_id,
            request=request.request,
        )
        result = await self._served._call_tool(
            srctx, types.CallToolRequestParams(name=self.name, arguments=arguments)
        )
        return FastMCPResult.from_mcp_result(result)

    async def _offline(self, arguments: dict[str, Any]) -> types.CallToolResult:
        """Rule 4: no session, so no live output; the same result."""
        call = ServedCall(
            self._kigi, arguments, call_id=f"fastmcp-call-{next(_call_ids)}", wants_progress=False
        )
        async with call:
            end = await call.run()
        result = result_from_terminal(end, self._kigi, requested=False)
        return types.CallToolResult.model_validate(result, by_name=False)


def add_kigi_tools(
    mcp: FastMCP[Any], tools: Iterable[Tool[Any]] | McpToolServer
) -> list[KigiFastMCPTool]:
    """Add kigi ``tools`` to the FastMCP server ``mcp`` and return the FastMCP
    tools added (the server keeps its other tools).

    ``tools`` is any kigi tools (class tools, the shell tool, function tools:
    any :class:`~kigi_tool_runtime.Tool`), or an :class:`McpToolServer` already
    made with the options ``serve --mcp`` takes (``outbox_bytes``,
    ``max_calls``, ``stop_wait``, ...), whose tools are then added.

    Raises:
        ValueError: two tools map to one MCP name, or a schema is not an
            object at the root.
    """
    server = tools if isinstance(tools, McpToolServer) else McpToolServer(tools)
    added = [KigiFastMCPTool.of(server, name) for name in server.tools]
    for tool in added:
        mcp.add_tool(tool)
    return added
