"""Hypothesis strategies for every ``kigi_tool_protocol`` wire type.

For fuzzing anything that consumes the wire: a codec round trip, a harness's
error handling, a tool's argument decoding. Values are built through the
public constructors, so every strategy makes only values the wire can carry:
identifiers that validate, integers in their Rust ranges, JSON values without
NaN, infinities or lone surrogates. The streaming types and frames come from
the kit's own strategies (``streaming_specs``, ``partial_payloads``,
``progress_frames``, ``tool_call_frames``), so each type has one strategy.

::

    @given(wire=wire_values(ToolErrorWire))
    def test_my_harness_reports_every_error(wire): ...
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from hypothesis import strategies as st

import kigi_tool_protocol as kp
from kigi_tool_protocol._capabilities import HookKind
from kigi_tool_protocol._content import (
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
from kigi_tool_protocol._hooks import (
    HookCancel,
    HookCustom,
    HookEvent,
    HookFrame,
    HookPause,
    HookReplyParams,
    HookResume,
    HookSessionEnded,
)
from kigi_tool_protocol._identifiers import TOOL_ID_PATTERN
from kigi_tool_protocol._limits import I32_MAX, I32_MIN, I64_MAX, I64_MIN
from kigi_tool_protocol._methods import METHODS
from kigi_tool_protocol._progress import ContentProgress
from kigi_tool_protocol._tool_call import (
    ToolOutputJson,
    ToolOutputMcp,
    ToolOutputText,
    ToolOutputWire,
)
from kigi_tool_protocol._tool_error import (
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
    ToolNotFoundWire,
    UnsupportedProtocolVersionWire,
)

from ._frame_strategies import progress_frames, tool_call_frames
from ._strategies import U32_MAX, U64_MAX, partial_payloads, streaming_specs

__all__ = ("wire_values",)

#: The longest generated string and the most items in a generated list or
#: object: wire values are about shape, not size, and small values keep a
#: property test over every wire type fast.
MAX_TEXT: Final = 20
MAX_ITEMS: Final = 4

_u32s: Final = st.integers(0, U32_MAX)
_u64s: Final = st.integers(0, U64_MAX)
_texts: Final = st.text(max_size=MAX_TEXT)
_non_empty: Final = st.text(min_size=1, max_size=MAX_TEXT)
_tool_ids: Final = st.from_regex(TOOL_ID_PATTERN, fullmatch=True)


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value, as ``any`` wire fields carry it: null, booleans, i64
    integers, finite floats, strings, and lists and objects of them (nested)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(I64_MIN, I64_MAX)
        | st.floats(allow_nan=False, allow_infinity=False)
        | _texts
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=MAX_ITEMS) | st.dictionaries(_texts, inner, max_size=MAX_ITEMS)
        ),
        max_leaves=8,
    )


_tool_capabilities = st.builds(
    kp.ToolCapabilities,
    streaming=_opt(streaming_specs()),
    supports_cancel=st.booleans(),
    max_concurrency=_opt(_u32s),
    is_read_only=st.booleans(),
    hooks=st.lists(st.sampled_from(HookKind), max_size=6),
    behavior_version=_opt(_texts),
    max_frame_bytes=_opt(_u32s),
    timeout_ms=_opt(_u64s),
    tool_scope=_opt(st.sampled_from(kp.ToolScope)),
)
_content_blocks = st.one_of(
    st.builds(TextBlock, text=_texts),
    st.builds(
        ImageBlock,
        mime_type=_texts,
        data=_texts,
        media_id=_opt(_texts),
        filename=_opt(_texts),
        path=_opt(_texts),
        metadata=st.dictionaries(_texts, _texts, max_size=3),
    ),
    st.builds(ResourceBlock, uri=_texts, mime_type=_opt(_texts), text=_opt(_texts)),
)
_tool_progress = st.one_of(
    st.builds(kp.TextProgress, text=_texts),
    st.builds(ContentProgress, blocks=st.lists(_content_blocks, max_size=3)),
    progress_frames(payloads=json_values(), subkinds=_texts),
)
_mcp_blocks = st.one_of(
    st.builds(McpTextBlock, text=_texts),
    st.builds(McpImageBlock, mime_type=_texts, data=_texts),
    st.builds(McpResourceBlock, uri=_texts, mime_type=_opt(_texts), text=_opt(_texts)),
)
_mcp_contents = st.builds(McpContent, blocks=st.lists(_mcp_blocks, max_size=3))
_tool_outputs = st.one_of(
    st.builds(ToolOutputText, value=_texts),
    st.builds(ToolOutputJson, value=json_values()),
    st.builds(ToolOutputMcp, value=_mcp_contents),
)
_tool_call_params = st.builds(
    kp.ToolCallParams,
    tool_call_id=_non_empty,
    tool_id=_tool_ids,
    arguments=json_values(),
    deadline_ms=_opt(_u64s),
    behavior_version=_opt(_texts),
    cwd=_opt(_texts),
    trace_context=_opt(_texts),
)
_tool_call_results = st.builds(
    kp.ToolCallResult,
    tool_call_id=_non_empty,
    output=_tool_outputs,
    follow_ups=st.lists(json_values(), max_size=2),
    reminders=st.lists(json_values(), max_size=2),
    chat_completion_output=json_values(),
)
_tool_errors = st.one_of(
    st.builds(ToolNotFoundWire, tool_id=_tool_ids),
    st.builds(SessionMismatchWire),
    st.builds(ForbiddenWire, reason=_texts),
    st.builds(ConnectionLostWire, tool_id=_tool_ids),
    st.builds(TimeoutWire, tool_id=_tool_ids, elapsed_ms=_u64s),
    st.builds(CancelledWire, tool_id=_tool_ids),
    st.builds(InvalidParamsWire, message=_texts, details=json_values()),
    st.builds(ExecutionWire, tool_id=_tool_ids, message=_texts),
    st.builds(UnsupportedProtocolVersionWire, supported=st.lists(_texts, max_size=3)),
    st.builds(FrameTooLargeWire, bytes=_u64s, limit=_u64s),
    st.builds(BehaviorVersionUnsupportedWire, tool_id=_tool_ids, requested=_texts),
    st.builds(RenderLimitedWire, tool_id=_tool_ids, card_id=_opt(_texts), reason=_texts),
    st.builds(TerminalErrorWire, tool_id=_tool_ids, message=_texts),
    st.builds(InternalErrorWire, request_id=_opt(_non_empty), detail=_opt(_texts)),
    st.builds(CustomErrorWire, subcode=_texts, message=_texts, details=json_values()),
)
_hook_events = st.one_of(
    st.builds(HookCancel),
    st.builds(HookPause),
    st.builds(HookResume),
    st.builds(HookSessionEnded),
    st.builds(HookCustom, kind=_texts, payload=json_values()),
)
_hook_frames = st.builds(
    HookFrame,
    session_id=_non_empty,
    tool_id=_opt(_tool_ids),
    call_id=_opt(_non_empty),
    hook_id=_opt(_texts),
    event=_hook_events,
    trace_context=_opt(_texts),
)
_hook_replies = st.builds(
    HookReplyParams, session_id=_non_empty, hook_id=_texts, result=json_values()
)
_jsonrpc_ids = _texts | st.integers(I64_MIN, I64_MAX)
_jsonrpc_errors = st.builds(
    kp.JsonRpcError, code=st.integers(I32_MIN, I32_MAX), message=_texts, data=json_values()
)
_methods = st.sampled_from(METHODS) | _texts
_requests = st.builds(
    kp.JsonRpcRequest,
    id=_jsonrpc_ids,
    session_id=_opt(_non_empty),
    method=_methods,
    params=json_values(),
)
_notifications = st.builds(
    kp.JsonRpcNotification,
    session_id=_opt(_non_empty),
    seq=_opt(_u64s),
    method=_methods,
    params=json_values(),
)
_responses = st.one_of(
    st.builds(
        kp.JsonRpcResponse,
        id=_jsonrpc_ids,
        session_id=_opt(_non_empty),
        # A response with a ``null`` result reads as one without: not a value.
        result=json_values().filter(lambda value: value is not None),
    ),
    st.builds(
        kp.JsonRpcResponse, id=_jsonrpc_ids, session_id=_opt(_non_empty), error=_jsonrpc_errors
    ),
)

#: Every wire type by name: ``(the type to decode as, a strategy for its values)``.
#: The type is what ``json_codec.decode(data, type)`` takes (a union for the
#: tagged unions: ``ToolErrorWire``, ``ToolProgress``, ``HookEvent``, ...).
WIRE_STRATEGIES: Final[Mapping[str, tuple[Any, st.SearchStrategy[Any]]]] = MappingProxyType(
    {
        "StreamingSpec": (kp.StreamingSpec, streaming_specs()),
        "ToolCapabilities": (kp.ToolCapabilities, _tool_capabilities),
        "HookKind": (HookKind, st.sampled_from(HookKind)),
        "ToolScope": (kp.ToolScope, st.sampled_from(kp.ToolScope)),
        "PartialResultPayload": (kp.PartialResultPayload, partial_payloads()),
        "ContentBlock": (ContentBlock, _content_blocks),
        "ToolProgress": (kp.ToolProgress, _tool_progress),
        "McpBlock": (McpBlock, _mcp_blocks),
        "McpContent": (McpContent, _mcp_contents),
        "ToolOutputWire": (ToolOutputWire, _tool_outputs),
        "ToolCallParams": (kp.ToolCallParams, _tool_call_params),
        "ToolCallResult": (kp.ToolCallResult, _tool_call_results),
        "ToolCallProgressFrame": (
            kp.ToolCallProgressFrame,
            tool_call_frames(bodies=json_values(), tool_call_ids=_non_empty, subkinds=_texts),
        ),
        "ToolErrorWire": (kp.ToolErrorWire, _tool_errors),
        "HookEvent": (HookEvent, _hook_events),
        "HookFrame": (HookFrame, _hook_frames),
        "HookReplyParams": (HookReplyParams, _hook_replies),
        "JsonRpcError": (kp.JsonRpcError, _jsonrpc_errors),
        "JsonRpcRequest": (kp.JsonRpcRequest, _requests),
        "JsonRpcNotification": (kp.JsonRpcNotification, _notifications),
        "JsonRpcResponse": (kp.JsonRpcResponse, _responses),
    }
)


def wire_values(wire_type: Any) -> st.SearchStrategy[Any]:
    """Values of one wire type (a class such as ``ToolCallParams``, or a union
    such as ``ToolErrorWire``, as in :data:`WIRE_STRATEGIES`); every variant of a
    union is drawn.

    Raises:
        ValueError: ``wire_type`` is not a wire type (the message lists them).
    """
    for known, strategy in WIRE_STRATEGIES.values():
        if known == wire_type:
            return strategy
    raise ValueError(f"{wire_type!r} is not a wire type; known: {', '.join(WIRE_STRATEGIES)}")
