"""The ``kigi.tool_output`` events and ``ToolOutputFolder``, frame by frame: each
event carries its frame exactly, and folding the events (as pydantic-ai events
or as the JSON a UI adapter forwards) is the stdio client's fold of the frames."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from pydantic import TypeAdapter
from pydantic_ai import CustomEvent
from pydantic_ai_models import kigi_frame

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_runtime import LiveText, Reassembler
from kigi_tool_runtime._transport._client import MAX_CALL_TEXT_BYTES
from kigi_tool_runtime.pydantic_ai import KigiToolOutput, KigiToolOutputEnd, ToolOutputFolder
from kigi_tool_runtime.pydantic_ai._folder import MAX_FOLDED_TEXT_BYTES
from kigi_tool_runtime.testing._consumer_strategies import ProducerRun, producer_runs
from kigi_tool_runtime.testing._frame_strategies import tool_call_frames


def _payload(delta: str, total: int) -> PartialResultPayload:
    return PartialResultPayload(delta=delta, total_bytes=total, truncated=False, gap=False)


@given(frame=tool_call_frames())
@settings(max_examples=200)
def test_an_event_carries_its_frame_byte_exact(frame: ToolCallProgressFrame[Any]) -> None:
    """Any frame (any call id, subkind, dropped_count) decodes back from its
    event to the same bytes the kigi JSON codec writes."""
    event = KigiToolOutput.of(LiveText(frame.tool_call_id).add(frame, 0))
    carried = json.loads(json.dumps(event.to_payload()))["frame"]
    assert json_codec.encode(kigi_frame(carried)) == json_codec.encode(frame)
    assert event.delta == frame.body.delta


@given(run=producer_runs())
@settings(max_examples=150)
def test_folding_the_events_is_the_stdio_clients_fold(run: ProducerRun) -> None:
    """Whatever the source, cap, tail and schedule: the folder's appended()
    events, text and report, from the events or from their forwarded JSON,
    are those of the stdio client's Reassembler fed the same frames."""
    frames = [
        ToolCallProgressFrame(tool_call_id=run.tool_call_id, kind=run.subkind, body=body)
        for body in run.frames
    ]
    live = LiveText(run.tool_call_id)
    events = [KigiToolOutput.of(live.add(frame, seq)) for seq, frame in enumerate(frames)]

    client = Reassembler(known_calls=[run.tool_call_id])
    expected = [client.appended(frame, seq) for seq, frame in enumerate(frames)]

    direct, forwarded = ToolOutputFolder(), ToolOutputFolder()
    assert [direct.absorb(event) for event in events] == expected
    payloads = [json.loads(json.dumps(event.to_payload())) for event in events]
    assert [forwarded.absorb_custom("kigi.tool_output", p) for p in payloads] == expected
    if not frames:
        return
    for folder in (direct, forwarded):
        folded = folder[run.tool_call_id]
        assert folded.text == client.stream(run.tool_call_id, run.subkind).text
        assert folded.report() == client.reports()[0]
        assert folded.frames == len(frames)


def test_the_events_round_trip_through_pydantic_ai_serialization() -> None:
    """pydantic-ai serializes run events (message stores, durable execution):
    both kigi events come back as themselves, and a KigiToolOutput that came
    back folds as the original does."""
    frame = ToolCallProgressFrame(
        tool_call_id="c1", kind="bash_output_chunk", body=_payload("grüße ", 8)
    )
    output = KigiToolOutput.of(LiveText("c1").add(frame, 0))
    end = KigiToolOutputEnd(closing="", ok=True, frames=1, complete=True, loss={"complete": True})
    adapter: TypeAdapter[CustomEvent] = TypeAdapter(CustomEvent)
    for event in (output, end):
        back = adapter.validate_json(adapter.dump_json(event))
        assert type(back) is type(event)
        assert back == event
    folder = ToolOutputFolder()
    appended = folder.absorb(adapter.validate_json(adapter.dump_json(output)))
    assert appended is not None
    assert appended.text == "grüße "
    assert not appended.anomalies


def test_the_folder_keeps_as_much_text_as_the_stdio_client() -> None:
    """``MAX_FOLDED_TEXT_BYTES`` is the stdio client's ``MAX_CALL_TEXT_BYTES``,
    as its comment says."""
    assert MAX_FOLDED_TEXT_BYTES == MAX_CALL_TEXT_BYTES == 64 * 1024 * 1024
