"""Give kigi tools to a Google ADK agent, their output streaming live as
partial events, and fold those events back into exact text.

Needs the ``google-adk`` extra (``google-adk`` 2.x):
``pip install 'kigi-tool-runtime[google-adk]'``.

- :class:`KigiAdkTool` (or :func:`adk_tools` for several) makes an ADK tool of
  any kigi ``Tool``: each frame reaches ``Runner.run_async`` as a partial
  ``Event`` with the live text (loss marked) and the exact frame in its
  ``custom_metadata``; the function response has the model text and the
  loss report.
- :class:`AdkEventFolder` folds those events back, per tool call, as the
  stdio client folds a call.
"""

try:
    import google.adk as _adk  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.adk needs the 'google-adk' extra (google-adk 2.x):"
        " pip install 'kigi-tool-runtime[google-adk]'"
    ) from exc

from ._folder import AdkEventFolder
from ._tool import KigiAdkTool, adk_tools

__all__: tuple[str, ...] = (
    "AdkEventFolder",
    "KigiAdkTool",
    "adk_tools",
)
