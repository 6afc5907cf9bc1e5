"""The ``kigi.tool_output`` events and ``ToolOutputFolder``, frame by frame: each
event carries its frame exactly, and folding the events (as pydantic-ai events
or as the JSON a UI adapter forwards) is the stdio client's fold of the frames."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from pydantic_ai_models import kigi_frame

from kigi_tool_protocol import ToolCallProgressFrame, json_codec
from kigi_tool_runtime import LiveText, Reassembler
from kigi_tool_runtime.pydantic_ai import KigiToolOutput, ToolOutputFolder
from kigi_tool_runtime.testing import ProducerRun, producer_runs, tool_call_frames


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
