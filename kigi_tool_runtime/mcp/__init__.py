"""Serve kigi tools to MCP hosts with their output streaming live, and fold MCP
progress back into exact text on the host side.

Needs the ``mcp`` extra (the official MCP SDK, 2.x):
``pip install 'kigi-tool-runtime[mcp]'``.

- :class:`McpToolServer` serves any set of tools; :func:`serve_stdio_mcp` and
  :func:`serve_http_mcp` run it (``kigi-stream serve --mcp`` / ``--mcp-http``).
- Each streamed frame is one ``notifications/progress``: ``message`` is the
  newest complete line (``message_mode="status"``, the default, for hosts that
  show the latest message) or the delta (``"delta"``, for hosts that append);
  the exact kigi frame is under ``_meta["dev.kigi/frame"]``. A call silent for
  ``heartbeat_s`` (30 s) gets a heartbeat notification (``_meta["dev.kigi/heartbeat"]``).
- :class:`ProgressFolder` feeds those notifications (from the official client's
  ``message_handler``, or raw) into a ``Reassembler``.
- SEP-2998 partial results (a draft; ``mcp/_partial.py`` names the revision):
  a call that declares them gets its frames as ``notifications/tools/partial_result``;
  :meth:`ProgressFolder.absorb_partial` folds them the same way.
"""

try:
    import mcp as _mcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.mcp needs the 'mcp' extra (the official MCP SDK 2.x):"
        " pip install 'kigi-tool-runtime[mcp]'"
    ) from exc

from ._host import FoldedCall, ProgressFolder
from ._mapping import tool_definition
from ._partial_host import declaring_partial_results
from ._server import McpToolServer
from ._transports import serve_http_mcp, serve_stdio_mcp

__all__: tuple[str, ...] = (
    "FoldedCall",
    "McpToolServer",
    "ProgressFolder",
    "declaring_partial_results",
    "serve_http_mcp",
    "serve_stdio_mcp",
    "tool_definition",
)
