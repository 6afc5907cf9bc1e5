"""The LangChain mapping without a graph: the fold of ``tools`` events equals the
stdio client's fold of the same frames for any output, and the argument schema
and names follow their rules."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kigi_tool_protocol import (
    StreamingSpec,
    ToolCallProgressFrame,
    encode_progress_line,
    progress_to_frame,
)
from kigi_tool_protocol._progress_line import decode_progress_line
from kigi_tool_runtime import Appended, LiveText, OutputStream, Reassembler, Tool, ToolResult
from kigi_tool_runtime.langchain import LiveChunk, ToolEventFolder
from kigi_tool_runtime.langchain._mapping import args_schema

CALL = "call-1"
_PIECES = st.sampled_from(["a", "\n", "é", "✓", "😀"]).map(lambda c: c.encode())
_STEPS = st.lists(st.one_of(_PIECES, st.binary(min_size=1, max_size=5), st.none()), max_size=60)


def _frames(
    steps: list[bytes | None], cap: int, capacity: int, limit: int | None
) -> list[ToolCallProgressFrame[Any]]:
    spec = StreamingSpec(subkind="echo_chunk", max_delta_bytes=cap)
    stream = OutputStream(spec, capacity=max(capacity, cap, 4), limit=limit)
    frames = []
    for step in steps:
        if step is None:
            frames.extend(progress_to_frame(CALL, p) for p in stream.drain())
        else:
            stream.write(step)
    frames.extend(progress_to_frame(CALL, p) for p in stream.finish())
    return frames


def _delta(chunk: LiveChunk) -> dict[str, Any]:
    return {"event": "tool-output-delta", "tool_call_id": CALL, "delta": chunk}


@settings(max_examples=150, deadline=None)
@given(
    steps=_STEPS,
    cap=st.sampled_from([0, 1, 2, 3, 4, 64]),
    capacity=st.integers(4, 64),
    limit=st.none() | st.integers(1, 40),
)
def test_the_fold_of_tools_events_is_the_stdio_clients_fold(
    steps: list[bytes | None], cap: int, capacity: int, limit: int | None
) -> None:
    frames = _frames(steps, cap, capacity, limit)
    # The stdio client: each frame crosses the wire as a progress line, is
    # decoded strictly and folded by the call's reassembler.
    client = Reassembler(known_calls=[CALL], keep_text=True)
    wire: list[Appended] = []
    for seq, frame in enumerate(frames):
        line = encode_progress_line(CALL, frame.kind, frame.body, seq=seq, newline=False)
        decoded = decode_progress_line(line)
        wire.append(client.appended(decoded.params, decoded.seq))
    # The tool's side: the live text of each frame as a LiveChunk on the
    # tools channel, folded from the events.
    live = LiveText(CALL)
    heard: list[Appended] = []
    folder = ToolEventFolder(on_appended=lambda call, appended: heard.append(appended))
    folder.absorb({"event": "tool-started", "tool_call_id": CALL, "tool_name": "echo"})
    texts = []
    for seq, frame in enumerate(frames):
        chunk = LiveChunk.of(live.add(frame, seq))
        texts.append(str(chunk))
        folder.absorb(_delta(chunk))
    closing = live.finish()
    if closing:
        texts.append(closing)
        folder.absorb(
            {"event": "tool-output-delta", "tool_call_id": CALL, "delta": LiveChunk(closing)}
        )
    folder.absorb({"event": "tool-finished", "tool_call_id": CALL, "output": "done"})
    call = folder.call(CALL)
    assert call is not None
    assert heard == wire
    assert call.kigi == bool(frames)
    assert call.closing == closing
    if not frames:
        assert call.report() is None
        return
    report = call.report()
    assert report == client.reports(ended=True)[0]
    state = client.stream(CALL, "echo_chunk")
    assert state is not None
    assert call.text == state.text
    source = b"".join(step for step in steps if step is not None)
    if report.complete:
        assert "".join(texts) == source.decode("utf-8", "replace")
    else:
        assert call.complete is False


class Leaf(msgspec.Struct):
    name: str


class Node(msgspec.Struct):
    leaf: Leaf
    children: list[Node] = []


class Tree(Tool[Node]):
    id = "fs:tree"
    args_type = Node

    async def run(self, ctx: Any, args: Node) -> ToolResult:  # pragma: no cover
        return ToolResult(value=None)


def test_a_recursive_schema_keeps_the_definition_it_refers_to() -> None:
    schema = args_schema(Tree())
    assert schema["type"] == "object"
    assert "$ref" not in schema
    assert set(schema["$defs"]) == {"Leaf", "Node"}
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


class Scalar(Tool[Any]):
    id = "scalar"
    args_type = Leaf

    def input_schema(self) -> dict[str, Any]:
        return {"type": "string"}

    async def run(self, ctx: Any, args: Any) -> ToolResult:  # pragma: no cover
        return ToolResult(value=None)


def test_a_schema_that_is_no_object_is_refused() -> None:
    with pytest.raises(ValueError, match="must be an object"):
        args_schema(Scalar())
