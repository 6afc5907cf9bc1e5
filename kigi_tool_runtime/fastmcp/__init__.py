"""Add kigi tools to an existing FastMCP server, their output streaming live
exactly as ``kigi-stream serve --mcp`` streams it.

Needs the ``fastmcp`` extra (the standalone ``fastmcp`` package, 4.x):
``pip install 'kigi-tool-runtime[fastmcp]'``. The MCP SDK's own bundled server
(``mcp.server.mcpserver.MCPServer``, formerly ``mcp.server.fastmcp``) builds a
tool only from a function's signature, so it cannot take a tool with a given
input schema; serve kigi tools beside it with ``kigi_tool_runtime.mcp``.

- :func:`add_kigi_tools` adds any kigi tools to a ``FastMCP`` server, which
  keeps its own tools, resources and transports.
- Each call is served by the same call handler as ``serve --mcp``
  (:class:`~kigi_tool_runtime.mcp.McpToolServer`): the same progress
  ``message``, the exact frame under ``_meta``, the same loss markers, the
  same result (model text, loss report), the same cancel.
"""

try:
    import fastmcp as _fastmcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.fastmcp needs the 'fastmcp' extra (FastMCP 4.x):"
        " pip install 'kigi-tool-runtime[fastmcp]'"
    ) from exc

from ._tools import add_kigi_tools

__all__: tuple[str, ...] = ("add_kigi_tools",)
