"""Serve kigi tools to MCP hosts with their output streaming live, and fold MCP
progress back into exact text on the host side.

Needs the ``mcp`` extra (the official MCP SDK, 2.x):
``pip install 'kigi-tool-runtime[mcp]'``.

- :class:`McpToolServer` serves any set of tools; :func:`serve_stdio_mcp` and
  :func:`serve_http_mcp` run it (``kigi-stream serve --mcp`` / ``--mcp-http``).
- Each streamed frame is one ``notifications/progress``: ``message`` is the
  delta, the exact kigi frame is under ``_meta["dev.kigi/frame"]``.
- :class:`ProgressFolder` feeds those notifications (from the official client's
  ``message_handler``, or raw) into a ``Reassembler``.
- SEP-2998 partial results (draft, :data:`DRAFT`): a call that declares them
  gets its frames as ``notifications/tools/partial_result``;
  :meth:`ProgressFolder.absorb_partial` folds them the same way.
"""

try:
    import mcp as _mcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.mcp needs the 'mcp' extra (the official MCP SDK 2.x):"
        " pip install 'kigi-tool-runtime[mcp]'"
    ) from exc

from ._hold import RESPONSE_HOLD_S
from ._host import SETTLE_WAIT_S, FoldedCall, ProgressFolder
from ._mapping import (
    META_CAPABILITIES,
    META_CLOSING,
    META_DEADLINE_MS,
    META_ERROR,
    META_FRAME,
    META_SEQ,
    META_STREAM,
    ProgressNote,
    ProgressNumbering,
    StreamSummary,
    closing_params,
    mcp_tool_name,
    notification_from_progress,
    progress_params,
    result_from_terminal,
    tool_definition,
)
from ._partial import (
    DRAFT,
    METHOD_PARTIAL_RESULT,
    PartialNote,
    final_params,
    notification_from_partial,
    partial_params,
    partial_result_token,
)
from ._partial_host import declaring_partial_results, partial_results_extension
from ._queued import OUTBOX_BYTES
from ._server import STALL_S, McpServerStats, McpToolServer
from ._transports import DEFAULT_HTTP_HOST, serve_http_mcp, serve_stdio_mcp, serve_streams_mcp

__all__: tuple[str, ...] = (
    "DEFAULT_HTTP_HOST",
    "DRAFT",
    "META_CAPABILITIES",
    "META_CLOSING",
    "META_DEADLINE_MS",
    "META_ERROR",
    "META_FRAME",
    "META_SEQ",
    "META_STREAM",
    "METHOD_PARTIAL_RESULT",
    "OUTBOX_BYTES",
    "RESPONSE_HOLD_S",
    "SETTLE_WAIT_S",
    "STALL_S",
    "FoldedCall",
    "McpServerStats",
    "McpToolServer",
    "PartialNote",
    "ProgressFolder",
    "ProgressNote",
    "ProgressNumbering",
    "StreamSummary",
    "closing_params",
    "declaring_partial_results",
    "final_params",
    "mcp_tool_name",
    "notification_from_partial",
    "notification_from_progress",
    "partial_params",
    "partial_result_token",
    "partial_results_extension",
    "progress_params",
    "result_from_terminal",
    "serve_http_mcp",
    "serve_stdio_mcp",
    "serve_streams_mcp",
    "tool_definition",
)
