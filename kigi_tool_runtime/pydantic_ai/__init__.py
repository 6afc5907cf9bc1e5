"""Serve kigi tools to pydantic-ai agents with their output streaming live as
``kigi.tool_output`` events, and fold those events back into exact text.

Needs the ``pydantic-ai`` extra (``pydantic-ai-slim`` 2.x):
``pip install 'kigi-tool-runtime[pydantic-ai]'``.

- :class:`KigiToolset` serves any set of kigi tools (the shell tool included)
  as a pydantic-ai toolset.
- Each frame a call streams is one :class:`KigiToolOutput` event, delivered to
  ``event_stream_handler``, ``run_stream_events``, ``iter`` and the UI adapters
  (AG-UI ``CUSTOM``, Vercel AI ``data-kigi.tool_output``); one
  :class:`KigiToolOutputEnd` closes the call's output; a silent call emits a
  :class:`KigiToolHeartbeat` each heartbeat interval.
- :class:`ToolOutputFolder` folds those events back, per tool call, as the stdio
  client folds a call.
"""

try:
    import pydantic_ai as _pydantic_ai  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.pydantic_ai needs the 'pydantic-ai' extra (pydantic-ai-slim 2.x):"
        " pip install 'kigi-tool-runtime[pydantic-ai]'"
    ) from exc

from ._events import KigiToolHeartbeat, KigiToolOutput, KigiToolOutputEnd
from ._folder import ToolOutputFolder
from ._toolset import KigiToolset

__all__: tuple[str, ...] = (
    "KigiToolHeartbeat",
    "KigiToolOutput",
    "KigiToolOutputEnd",
    "KigiToolset",
    "ToolOutputFolder",
)
