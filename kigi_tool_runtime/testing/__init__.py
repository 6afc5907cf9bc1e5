"""Testing helpers for the kigi tool runtime (imports Hypothesis).

Hypothesis strategies for byte sources, write/tick schedules, caps, tail sizes,
streaming specs, payloads, frames and frame logs, and for every wire type
(``wire_values(ToolErrorWire)``, ``WIRE_STRATEGIES``, ``json_values()``);
``check_stream`` to judge a frame sequence against its source; ``collect`` to
run a tool in a test; and ``fuzz_streaming_tool`` to do all of it in one call.
The runtime itself never imports this package.
"""

try:
    import hypothesis as _hypothesis  # noqa: F401 (only whether it imports)
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "kigi_tool_runtime.testing needs Hypothesis, which comes with the `testing` extra:"
        " pip install 'kigi-tool-runtime[testing]' (or -e '.[testing]' in a clone)"
    ) from _missing

from ._check import CheckedStream, LostSpan, StreamCheckError, check_stream
from ._collect import HANG_SIGNAL, Collected, ToolHangError, collect, collect_async
from ._consumer_strategies import (
    DAMAGES,
    FrameLog,
    ProducerRun,
    damaged_frame_logs,
    frame_logs,
    producer_runs,
    progress_line,
)
from ._frame_strategies import (
    MALFORMED_PAYLOADS,
    malformed_payloads,
    progress_frames,
    tool_call_frames,
)
from ._fuzz import CALL_DEADLINE_S, WRITER_TICK_S, fuzz_streaming_tool, python_writer_argv
from ._strategies import (
    ScheduleStep,
    byte_sources,
    caps,
    output_limits,
    partial_payloads,
    schedules,
    streaming_specs,
    tail_sizes,
    tiny_caps,
    utf8_text_sources,
)
from ._wire_strategies import WIRE_STRATEGIES, json_values, wire_values

__all__ = (
    "CALL_DEADLINE_S",
    "DAMAGES",
    "HANG_SIGNAL",
    "MALFORMED_PAYLOADS",
    "WIRE_STRATEGIES",
    "WRITER_TICK_S",
    "CheckedStream",
    "Collected",
    "FrameLog",
    "LostSpan",
    "ProducerRun",
    "ScheduleStep",
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
    "json_values",
    "malformed_payloads",
    "output_limits",
    "partial_payloads",
    "producer_runs",
    "progress_frames",
    "progress_line",
    "python_writer_argv",
    "schedules",
    "streaming_specs",
    "tail_sizes",
    "tiny_caps",
    "tool_call_frames",
    "utf8_text_sources",
    "wire_values",
)
