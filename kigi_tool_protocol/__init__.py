"""Wire types of the kigi tool protocol, byte-compatible with the Rust crates.

msgspec Structs, a JSON codec whose bytes match serde_json's, a MessagePack codec
with the same surface, frame-size limits and identifier validation. No I/O.
"""

from ._capabilities import (
    HookKind,
    ToolCapabilities,
    ToolScope,
    effective_max_frame_bytes,
    effective_timeout_ms,
)
from ._codec import (
    JsonCodec,
    MsgpackCodec,
    convert,
    decode_message,
    json_codec,
    msgpack_codec,
)
from ._content import (
    ContentBlock,
    ImageBlock,
    McpBlock,
    McpContent,
    McpImageBlock,
    McpResourceBlock,
    McpTextBlock,
    ResourceBlock,
    TextBlock,
)
from ._errors import (
    DecodeError,
    FrameTooLargeError,
    IdentifierError,
    WireError,
)
from ._hooks import (
    HookCancel,
    HookCustom,
    HookEvent,
    HookFrame,
    HookPause,
    HookReplyParams,
    HookResume,
    HookSessionEnded,
)
from ._identifiers import (
    TOOL_ID_PATTERN,
    RequestId,
    SessionId,
    ToolCallId,
    ToolId,
    validate_request_id,
    validate_session_id,
    validate_tool_call_id,
    validate_tool_id,
)
from ._jsonrpc import (
    JSONRPC_VERSION,
    JsonRpcError,
    JsonRpcId,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
)
from ._limits import (
    DEFAULT_MAX_DELTA_BYTES,
    DEFAULT_TIMEOUT_MS,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    MAX_FRAME_BYTES_CEILING,
    U32_MAX,
    U64_MAX,
)
from ._methods import (
    METHOD_HOOK,
    METHOD_HOOK_REPLY,
    METHOD_TOOL_CALL,
    METHOD_TOOL_CALL_PROGRESS,
    METHOD_TOOL_CALL_REQUEST,
    METHOD_TOOL_CANCEL,
    METHOD_TOOLS_LIST,
    METHODS,
)
from ._partial_result import (
    PartialResultPayload,
    StreamingSpec,
)
from ._progress import (
    ContentProgress,
    CustomProgress,
    TextProgress,
    ToolProgress,
)
from ._progress_line import (
    ProgressLine,
    append_progress_line,
    decode_progress_frame,
    decode_progress_line,
    encode_delta_lines,
    encode_progress_line,
)
from ._tool_call import (
    ToolCallParams,
    ToolCallProgressFrame,
    ToolCallResult,
    ToolOutputJson,
    ToolOutputMcp,
    ToolOutputText,
    ToolOutputWire,
    frame_to_progress,
    progress_to_frame,
)
from ._tool_error import (
    ERROR_CODES,
    FALLBACK_ERROR_CODE,
    BehaviorVersionUnsupportedWire,
    CancelledWire,
    ConnectionLostWire,
    CustomErrorWire,
    ExecutionWire,
    ForbiddenWire,
    FrameTooLargeWire,
    InternalErrorWire,
    InvalidParamsWire,
    RenderLimitedWire,
    SessionMismatchWire,
    TerminalErrorWire,
    TimeoutWire,
    ToolErrorWire,
    ToolNotFoundWire,
    UnsupportedProtocolVersionWire,
    error_code,
    error_code_for,
)
from ._version import installed_version as _installed_version

#: The installed distribution's version (from its metadata).
__version__: str


def __getattr__(name: str) -> str:
    # ``__version__`` is read from the distribution's metadata when first asked
    # for, not on import (see ``_version``).
    if name == "__version__":
        value = _installed_version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "DEFAULT_MAX_DELTA_BYTES",
    "DEFAULT_TIMEOUT_MS",
    "ERROR_CODES",
    "FALLBACK_ERROR_CODE",
    "I32_MAX",
    "I32_MIN",
    "I64_MAX",
    "I64_MIN",
    "JSONRPC_VERSION",
    "MAX_FRAME_BYTES_CEILING",
    "METHODS",
    "METHOD_HOOK",
    "METHOD_HOOK_REPLY",
    "METHOD_TOOLS_LIST",
    "METHOD_TOOL_CALL",
    "METHOD_TOOL_CALL_PROGRESS",
    "METHOD_TOOL_CALL_REQUEST",
    "METHOD_TOOL_CANCEL",
    "TOOL_ID_PATTERN",
    "U32_MAX",
    "U64_MAX",
    "BehaviorVersionUnsupportedWire",
    "CancelledWire",
    "ConnectionLostWire",
    "ContentBlock",
    "ContentProgress",
    "CustomErrorWire",
    "CustomProgress",
    "DecodeError",
    "ExecutionWire",
    "ForbiddenWire",
    "FrameTooLargeError",
    "FrameTooLargeWire",
    "HookCancel",
    "HookCustom",
    "HookEvent",
    "HookFrame",
    "HookKind",
    "HookPause",
    "HookReplyParams",
    "HookResume",
    "HookSessionEnded",
    "IdentifierError",
    "ImageBlock",
    "InternalErrorWire",
    "InvalidParamsWire",
    "JsonCodec",
    "JsonRpcError",
    "JsonRpcId",
    "JsonRpcMessage",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "McpBlock",
    "McpContent",
    "McpImageBlock",
    "McpResourceBlock",
    "McpTextBlock",
    "MsgpackCodec",
    "PartialResultPayload",
    "ProgressLine",
    "RenderLimitedWire",
    "RequestId",
    "ResourceBlock",
    "SessionId",
    "SessionMismatchWire",
    "StreamingSpec",
    "TerminalErrorWire",
    "TextBlock",
    "TextProgress",
    "TimeoutWire",
    "ToolCallId",
    "ToolCallParams",
    "ToolCallProgressFrame",
    "ToolCallResult",
    "ToolCapabilities",
    "ToolErrorWire",
    "ToolId",
    "ToolNotFoundWire",
    "ToolOutputJson",
    "ToolOutputMcp",
    "ToolOutputText",
    "ToolOutputWire",
    "ToolProgress",
    "ToolScope",
    "UnsupportedProtocolVersionWire",
    "WireError",
    "append_progress_line",
    "convert",
    "decode_message",
    "decode_progress_frame",
    "decode_progress_line",
    "effective_max_frame_bytes",
    "effective_timeout_ms",
    "encode_delta_lines",
    "encode_progress_line",
    "error_code",
    "error_code_for",
    "frame_to_progress",
    "json_codec",
    "msgpack_codec",
    "progress_to_frame",
    "validate_request_id",
    "validate_session_id",
    "validate_tool_call_id",
    "validate_tool_id",
)
