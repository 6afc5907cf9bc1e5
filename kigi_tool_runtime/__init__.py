"""The kigi tool runtime: stream tool output as capped, UTF-8-complete deltas,
and reassemble it knowing exactly what was lost."""

from ._chunk import Chunk, stream_chunk
from ._emit import OMISSION_MARKER, Excerpt, OutputStream
from ._runner import RunStats, ToolRun, run_tool
from ._shell import SHELL_SPEC, ShellArgs, ShellOutcome, ShellTool
from ._streamer import DeltaStreamer
from ._tail import MIN_TAIL_CAPACITY, TailBuffer, TailStats
from ._tool import Tool, ToolContext, ToolError, ToolErrorKind, ToolEvent, ToolResult

__all__: tuple[str, ...] = (
    "MIN_TAIL_CAPACITY",
    "OMISSION_MARKER",
    "SHELL_SPEC",
    "Chunk",
    "DeltaStreamer",
    "Excerpt",
    "OutputStream",
    "RunStats",
    "ShellArgs",
    "ShellOutcome",
    "ShellTool",
    "TailBuffer",
    "TailStats",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolErrorKind",
    "ToolEvent",
    "ToolResult",
    "ToolRun",
    "run_tool",
    "stream_chunk",
)
