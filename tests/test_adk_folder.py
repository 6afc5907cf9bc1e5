"""The ADK partial events and ``AdkEventFolder``, frame by frame (no runner):
each event carries its frame exactly and its live text, and folding the events
is the stdio client's fold of the frames."""

from __future__ import annotations

import json
from typing import Any

from google.adk.events import Event
from google.genai import types
from hypothesis import given, settings

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_runtime import LiveText, Reassembler, ToolResult
from kigi_tool_runtime._call._outcome import CallEnd
from kigi_tool_runtime._transport._client import MAX_CALL_TEXT_BYTES
from kigi_tool_runtime.adk import AdkEventFolder
from kigi_tool_runtime.adk._folder import MAX_FOLDED_TEXT_BYTES
from kigi_tool_runtime.adk._keys import META_CLOSING, META_FRAME, RESPONSE_KEY
from kigi_tool_runtime.adk._mapping import closing_event, partial_event, response_of
from kigi_tool_runtime.testing._consumer_strategies import ProducerRun, producer_runs
from kigi_tool_runtime.testing._frame_strategies import tool_call_frames


@given(frame=tool_call_frames())
@settings(max_examples=200)
def test_an_event_carries_its_frame_byte_exact(frame: ToolCallProgressFrame[Any]) -> None:
    """Any frame (any call id, subkind, dropped_count) comes back from its
    partial event, through ADK's own JSON, as the bytes the kigi codec writes;
    the event's text is the frame's live text."""
    delta = LiveText(frame.tool_call_id).add(frame, 0)
    event = Event.model_validate_json(partial_event(delta).model_dump_json())
    assert event.partial
    assert event.custom_metadata is not None
    carried = msgspec_frame(event.custom_metadata[META_FRAME])
    assert json_codec.encode(carried) == json_codec.encode(frame)
    assert event.content is not None
    assert event.content.parts is not None
    assert event.content.parts[0].text == delta.text


def msgspec_frame(value: Any) -> ToolCallProgressFrame[Any]:
    raw = json.dumps(value).encode()
    return json_codec.decode(raw, ToolCallProgressFrame[Any])


@given(run=producer_runs())
@settings(max_examples=150)
def test_folding_the_events_is_the_stdio_clients_fold(run: ProducerRun) -> None:
    """Whatever the source, cap, tail and schedule: the folder's appended()
    events, text and report are those of the stdio client's Reassembler fed
    the same frames, and the events' texts, joined, are the output exactly
    when nothing was lost."""
    frames = [
        ToolCallProgressFrame(tool_call_id=run.tool_call_id, kind=run.subkind, body=body)
        for body in run.frames
    ]
    live = LiveText(run.tool_call_id)
    events = [partial_event(live.add(frame, seq)) for seq, frame in enumerate(frames)]
    client = Reassembler(known_calls=[run.tool_call_id])
    expected = [client.appended(frame, seq) for seq, frame in enumerate(frames)]
    folder = AdkEventFolder()
    assert [folder.absorb(event) for event in events] == expected
    if not frames:
        return
    folded = folder[run.tool_call_id]
    text = client.stream(run.tool_call_id, run.subkind).text
    assert folded.text == text
    assert folded.report() == client.reports()[0]
    assert folded.frames == len(frames)
    if client.reports()[0].complete:
        shown = "".join(
            (e.content.parts[0].text or "") for e in events if e.content and e.content.parts
        )
        assert shown == text


def _payload(delta: str, total: int, *, gap: bool = False) -> PartialResultPayload:
    return PartialResultPayload(delta=delta, total_bytes=total, truncated=False, gap=gap)


def test_the_response_and_the_closing_end_the_call() -> None:
    """The function response ends its call (matched by call id) and the
    closing event is kept as the call's closing; other events are left alone."""
    frame = ToolCallProgressFrame(tool_call_id="c1", kind="k", body=_payload("grüße ", 8))
    live = LiveText("c1")
    delta = live.add(frame, 0)
    end = CallEnd.of("c1", "bash", ToolResult(value="ok"), live.report(), frames=1)
    response = response_of(end)
    assert response["result"].startswith("ok")
    assert response[RESPONSE_KEY]["call_id"] == "c1"
    part = types.Part(function_response=types.FunctionResponse(name="bash", response=response))
    folder = AdkEventFolder()
    assert folder.absorb(Event(author="user")) is None
    folder.absorb(partial_event(delta))
    assert not folder["c1"].ended
    closing = closing_event("[... 2 never delivered ...]\n", "c1")
    assert closing.custom_metadata == {META_CLOSING: "c1"}
    folder.absorb(closing)
    folder.absorb(Event(author="agent", content=types.Content(role="user", parts=[part])))
    call = folder["c1"]
    assert call.ended
    assert not call.failed
    assert call.complete
    assert call.closing == "[... 2 never delivered ...]\n"
    assert call.text == "grüße "


def test_a_frame_without_a_call_is_left_alone() -> None:
    """A partial event whose frame names no call is not folded, never raised on."""
    event = Event(partial=True, custom_metadata={META_FRAME: {"body": {}}})
    folder = AdkEventFolder()
    assert folder.absorb(event) is None
    assert folder.calls == {}


def test_the_folder_keeps_as_much_text_as_the_stdio_client() -> None:
    """``MAX_FOLDED_TEXT_BYTES`` is the stdio client's ``MAX_CALL_TEXT_BYTES``."""
    assert MAX_FOLDED_TEXT_BYTES == MAX_CALL_TEXT_BYTES
