"""Every name ``kigi_tool_runtime`` exports (``__all__``), imported from its
home module.

The package's ``__init__`` loads this module the first time one of them (or
``__all__``) is asked for, not when the package is imported: importing a
submodule on its own, such as the ``kigi-stream`` entry point, then costs no
more than that submodule. A new public name is imported and listed here.
"""

from ._call._caller import CallLoss, CallProgress, RemoteToolError
from ._call._live import LOSS_MARKER, LiveDelta, LiveText
from ._call._outcome import CallEnd
from ._call._served import ServedCall
from ._consumer._loss import Anomaly, AnomalyKind, Gap, LossReport
from ._consumer._reassembler import Appended, Reassembler
from ._consumer._stream_state import StreamState
from ._harness._history import (
    Message,
    MessageTextBlock,
    ToolResultBlock,
    ToolUseBlock,
    history_is_valid,
    repair_history_after_failure,
)
from ._harness._monitor import (
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
from ._producer._chunk import Chunk, stream_chunk
from ._producer._deltas import DeltaStreamer
from ._producer._output import OutputStream
from ._producer._tail import TailBuffer
from ._tools._author_output import Output
from ._tools._command import CommandResult
from ._tools._errors import ToolError, ToolErrorKind
from ._tools._function import tool
from ._tools._paced import stream_output
from ._tools._runner import run_tool
from ._tools._shell import CommandNotStarted, ShellArgs, ShellOutcome, ShellTool
from ._tools._tool import Tool, ToolContext, ToolEvent, ToolResult
from ._transport._client import Call, Client
from ._transport._file_follow import Follower
from ._transport._server import Server
from ._transport._stdio import serve_stdio

#: The public names of ``kigi_tool_runtime``.
__all__: tuple[str, ...] = (
    "LOSS_MARKER",
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
    "CommandNotStarted",
    "CommandResult",
    "DeltaStreamer",
    "Follower",
    "Gap",
    "GapReported",
    "HarnessEvent",
    "LiveDelta",
    "LiveText",
    "LossReport",
    "Message",
    "MessageTextBlock",
    "Output",
    "OutputAppended",
    "OutputStream",
    "ProgressNoted",
    "Reassembler",
    "RemoteToolError",
    "ServedCall",
    "Server",
    "ShellArgs",
    "ShellOutcome",
    "ShellTool",
    "StreamState",
    "TailBuffer",
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
    "ToolStarted",
    "ToolUseBlock",
    "history_is_valid",
    "repair_history_after_failure",
    "run_tool",
    "serve_stdio",
    "stream_chunk",
    "stream_output",
    "tool",
)
