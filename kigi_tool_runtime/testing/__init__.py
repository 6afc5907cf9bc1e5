"""Testing helpers for the kigi tool runtime (imports Hypothesis).

Hypothesis strategies for byte sources, write/tick schedules, caps, frame logs
and every wire type (``wire_values(ToolErrorWire)``); ``check_stream`` to
judge a frame sequence against its source; ``collect`` to run a tool in a
test; and ``fuzz_streaming_tool`` to do all of it in one call.
The runtime itself never imports this package.
"""

try:
    import hypothesis as _hypothesis  # noqa: F401 (only whether it imports)
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "kigi_tool_runtime.testing needs Hypothesis, which comes with the `testing` extra:"
        " pip install 'kigi-tool-runtime[testing]' (or -e '.[testing]' in a clone)"
    ) from _missing

from ._check import CheckedStream, StreamCheckError, check_stream
from ._collect import Collected, ToolHangError, collect, collect_async
from ._consumer_strategies import damaged_frame_logs, frame_logs
from ._fuzz import fuzz_streaming_tool, python_writer_argv
from ._strategies import byte_sources, caps, schedules, utf8_text_sources
from ._wire_strategies import wire_values

__all__ = (
    "CheckedStream",
    "Collected",
    "StreamCheckError",
    "ToolHangError",
    "byte_sources",
    "caps",
    "check_stream",
    "collect",
    "collect_async",
    "damaged_frame_logs",
    "frame_logs",
    "fuzz_streaming_tool",
    "python_writer_argv",
    "schedules",
    "utf8_text_sources",
    "wire_values",
)
