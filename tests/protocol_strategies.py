"""Hypothesis strategies for every ``kigi_tool_protocol`` wire type.

Values are built through the public constructors, so every strategy only makes
values the wire can carry: identifiers that validate, integers in their Rust
ranges, JSON values without NaN, infinities or lone surrogates. The streaming
types come from ``kigi_tool_runtime.testing``, so the SDK has one strategy each.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import kigi_tool_protocol as kp
from kigi_tool_protocol._limits import I32_MAX, I32_MIN, I64_MAX, I64_MIN, U32_MAX, U64_MAX
from kigi_tool_runtime.testing import partial_payloads, streaming_specs

__all__ = ("WIRE_STRATEGIES", "json_values")

u32s = st.integers(0, U32_MAX)
u64s = st.integers(0, U64_MAX)
texts = st.text(max_size=20)
non_empty = st.text(min_size=1, max_size=20)
tool_ids = st.from_regex(kp.TOOL_ID_PATTERN, fullmatch=True)


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value: what ``any`` fields carry."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(I64_MIN, I64_MAX)
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
        max_leaves=8,
    )


tool_capabilities = st.builds(
    kp.ToolCapabilities,
    streaming=_opt(streaming_specs()),
    supports_cancel=st.booleans(),
    max_concurrency=_opt(u32s),
    is_read_only=st.booleans(),
    hooks=st.lists(st.sampled_from(kp.HookKind), max_size=6),
    behavior_version=_opt(texts),
    max_frame_bytes=_opt(u32s),
    timeout_ms=_opt(u64s),
    tool_scope=_opt(st.sampled_from(kp.ToolScope)),
)
content_blocks = st.one_of(
    st.builds(kp.TextBlock, text=texts),
    st.builds(
        kp.ImageBlock,
        mime_type=texts,
        data=texts,
        media_id=_opt(texts),
        filename=_opt(texts),
        path=_opt(texts),
        metadata=st.dictionaries(texts, texts, max_size=3),
    ),
    st.builds(kp.ResourceBlock, uri=texts, mime_type=_opt(texts), text=_opt(texts)),
)
tool_progress = st.one_of(
    st.builds(kp.TextProgress, text=texts),
    st.builds(kp.ContentProgress, blocks=st.lists(content_blocks, max_size=3)),
    st.builds(kp.CustomProgress, subkind=texts, payload=json_values()),
)
mcp_blocks = st.one_of(
    st.builds(kp.McpTextBlock, text=texts),
    st.builds(kp.McpImageBlock, mime_type=texts, data=texts),
    st.builds(kp.McpResourceBlock, uri=texts, mime_type=_opt(texts), text=_opt(texts)),
)
tool_outputs = st.one_of(
    st.builds(kp.ToolOutputText, value=texts),
    st.builds(kp.ToolOutputJson, value=json_values()),
    st.builds(
        kp.ToolOutputMcp, value=st.builds(kp.McpContent, blocks=st.lists(mcp_blocks, max_size=3))
    ),
)
tool_call_params = st.builds(
    kp.ToolCallParams,
    tool_call_id=non_empty,
    tool_id=tool_ids,
    arguments=json_values(),
    deadline_ms=_opt(u64s),
    behavior_version=_opt(texts),
    cwd=_opt(texts),
    trace_context=_opt(texts),
)
tool_call_results = st.builds(
    kp.ToolCallResult,
    tool_call_id=non_empty,
    output=tool_outputs,
    follow_ups=st.lists(json_values(), max_size=2),
    reminders=st.lists(json_values(), max_size=2),
    chat_completion_output=json_values(),
)
progress_frames = st.builds(
    kp.ToolCallProgressFrame,
    tool_call_id=non_empty,
    kind=texts,
    body=json_values(),
    dropped_count=_opt(u32s),
)
tool_errors = st.one_of(
    st.builds(kp.ToolNotFoundWire, tool_id=tool_ids),
    st.builds(kp.SessionMismatchWire),
    st.builds(kp.ForbiddenWire, reason=texts),
    st.builds(kp.ConnectionLostWire, tool_id=tool_ids),
    st.builds(kp.TimeoutWire, tool_id=tool_ids, elapsed_ms=u64s),
    st.builds(kp.CancelledWire, tool_id=tool_ids),
    st.builds(kp.InvalidParamsWire, message=texts, details=json_values()),
    st.builds(kp.ExecutionWire, tool_id=tool_ids, message=texts),
    st.builds(kp.UnsupportedProtocolVersionWire, supported=st.lists(texts, max_size=3)),
    st.builds(kp.FrameTooLargeWire, bytes=u64s, limit=u64s),
    st.builds(kp.BehaviorVersionUnsupportedWire, tool_id=tool_ids, requested=texts),
    st.builds(kp.RenderLimitedWire, tool_id=tool_ids, card_id=_opt(texts), reason=texts),
    st.builds(kp.TerminalErrorWire, tool_id=tool_ids, message=texts),
    st.builds(kp.InternalErrorWire, request_id=_opt(non_empty), detail=_opt(texts)),
    st.builds(kp.CustomErrorWire, subcode=texts, message=texts, details=json_values()),
)
hook_events = st.one_of(
    st.builds(kp.HookCancel),
    st.builds(kp.HookPause),
    st.builds(kp.HookResume),
    st.builds(kp.HookSessionEnded),
    st.builds(kp.HookCustom, kind=texts, payload=json_values()),
)
hook_frames = st.builds(
    kp.HookFrame,
    session_id=non_empty,
    tool_id=_opt(tool_ids),
    call_id=_opt(non_empty),
    hook_id=_opt(texts),
    event=hook_events,
    trace_context=_opt(texts),
)
hook_replies = st.builds(
    kp.HookReplyParams, session_id=non_empty, hook_id=texts, result=json_values()
)
jsonrpc_ids = texts | st.integers(I64_MIN, I64_MAX)
jsonrpc_errors = st.builds(
    kp.JsonRpcError,
    code=st.integers(I32_MIN, I32_MAX),
    message=texts,
    data=json_values(),
)
methods = st.sampled_from(kp.METHODS) | texts
requests = st.builds(
    kp.JsonRpcRequest,
    id=jsonrpc_ids,
    session_id=_opt(non_empty),
    method=methods,
    params=json_values(),
)
notifications = st.builds(
    kp.JsonRpcNotification,
    session_id=_opt(non_empty),
    seq=_opt(u64s),
    method=methods,
    params=json_values(),
)
responses = st.one_of(
    st.builds(
        kp.JsonRpcResponse,
        id=jsonrpc_ids,
        session_id=_opt(non_empty),
        result=json_values().filter(lambda value: value is not None),
    ),
    st.builds(kp.JsonRpcResponse, id=jsonrpc_ids, session_id=_opt(non_empty), error=jsonrpc_errors),
)

#: (decode type, strategy) for every wire type, by name.
WIRE_STRATEGIES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "StreamingSpec": (kp.StreamingSpec, streaming_specs()),
    "ToolCapabilities": (kp.ToolCapabilities, tool_capabilities),
    "HookKind": (kp.HookKind, st.sampled_from(kp.HookKind)),
    "ToolScope": (kp.ToolScope, st.sampled_from(kp.ToolScope)),
    "PartialResultPayload": (kp.PartialResultPayload, partial_payloads()),
    "ContentBlock": (kp.ContentBlock, content_blocks),
    "ToolProgress": (kp.ToolProgress, tool_progress),
    "McpBlock": (kp.McpBlock, mcp_blocks),
    "ToolOutputWire": (kp.ToolOutputWire, tool_outputs),
    "ToolCallParams": (kp.ToolCallParams, tool_call_params),
    "ToolCallResult": (kp.ToolCallResult, tool_call_results),
    "ToolCallProgressFrame": (kp.ToolCallProgressFrame, progress_frames),
    "ToolErrorWire": (kp.ToolErrorWire, tool_errors),
    "HookEvent": (kp.HookEvent, hook_events),
    "HookFrame": (kp.HookFrame, hook_frames),
    "HookReplyParams": (kp.HookReplyParams, hook_replies),
    "JsonRpcError": (kp.JsonRpcError, jsonrpc_errors),
    "JsonRpcRequest": (kp.JsonRpcRequest, requests),
    "JsonRpcNotification": (kp.JsonRpcNotification, notifications),
    "JsonRpcResponse": (kp.JsonRpcResponse, responses),
}
