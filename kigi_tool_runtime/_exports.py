"""Every name ``kigi_tool_runtime`` exports (``__all__``), imported from its
home module.

The package's ``__init__`` loads this module the first time one of them (or
``__all__``) is asked for, not when the package is imported: importing a
submodule on its own, such as the ``kigi-stream`` entry point, then costs no
more than that submodule. A new public name is imported and listed here.
"""

from ._call._caller import CallLoss, CallProgress, RemoteToolError
from ._call._live import DROPPED_MARKER, LOSS_MARKER, UNDELIVERED_MARKER, LiveDelta, LiveText
from ._call._outcome import CallEnd, error_text, loss_json, loss_line, model_text
from ._call._served import ServedCall, check_arguments
from ._consumer._history import (
    Message,
    MessageBlock,
    MessageTextBlock,
    ToolResultBlock,
    ToolUseBlock,
    history_is_valid,
    repair_history_after_failure,
)
from ._consumer._loss import (
    DEFAULT_GAP_MARKER,
    MAX_ANOMALIES_KEPT,
    MAX_HELD_BYTES,
    TRUNCATION_MARKER,
    Anomaly,
    AnomalyKind,
    Gap,
    GapMarker,
    LossReport,
    StreamKey,
)
from ._consumer._monitor import (
    AnomalyReported,
    GapReported,
    HarnessEvent,
    OutputAppended,
    ProgressNoted,
    ToolCallMonitor,
    ToolCompleted,
    ToolFailed,
    ToolStarted,
)
from ._consumer._reassembler import (
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_MAX_STREAMS,
    Appended,
    Reassembler,
    Record,
    SeqScope,
)
from ._consumer._stream_state import StreamState
from ._producer._chunk import Chunk, stream_chunk
from ._producer._deltas import DeltaStreamer
from ._producer._output import (
    LIMIT_MARKER,
    OMISSION_MARKER,
    Excerpt,
    OutputStream,
    ProgressLines,
)
from ._producer._tail import MIN_TAIL_CAPACITY, TailBuffer, TailStats
from ._tools._author_output import Output
from ._tools._command import CommandResult
from ._tools._errors import ToolError, ToolErrorKind
from ._tools._function import FunctionTool, tool
from ._tools._paced import stream_output
from ._tools._runner import RunStats, ToolRun, run_tool
from ._tools._shell import SHELL_SPEC, CommandNotStarted, ShellArgs, ShellOutcome, ShellTool
from ._tools._tool import Tool, ToolContext, ToolEvent, ToolResult
from ._transport._client import MAX_CALL_TEXT_BYTES, Call, Client, ClientStats
from ._transport._fence import StdioWire, fence_stdio
from ._transport._file_follow import (
    DEFAULT_POLL_INTERVAL,
    Follower,
    iter_lines,
    read_from,
)
from ._transport._server import Server, ServerStats
from ._transport._stdio import serve_stdio
from ._wire._split import OversizedLine

#: The public names of ``kigi_tool_runtime``.
__all__: tuple[str, ...] = (
    "DEFAULT_GAP_MARKER",
    "DEFAULT_MAX_RECORD_BYTES",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_POLL_INTERVAL",
    "DROPPED_MARKER",
    "LIMIT_MARKER",
    "LOSS_MARKER",
    "MAX_ANOMALIES_KEPT",
    "MAX_CALL_TEXT_BYTES",
    "MAX_HELD_BYTES",
    "MIN_TAIL_CAPACITY",
    "OMISSION_MARKER",
    "SHELL_SPEC",
    "TRUNCATION_MARKER",
    "UNDELIVERED_MARKER",
    "Anomaly",
    "AnomalyKind",
    "AnomalyReported",
    "Appended",
    "Call",
    "CallEnd",
    "CallLoss",
    "CallProgress",
    "Chunk",
    "Client",
    "ClientStats",
    "CommandNotStarted",
    "CommandResult",
    "DeltaStreamer",
    "Excerpt",
    "Follower",
    "FunctionTool",
    "Gap",
    "GapMarker",
    "GapReported",
    "HarnessEvent",
    "LiveDelta",
    "LiveText",
    "LossReport",
    "Message",
    "MessageBlock",
    "MessageTextBlock",
    "Output",
    "OutputAppended",
    "OutputStream",
    "OversizedLine",
    "ProgressLines",
    "ProgressNoted",
    "Reassembler",
    "Record",
    "RemoteToolError",
    "RunStats",
    "SeqScope",
    "ServedCall",
    "Server",
    "ServerStats",
    "ShellArgs",
    "ShellOutcome",
    "ShellTool",
    "StdioWire",
    "StreamKey",
    "StreamState",
    "TailBuffer",
    "TailStats",
    "Tool",
    "ToolCallMonitor",
    "ToolCompleted",
    "ToolContext",
    "ToolError",
    "ToolErrorKind",
    "ToolEvent",
    "ToolFailed",
    "ToolResult",
    "ToolResultBlock",
    "ToolRun",
    "ToolStarted",
    "ToolUseBlock",
    "check_arguments",
    "error_text",
    "fence_stdio",
    "history_is_valid",
    "iter_lines",
    "loss_json",
    "loss_line",
    "model_text",
    "read_from",
    "repair_history_after_failure",
    "run_tool",
    "serve_stdio",
    "stream_chunk",
    "stream_output",
    "tool",
)
