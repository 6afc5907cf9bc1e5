"""The sans-IO MCP mapping: tool definitions, frames as progress notifications
(and back), a frame in its call's queue, and results."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    TextProgress,
    ToolCallProgressFrame,
    ToolCapabilities,
    ToolScope,
    encode_progress_line,
    json_codec,
    progress_to_frame,
)
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._tool_error import error_code_for
from kigi_tool_runtime import (
    Reassembler,
    ShellArgs,
    ShellOutcome,
    ShellTool,
    Tool,
    ToolError,
    ToolResult,
)
from kigi_tool_runtime._call._heartbeat import Beat
from kigi_tool_runtime._call._outcome import CallEnd
from kigi_tool_runtime._call._queue import Taken
from kigi_tool_runtime._text import text_bytes
from kigi_tool_runtime.mcp import tool_definition
from kigi_tool_runtime.mcp._mapping import (
    META_ERROR,
    META_FRAME,
    META_HEARTBEAT,
    META_SEQ,
    META_STREAM,
    ProgressNote,
    ProgressNumbering,
    StreamSummary,
    heartbeat_params,
    mcp_tool_name,
    notification_from_progress,
    progress_params,
    response_envelope_bytes,
    result_from_terminal,
    root_object_schema,
)
from kigi_tool_runtime.mcp._queued import frame_size, sent_frame
from kigi_tool_runtime.testing._consumer_strategies import producer_runs
from kigi_tool_runtime.testing._frame_strategies import tool_call_frames
from kigi_tool_runtime.testing._strategies import partial_payloads


def _frames_with_drops(draw: st.DrawFn) -> list[tuple[ToolCallProgressFrame[Any], int | None]]:
    run = draw(producer_runs())
    out = []
    for payload in run.frames:
        drop = draw(st.one_of(st.none(), st.integers(1, 5)))
        frame: ToolCallProgressFrame[Any] = ToolCallProgressFrame(
            tool_call_id=run.tool_call_id, kind=run.subkind, body=payload, dropped_count=drop
        )
        out.append((frame, drop))
    if run.frames and draw(st.booleans()):
        # End as a stream cut at its hard limit does: the empty truncation notice.
        notice = PartialResultPayload(
            delta="", total_bytes=run.frames[-1].total_bytes, truncated=True
        )
        out.append(
            (
                ToolCallProgressFrame(tool_call_id=run.tool_call_id, kind=run.subkind, body=notice),
                None,
            )
        )
    return out


frames_with_drops = st.composite(_frames_with_drops)


@given(frames_with_drops())
def test_progress_strictly_increases_and_folds_like_stdio_lines(
    frames: list[tuple[ToolCallProgressFrame[Any], int | None]],
) -> None:
    """Over a real stream (gap frames, truncation notices, repeated totals, drop
    counts), progress is 1, 2, 3, ...; and folding the notifications gives the
    same reassembler, and the same appended() events, as the stdio lines."""
    numbering = ProgressNumbering()
    via_mcp, via_stdio = Reassembler(), Reassembler()
    last = 0.0
    for seq, (frame, _) in enumerate(frames):  # numbered as the call's queue takes them
        progress = numbering.frame(seq)
        params = progress_params("tok", seq, frame)
        assert params["progress"] == progress
        # What the host receives went through JSON on the wire.
        params = msgspec.json.decode(msgspec.json.encode(params))
        assert params["progress"] > last
        last = params["progress"]
        assert params["message"] == frame.body.delta
        assert params["_meta"][META_SEQ] == seq
        note = notification_from_progress(params)
        assert not isinstance(note, ProgressNote)
        line = encode_progress_line(
            frame.tool_call_id, frame.kind, frame.body, seq=seq, dropped_count=frame.dropped_count
        )
        assert via_mcp.appended(note) == via_stdio.appended(line.rstrip(b"\n"))
    assert numbering.last_progress == len(frames)
    assert via_mcp == via_stdio


@given(tool_call_frames(bodies=st.one_of(partial_payloads(), st.builds(dict, text=st.text()))))
def test_the_frame_round_trips_exactly(frame: ToolCallProgressFrame[Any]) -> None:
    """The frame under _meta is the kigi codec's JSON of the frame: decoding it
    gives the frame back, field for field."""
    params = msgspec.json.decode(msgspec.json.encode(progress_params(7, 3, frame)))
    raw = msgspec.json.encode(params["_meta"][META_FRAME])
    assert raw == json_codec.encode(frame)
    decoded = json_codec.decode(raw, ToolCallProgressFrame[type(frame.body)])  # type: ignore[misc]
    assert decoded == frame


def test_text_progress_message_is_its_text_and_no_body_means_no_message() -> None:
    """Non-delta progress: a text frame's message is its text; a content frame has none."""
    text = progress_to_frame("c", TextProgress(text="step 2"))
    assert progress_params(1, 0, text)["message"] == "step 2"
    other = progress_to_frame("c", CustomProgress(subkind="k", payload=[1, 2]))
    assert "message" not in progress_params(1, 0, other)
    with pytest.raises(ValueError, match="seq"):
        progress_params(1, -1, text)


@pytest.mark.parametrize(
    ("params", "note"),
    [
        (
            {"progressToken": 1, "progress": 5, "total": 10, "message": "half"},
            (1, 5.0, 10.0, "half"),
        ),
        ({"progressToken": "t", "progress": 1.5}, ("t", 1.5, None, None)),
        (
            {"progressToken": True, "progress": True, "_meta": {"other": 1}},
            (None, None, None, None),
        ),
    ],
)
def test_progress_without_a_kigi_frame_is_a_note(
    params: dict[str, Any], note: tuple[Any, ...]
) -> None:
    """Progress from an ordinary MCP server is a note, never output."""
    assert notification_from_progress(params) == ProgressNote(*note)


def test_a_bad_frame_under_meta_is_reported_not_raised() -> None:
    """A kigi _meta frame that is not a frame reaches the reassembler, which
    reports it; a bad seq is ignored rather than trusted."""
    item = notification_from_progress(
        {"progressToken": 1, "progress": 1, "_meta": {META_FRAME: {"kind": 3}, META_SEQ: -1}}
    )
    assert not isinstance(item, ProgressNote)
    assert item.seq is None
    reassembler = Reassembler()
    appended = reassembler.appended(item)
    assert appended.key is None
    assert [a.kind for a in reassembler.anomalies] == ["undecodable"]


# -- a frame in a call's queue ---------------------------------------------------------


def _frame(delta: str, total: int, kind: str = "k") -> ToolCallProgressFrame[Any]:
    return ToolCallProgressFrame(
        tool_call_id="c", kind=kind, body=PartialResultPayload(delta=delta, total_bytes=total)
    )


@given(st.text(max_size=40))
def test_a_delta_frame_counts_its_deltas_utf8_bytes_or_its_memory(delta: str) -> None:
    """A delta counts its UTF-8 bytes (a lone surrogate too: it is the mapping's
    to replace), not its encoded body, or the bytes its text takes in memory
    where that is more; ASCII counts its length exactly."""
    utf8 = len(delta.encode("utf-8", "surrogatepass"))
    assert frame_size(_frame(delta, 0)) == max(utf8, text_bytes(delta))
    assert text_bytes(delta) >= len(delta)
    if delta.isascii():
        assert frame_size(_frame(delta, 0)) == len(delta)


@given(st.text(st.characters(max_codepoint=0x7F), max_size=200), st.sampled_from("😀𝄞"))
def test_one_astral_character_makes_a_delta_count_4_bytes_a_character(
    ascii_text: str, astral: str
) -> None:
    """A binary flood's text: ASCII and replacement characters beside one
    character past U+FFFF takes 4 bytes a character in memory, and counts them,
    though its UTF-8 is far shorter."""
    delta = ascii_text + "\ufffd" * 10 + astral
    assert frame_size(_frame(delta, 0)) >= 4 * len(delta)
    assert len(delta.encode()) < 4 * len(delta)


def test_another_frame_counts_its_encoded_body_and_json_must_carry_it() -> None:
    """A non-delta frame counts its encoded body; one whose kind or body JSON
    cannot carry is refused with the internal_error every server gives."""
    custom = progress_to_frame("c", CustomProgress(subkind="k", payload={"n": [1, 2]}))
    assert frame_size(custom) == len(json_codec.encode(custom.body))
    for bad in (
        _frame("x", 1, kind="k\udc80"),
        progress_to_frame("c", CustomProgress(subkind="k", payload="\udc80")),
    ):
        with pytest.raises(ToolError, match="cannot be sent as JSON") as info:
            frame_size(bad)
        assert info.value.kind == "internal_error"


def test_a_taken_frame_says_the_drops_before_it() -> None:
    """The queue's dropped_count is added to the frame's own; none leaves the
    frame as it is."""
    frame = _frame("a", 1)
    assert sent_frame(Taken(frame, 0, None)) is frame
    assert sent_frame(Taken(frame, 1, 3)).dropped_count == 3
    had = msgspec.structs.replace(frame, dropped_count=2)
    said = sent_frame(Taken(had, 2, 3))
    assert said.dropped_count == 5
    assert said.body == frame.body


# -- tool definitions ------------------------------------------------------------------


def test_shell_tool_definition_has_object_schemas_and_capabilities() -> None:
    """The shell tool lists with its id as name, the ShellArgs schema inlined at
    the root, the ShellOutcome output schema, and its capabilities under _meta."""
    definition = tool_definition(ShellTool())
    assert definition["name"] == "bash"
    schema = definition["inputSchema"]
    assert schema["type"] == "object"
    assert "$ref" not in schema
    assert schema["required"] == ["command"]
    assert schema["additionalProperties"] is False
    output = definition["outputSchema"]
    assert output["type"] == "object"
    assert set(output["required"]) == set(ShellOutcome.__struct_fields__)
    caps = definition["_meta"]["dev.kigi/capabilities"]
    assert caps["streaming"] == {"subkind": "bash_output_chunk", "max_delta_bytes": 16384}
    # Nothing says bash only reads; it streams (SEP-2998's hint).
    assert definition["annotations"] == {"streamingHint": True}


class _Inner(msgspec.Struct):
    n: int


class _Nested(msgspec.Struct):
    inner: _Inner
    again: list[_Nested] = []


class _Reader(Tool[_Nested]):
    id = "Kigi:read_file"
    args_type = _Nested
    capabilities = ToolCapabilities(is_read_only=True)

    async def run(self, ctx: Any, args: _Nested) -> str:
        return "ok"


def test_nested_and_recursive_schemas_keep_their_definitions() -> None:
    """A root that refers to itself keeps its definition; other definitions
    stay; a SEG:SEG id maps to a dotted name; is_read_only is readOnlyHint."""
    definition = tool_definition(_Reader())
    assert definition["name"] == "Kigi.read_file"
    schema = definition["inputSchema"]
    assert schema["type"] == "object"
    assert set(schema["$defs"]) == {"_Inner", "_Nested"}
    assert definition["annotations"] == {"readOnlyHint": True}
    assert "outputSchema" not in definition


@pytest.mark.parametrize(
    ("caps", "hint"),
    [
        (ToolCapabilities(tool_scope=ToolScope.READ), {"readOnlyHint": True}),
        (ToolCapabilities(tool_scope=ToolScope.WRITE), {"readOnlyHint": False}),
    ],
)
def test_tool_scope_maps_to_read_only_hint(caps: ToolCapabilities, hint: dict[str, bool]) -> None:
    """An explicit tool scope says whether the tool only reads."""
    tool = _Reader()
    tool.capabilities = caps
    assert tool_definition(tool)["annotations"] == hint


def test_root_schema_errors() -> None:
    """A reference that does not resolve, and a root that is not an object, are refused."""
    with pytest.raises(ValueError, match="does not resolve"):
        root_object_schema({"$ref": "#/$defs/Missing", "$defs": {}})
    with pytest.raises(ValueError, match="object"):
        root_object_schema({"type": "array"})
    assert mcp_tool_name("a:b") == "a.b"


# -- results ----------------------------------------------------------------------------


def _outcome(**changes: Any) -> ShellOutcome:
    fields: dict[str, Any] = {
        "exit_code": 0,
        "signal": None,
        "timed_out": False,
        "duration_ms": 5,
        "total_bytes": 3,
        "truncated": False,
        "omitted_bytes": 0,
        "output": "hi\n",
    }
    fields.update(changes)
    return ShellOutcome(**fields)


def test_a_shell_result_has_the_excerpt_the_value_and_the_stream_summary() -> None:
    """content is the output excerpt and a status line, structuredContent the
    outcome, _meta the stream summary; dropped frames are said in the text."""
    result = result_from_terminal(
        CallEnd.of("c", "bash", ToolResult(value=_outcome()), None, frames=4),
        ShellTool(),
        requested=True,
    )
    assert result["isError"] is False
    assert result["content"][0]["text"] == "hi\n\n[exit code 0; 3 bytes of output; 5 ms]"
    assert result["structuredContent"] == msgspec.to_builtins(_outcome())
    assert result["_meta"][META_STREAM] == {
        "progress_requested": True,
        "frames_sent": 4,
        "frames_dropped": 0,
        "heartbeats_sent": 0,
        "last_progress": 4,
    }
    lossy = result_from_terminal(
        CallEnd.of(
            "c",
            "bash",
            ToolResult(
                value=_outcome(signal="SIGKILL", exit_code=None, timed_out=True, omitted_bytes=9)
            ),
            None,
            frames=4,
            dropped=2,
        ),
        ShellTool(),
        requested=True,
    )
    text = lossy["content"][0]["text"]
    assert "killed by SIGKILL, timed out" in text
    assert "9 left out above" in text
    assert "2 progress frame(s) were dropped" in text
    assert lossy["_meta"][META_STREAM]["frames_dropped"] == 2


def test_a_tool_without_a_result_type_has_no_structured_content() -> None:
    """Only a declared result type gives structuredContent; other values are JSON text."""
    result = result_from_terminal(
        CallEnd.of("c", "reader", ToolResult(value={"a": 1}), None, frames=0),
        _Reader(),
        requested=False,
    )
    assert "structuredContent" not in result
    assert result["content"][0]["text"] == '{"a":1}'
    text = result_from_terminal(
        CallEnd.of("c", "reader", ToolResult.text("plain"), None, frames=0),
        _Reader(),
        requested=False,
    )
    assert text["content"][0]["text"] == "plain"


def test_a_tool_error_is_an_error_result_with_the_kigi_code() -> None:
    """isError, the kind, code and message in the text, the wire error in _meta."""
    error = ToolError.invalid_params("bad `command`", details={"path": "$.command"})
    result = result_from_terminal(
        CallEnd.of("c", "bash", error, None, frames=0), ShellTool(), requested=False
    )
    assert result["isError"] is True
    code = error_code_for(error.to_wire())
    assert result["content"][0]["text"] == f"invalid_params error ({code}): bad `command`"
    meta = result["_meta"][META_ERROR]
    assert meta["code"] == code
    assert meta["kind"] == "invalid_params"
    assert meta["data"] == msgspec.json.decode(json_codec.encode(error.to_wire()))
    timeout = result_from_terminal(
        CallEnd.of(
            "c", "bash", ToolError("timeout", "too slow", elapsed_ms=5), None, frames=1, dropped=1
        ),
        ShellTool(),
        requested=True,
    )
    assert timeout["_meta"][META_ERROR]["data"]["tool_id"] == "bash"
    assert "dropped" in timeout["content"][0]["text"]


@settings(max_examples=15, deadline=None)
@given(
    st.integers(-200, 200),
    st.one_of(st.integers(0, 2**53), st.text(max_size=40)),
)
def test_a_result_is_sent_only_when_its_line_fits_the_ceiling(
    over: int, request_id: int | str
) -> None:
    """A result whose response line (the envelope with ``request_id`` around
    it) would be ``over`` bytes past the ceiling ends with ``frame_too_large``
    saying its size when ``over > 0``; otherwise it is the result, and its
    line is within the ceiling."""
    envelope = response_envelope_bytes(request_id)

    def end(text: str) -> CallEnd:
        return CallEnd.of("c", "reader", ToolResult.text(text), None, frames=0)

    empty = result_from_terminal(end(""), _Reader(), requested=False, envelope_bytes=envelope)
    size = MAX_FRAME_BYTES_CEILING - len(msgspec.json.encode(empty)) - envelope + over
    result = result_from_terminal(
        end("x" * size), _Reader(), requested=False, envelope_bytes=envelope
    )
    if over > 0:
        assert result["isError"] is True
        error = result["_meta"][META_ERROR]
        assert error["kind"] == "frame_too_large"
        assert error["data"]["bytes"] == MAX_FRAME_BYTES_CEILING + over
        assert error["data"]["limit"] == MAX_FRAME_BYTES_CEILING
    else:
        assert result["isError"] is False
        line = msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "result": result})
        assert len(line) + 1 == MAX_FRAME_BYTES_CEILING + over


def test_shell_args_schema_is_what_the_tool_decodes() -> None:
    """A value valid by the listed schema decodes as the tool's arguments."""
    assert msgspec.convert({"command": ["true"]}, ShellArgs).command == ["true"]


def test_heartbeats_raise_progress_and_leave_the_frames_seq_whole() -> None:
    """A heartbeat takes the next ``progress`` but no ``seq``: frames keep 0, 1,
    2, ... and ``progress`` rises by one over every notification; a heartbeat
    carries no kigi frame, so a kigi host keeps it as a note."""
    numbering = ProgressNumbering()
    frame = _frame("x", 1)
    first = progress_params("t", 0, frame, "x", numbering.frame(0))
    beat = heartbeat_params("t", numbering.beat(), Beat(31.0, 30.5), "running 31 s")
    second = progress_params("t", 1, frame, "x", numbering.frame(1))
    assert [first["progress"], beat["progress"], second["progress"]] == [1, 2, 3]
    assert [first["_meta"][META_SEQ], second["_meta"][META_SEQ]] == [0, 1]
    assert beat == {
        "progressToken": "t",
        "progress": 2,
        "message": "running 31 s",
        "_meta": {META_HEARTBEAT: {"elapsed_s": 31.0, "silent_s": 30.5}},
    }
    assert isinstance(notification_from_progress(beat), ProgressNote)
    silent = heartbeat_params("t", 3, Beat(1.0, 1.0), None)
    assert "message" not in silent
    assert StreamSummary(2, 0, True, 1).to_meta()["last_progress"] == 3
    # The seq is the call core's (its queue's): a frame out of its order is a bug.
    with pytest.raises(ValueError, match="frame seq 5 sent after 2 frames"):
        numbering.frame(5)
    with pytest.raises(ValueError, match="progress must be >= 1"):
        heartbeat_params("t", 0, Beat(1.0, 1.0), None)
