"""Any kigi tool as a LangChain tool that streams live on LangGraph's ``tools``
channel, and the fold that turns those events back into exact text with its
loss said.

Needs the ``langchain`` extra (``langchain-core`` and ``langgraph``):
``pip install 'kigi-tool-runtime[langchain]'``.

- :func:`as_langchain_tool` makes a ``BaseTool`` of any kigi ``Tool``; in a
  ``ToolNode`` each frame goes out through ``ToolRuntime.emit_output_delta`` as
  a :class:`LiveChunk` (a ``str``), and the ``ToolMessage`` has the model's text
  and an artifact with the value and the loss report.
- :class:`ToolEventFolder` folds ``tools`` events (``stream_mode="tools"``,
  ``astream``, v3 ``ToolCallStream``) into a ``Reassembler`` per ``tool_call_id``.
"""

try:
    import langchain_core as _langchain_core  # noqa: F401
    import langgraph.prebuilt as _langgraph_prebuilt  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.langchain needs the 'langchain' extra (langchain-core and"
        " langgraph): pip install 'kigi-tool-runtime[langchain]'"
    ) from exc

from ._fold import ToolEventFolder
from ._mapping import LiveChunk, is_kigi_artifact
from ._tool import KigiToolError, as_langchain_tool, cancel_running_calls, stop_on_interrupt

__all__: tuple[str, ...] = (
    "KigiToolError",
    "LiveChunk",
    "ToolEventFolder",
    "as_langchain_tool",
    "cancel_running_calls",
    "is_kigi_artifact",
    "stop_on_interrupt",
)
