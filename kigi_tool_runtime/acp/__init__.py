"""Run kigi tools as ACP tool calls from an agent built on the Agent Client
Protocol's Python SDK, their output live in the editor's terminal view.

Needs the ``acp`` extra (``agent-client-protocol``, the ACP Python SDK 0.12):
``pip install 'kigi-tool-runtime[acp]'``.

- :class:`AcpToolCalls` runs calls on an ``AgentSideConnection`` and cancels a
  session's calls from ``session/cancel``; :func:`run_tool_call` runs one.
- The output travels as the client declared in ``clientCapabilities._meta``
  (:class:`LiveOutput`): ``terminal_output_delta`` appends,
  ``terminal_output`` replacements of the retained tail, or plain ``content``
  updates; every loss is marked, and resynchronised where the client replaces.
- :func:`run_agent` serves an agent on stdin and stdout in place of the SDK's
  ``acp.run_agent``: the wire fenced from what tools print, and the agent
  ended, its calls stopped, when its editor goes away.
- The sans-IO mapping under it is ``acp/_mapping.py``'s ``ToolCallMapper``.
"""

try:
    import acp as _acp  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.acp needs the 'acp' extra (agent-client-protocol, the ACP"
        " Python SDK): pip install 'kigi-tool-runtime[acp]'"
    ) from exc

from ._host import AcpToolCalls, is_cancelled, run_tool_call
from ._mapping import LiveOutput, Pacing
from ._stdio import run_agent

__all__: tuple[str, ...] = (
    "AcpToolCalls",
    "LiveOutput",
    "Pacing",
    "is_cancelled",
    "run_agent",
    "run_tool_call",
)
