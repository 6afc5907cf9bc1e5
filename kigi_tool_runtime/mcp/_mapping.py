"""The sans-IO mapping between kigi tools and MCP: tool definitions, progress
frames as ``notifications/progress``, and terminals as ``CallToolResult``.

Invariants:

Rule 1. A call's progress notifications are numbered by :class:`ProgressNumbering`
        in the order they are *sent*: ``progress`` is 1, 2, 3, ... over every
        notification (frames and heartbeats), so it increases strictly whatever
        the frames hold (gap frames, the truncation notice, frames with equal
        ``total_bytes``); a frame's ``seq`` is the one its call's queue took it
        with (``_call/_queue`` Rule 1: 0, 1, 2, ... over frames alone, the one
        number of a frame wherever it goes), so a heartbeat never opens a hole
        in it. Frames dropped before sending take no number; the next frame
        sent carries ``dropped_count`` in its kigi frame (as the stdio
        server's Rule 2).
Rule 2. The kigi frame travels whole under ``_meta[META_FRAME]`` (the
        ``ToolCallProgressFrame`` as the kigi JSON codec writes it) with its
        ``seq`` under ``_meta[META_SEQ]``; ``message`` is what a host shows
        (Rule 5), so a host that ignores ``_meta`` still shows the live output
        and where it lost bytes.
Rule 3. A host folds a progress notification back into exactly the kigi
        ``tool_call_progress`` notification the stdio transport would have
        carried (:func:`notification_from_progress`). A notification without
        kigi ``_meta`` is a note, never output.
Rule 4. Every terminal maps to one ``CallToolResult``: the model-facing text in
        ``content``, the tool's value in ``structuredContent`` when the tool
        declares a result type, ``isError`` with the kigi error code, kind and
        message for a ``ToolError``, and the progress stream's loss summary
        under ``_meta[META_STREAM]``. The text is the call's
        ``CallEnd.text`` (``_call/_outcome``), so its loss line says the
        gaps of the live output and the frames dropped, as every host says them.
        A result whose response line would pass ``MAX_FRAME_BYTES_CEILING``
        (the line limit of every kigi peer) is never sent: the call ends with
        the ``frame_too_large`` error result instead, saying both sizes, as on
        the stdio wire.
Rule 5. A call's ``message`` texts are in the server's message mode
        (``_call/_status``): ``"status"`` (the default, for hosts that show
        the latest message in place of the last: Claude Code, VS Code) says the
        newest complete line, at most 200 characters, after the loss marker
        whenever bytes were lost since the previous notification;
        ``"delta"`` (for hosts that append) says the live text (``LiveText``):
        each frame's delta after a one-line marker where bytes were lost. In
        both, a host that reads only ``message`` sees every loss. A loss known
        only at the end is said by one more notification without a kigi frame
        (:func:`closing_params`).
Rule 6. A heartbeat (``_call/_heartbeat``) is a progress notification without
        a kigi frame: ``_meta[META_HEARTBEAT]`` says the seconds run and
        silent; its ``message`` says them too in status mode, and it has none
        in delta mode (an appending host would add it to the output). A kigi
        host keeps it as a note (Rule 3), never as output.

Nothing here imports the MCP SDK or an event loop: values in, JSON-able dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from kigi_tool_protocol import (
    JsonRpcNotification,
    PartialResultPayload,
    ToolCallProgressFrame,
    ToolCapabilities,
    ToolScope,
    json_codec,
)
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS

from .._call._live import frame_json
from .._call._outcome import CallEnd
from .._call._schema import root_object_schema
from .._tools._errors import ToolError

if TYPE_CHECKING:
    from .._call._heartbeat import Beat
    from .._tools._tool import Tool

__all__ = ("tool_definition",)

#: ``_meta`` key of a progress notification holding the exact kigi frame.
META_FRAME: Final = "dev.kigi/frame"
#: ``_meta`` key of the progress notification that only says, in its
#: ``message``, a loss known at the end of a call (Rule 5).
META_CLOSING: Final = "dev.kigi/closing"
#: ``_meta`` key of a heartbeat progress notification (Rule 6): the seconds the
#: call has run and been silent, ``{"elapsed_s": 372.1, "silent_s": 45.0}``.
META_HEARTBEAT: Final = "dev.kigi/heartbeat"
#: ``_meta`` key of a progress notification holding the frame's per-call ``seq``.
META_SEQ: Final = "dev.kigi/seq"
#: ``_meta`` key of a result holding the progress stream's loss summary.
META_STREAM: Final = "dev.kigi/stream"
#: ``_meta`` key of an error result holding the kigi error (code, kind, wire data).
META_ERROR: Final = "dev.kigi/error"
#: ``_meta`` key of a tool definition holding the kigi ``ToolCapabilities``.
META_CAPABILITIES: Final = "dev.kigi/capabilities"
#: ``_meta`` key of a ``tools/call`` request: the call's deadline in milliseconds,
#: overriding the tool's own (``ToolCapabilities.timeout_ms``).
META_DEADLINE_MS: Final = "dev.kigi/deadline_ms"


def mcp_tool_name(tool_id: str) -> str:
    """The MCP name of a kigi tool: its id with ``:`` spelled ``.`` (MCP names
    allow letters, digits, ``_``, ``-`` and ``.``; a kigi segment never holds a
    ``.``, so the mapping is one to one)."""
    return tool_id.replace(":", ".")


def _annotations(caps: ToolCapabilities) -> dict[str, Any] | None:
    """The MCP tool annotations ``caps`` states: ``readOnlyHint`` from
    ``is_read_only`` or an explicit ``tool_scope``. No kigi field says whether
    a tool is destructive, idempotent or open-world, so those are left out."""
    if caps.is_read_only or caps.tool_scope is ToolScope.READ:
        return {"readOnlyHint": True}
    if caps.tool_scope is ToolScope.WRITE:
        return {"readOnlyHint": False}
    return None


#: The tool annotation saying a tool streams (the partial-results draft's).
STREAMING_HINT: Final = "streamingHint"


def streaming_annotations(caps: ToolCapabilities) -> dict[str, Any]:
    """The annotations a tool with these capabilities is listed with: the
    streaming hint when it streams (``_partial`` Rule 4)."""
    return {STREAMING_HINT: True} if caps.streaming is not None else {}


def tool_definition(tool: Tool[Any]) -> dict[str, Any]:
    """The MCP ``Tool`` (wire spelling) for ``tool``: name from the id,
    description, ``inputSchema`` from ``args_type``, ``outputSchema`` from the
    declared ``result_type`` (if any), annotations where the capabilities map
    (``streamingHint`` for a streaming tool, SEP-2998), and the kigi
    capabilities under ``_meta``.

    Raises:
        ValueError: a schema is not an object at the root.
    """
    definition: dict[str, Any] = {
        "name": mcp_tool_name(tool.id),
        "description": tool.description,
        "inputSchema": root_object_schema(tool.input_schema()),
    }
    output = tool.output_schema()
    if output is not None:
        definition["outputSchema"] = root_object_schema(output)
    annotations = _annotations(tool.capabilities)
    hinted = {**(annotations or {}), **streaming_annotations(tool.capabilities)}
    if hinted:
        definition["annotations"] = hinted
    definition["_meta"] = {META_CAPABILITIES: msgspec.to_builtins(tool.capabilities)}
    return definition


def call_id_for(progress_token: str | int | None, request_id: str | int | None) -> str:
    """The kigi ``tool_call_id`` of an MCP call: its progress token when it has
    one (the host knows it before the first frame), else its request id."""
    key = progress_token if progress_token is not None else request_id
    text = str(key) if key is not None else ""
    return text or "mcp-call"


class ProgressNumbering:
    """Numbers one call's progress notifications (Rule 1): :meth:`frame` counts
    a frame sent with the ``seq`` its queue took it with, :meth:`beat` a
    heartbeat; ``progress`` (:attr:`last_progress` after either) increases
    strictly over both."""

    __slots__ = ("beats", "sent")

    def __init__(self) -> None:
        self.sent = 0  # frames
        self.beats = 0

    def frame(self, seq: int) -> int:
        """Count the frame the call core numbered ``seq``; its ``progress``.

        Raises:
            ValueError: ``seq`` is not the next frame's (0, 1, 2, ...).
        """
        if seq != self.sent:
            raise ValueError(f"frame seq {seq} sent after {self.sent} frames")
        self.sent = seq + 1
        return self.sent + self.beats

    def beat(self) -> int:
        """Count a heartbeat; its ``progress``."""
        self.beats += 1
        return self.sent + self.beats

    @property
    def last_progress(self) -> int:
        """The ``progress`` of the last notification taken (0 before the first)."""
        return self.sent + self.beats


def progress_params(
    progress_token: str | int,
    seq: int,
    frame: ToolCallProgressFrame[Any],
    text: str | None = None,
    progress: int | None = None,
) -> dict[str, Any]:
    """The params of the ``notifications/progress`` carrying ``frame`` as the
    call's ``seq``-th frame (Rules 1, 2); ``text`` is its ``message`` when
    given (Rule 5), else the frame's delta; ``progress`` its number among the
    call's notifications (``seq + 1`` when not given: no heartbeat before it).

    Raises:
        WireError: the frame holds a value JSON cannot carry.
        ValueError: ``seq`` is negative.
    """
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    body = frame.body
    if text is not None and (text or isinstance(body, PartialResultPayload)):
        message: str | None = text
    elif isinstance(body, PartialResultPayload):
        message = body.delta
    elif isinstance(body, Mapping) and isinstance(body.get("text"), str):
        message = body["text"]
    else:
        message = None
    number = seq + 1 if progress is None else progress
    params: dict[str, Any] = {"progressToken": progress_token, "progress": number}
    if message is not None:
        params["message"] = message
    params["_meta"] = {META_FRAME: frame_json(frame), META_SEQ: seq}
    return params


def closing_params(progress_token: str | int, progress: int, text: str) -> dict[str, Any]:
    """The params of the last ``notifications/progress`` of a call whose live
    text ends with a loss said only at the end (bytes never delivered, the
    output truncated; Rule 5): ``message`` is that text, ``progress`` follows
    the last frame's, and no kigi frame rides under ``_meta`` (the loss is in
    the frames already), so a kigi host keeps it as a note.

    Raises:
        ValueError: ``progress`` is below 1.
    """
    if progress < 1:
        raise ValueError(f"progress must be >= 1, got {progress}")
    return {
        "progressToken": progress_token,
        "progress": progress,
        "message": text,
        "_meta": {META_CLOSING: True},
    }


def heartbeat_params(
    progress_token: str | int, progress: int, beat: Beat, message: str | None
) -> dict[str, Any]:
    """The params of a heartbeat ``notifications/progress`` (Rule 6): ``progress``
    its number among the call's notifications, ``message`` what it says
    (``None``: none, in delta mode).

    Raises:
        ValueError: ``progress`` is below 1.
    """
    if progress < 1:
        raise ValueError(f"progress must be >= 1, got {progress}")
    params: dict[str, Any] = {"progressToken": progress_token, "progress": progress}
    if message is not None:
        params["message"] = message
    params["_meta"] = {
        META_HEARTBEAT: {
            "elapsed_s": round(beat.elapsed_s, 3),
            "silent_s": round(beat.silent_s, 3),
        }
    }
    return params


class ProgressNote(NamedTuple):
    """A progress notification that carries no kigi frame: what an ordinary MCP
    server reports (kept as a note, never taken for output)."""

    progress_token: str | int | None
    progress: float | None
    total: float | None
    message: str | None


def notification_from_progress(
    params: Mapping[str, Any],
) -> JsonRpcNotification[Any] | ProgressNote:
    """The kigi ``tool_call_progress`` notification a progress notification
    carries under ``_meta`` (Rule 3), for a ``Reassembler`` to absorb; or a
    :class:`ProgressNote` when it carries none.

    The frame is not decoded here: the reassembler decodes it strictly and
    reports a bad one, as it would a bad stdio line.
    """
    meta = params.get("_meta")
    token = params.get("progressToken")
    if not isinstance(meta, Mapping) or META_FRAME not in meta:
        progress, total = params.get("progress"), params.get("total")
        message = params.get("message")
        return ProgressNote(
            token if isinstance(token, str | int) and not isinstance(token, bool) else None,
            _number(progress),
            _number(total),
            message if isinstance(message, str) else None,
        )
    seq = meta.get(META_SEQ)
    if not (isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0):
        seq = None
    return JsonRpcNotification(method=METHOD_TOOL_CALL_PROGRESS, seq=seq, params=meta[META_FRAME])


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class StreamSummary(NamedTuple):
    """What a call's progress stream sent and dropped, for the result's ``_meta``:
    frames sent, frames dropped because the host read too slowly, whether the
    host asked for progress at all, and heartbeats sent (the last ``progress``
    is frames plus heartbeats)."""

    sent: int
    dropped: int
    requested: bool
    beats: int = 0

    def to_meta(self) -> dict[str, Any]:
        return {
            "progress_requested": self.requested,
            "frames_sent": self.sent,
            "frames_dropped": self.dropped,
            "heartbeats_sent": self.beats,
            "last_progress": self.sent + self.beats,
        }


#: The JSON-RPC response line around a result, without its ``id``:
#: ``{"jsonrpc":"2.0","id":,"result":}`` and the newline.
RESPONSE_ENVELOPE_BYTES: Final = len(b'{"jsonrpc":"2.0","id":,"result":}\n')


def response_envelope_bytes(request_id: str | int | None) -> int:
    """The bytes of the response line around the result of ``request_id``."""
    return RESPONSE_ENVELOPE_BYTES + len(msgspec.json.encode(request_id))


def result_from_terminal(
    end: CallEnd,
    tool: Tool[Any],
    *,
    requested: bool,
    beats: int = 0,
    envelope_bytes: int = RESPONSE_ENVELOPE_BYTES,
) -> dict[str, Any]:
    """The ``CallToolResult`` (wire spelling) for a call's end (Rule 4):
    ``requested`` whether the host asked for progress, ``beats`` the
    heartbeats sent; ``envelope_bytes`` is the response line around it
    (:func:`response_envelope_bytes`), counted against the ceiling.

    Raises:
        WireError: the value holds something JSON cannot carry.
    """
    summary = StreamSummary(end.frames, end.dropped, requested, beats)
    terminal = end.terminal
    if isinstance(terminal, ToolError):
        return _error_result(end, terminal, tool.id, summary)
    result: dict[str, Any] = {"content": [{"type": "text", "text": end.text}], "isError": False}
    if tool.result_type is not None and terminal.kind == "json":
        result["structuredContent"] = msgspec.to_builtins(terminal.value)
    result["_meta"] = {META_STREAM: summary.to_meta()}
    size = _encoded_bytes(result)
    if size is not None and size + envelope_bytes > MAX_FRAME_BYTES_CEILING:
        too_large = ToolError.frame_too_large(size + envelope_bytes, MAX_FRAME_BYTES_CEILING)
        return _error_result(end.failed(too_large), too_large, tool.id, summary)
    return result


def _encoded_bytes(result: dict[str, Any]) -> int | None:
    """The bytes ``result`` takes as compact JSON, or ``None`` when JSON cannot
    carry it (a lone surrogate): that fails where it is sent, as before."""
    try:
        return len(msgspec.json.encode(result))
    except (msgspec.EncodeError, UnicodeEncodeError, TypeError, ValueError):
        return None


def _error_result(
    end: CallEnd, error: ToolError, tool_id: str, summary: StreamSummary
) -> dict[str, Any]:
    """The ``CallToolResult`` of a failed call: ``isError``, the end's text
    (the kigi error kind and code with its message), and the kigi error under
    ``_meta[META_ERROR]``."""
    error = error.with_tool_id(tool_id)
    wire = error.to_wire()
    return {
        "content": [{"type": "text", "text": end.text}],
        "isError": True,
        "_meta": {
            META_ERROR: {
                "code": error.code,
                "kind": error.kind.value,
                "message": error.message,
                "data": msgspec.json.decode(json_codec.encode(wire)),
            },
            META_STREAM: summary.to_meta(),
        },
    }
