"""Hook frames and their PascalCase-tagged events."""

from __future__ import annotations

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._hooks import HookEvent, HookFrame, HookPause, HookReplyParams


def test_cancel_constructor_builds_the_cancel_frame() -> None:
    """HookFrame.cancel sets tool_id and call_id and writes no hook_id or trace_context."""
    frame = HookFrame.cancel("sess_abc", "Kigi:read_file", "call_alpha")
    assert kp.json_codec.encode(frame) == (
        b'{"session_id":"sess_abc","tool_id":"Kigi:read_file","call_id":"call_alpha",'
        b'"event":{"type":"Cancel"}}'
    )


@pytest.mark.parametrize("tag", ["cancel", "CANCEL", "session_ended", "custom", "Stop"])
def test_event_tags_are_pascal_case_only(tag: str) -> None:
    """Event tags are exactly Cancel, Pause, Resume, SessionEnded and Custom."""
    with pytest.raises(kp.DecodeError, match=f"Invalid value '{tag}'") as info:
        kp.json_codec.decode(f'{{"session_id":"s","event":{{"type":"{tag}"}}}}', HookFrame)
    assert info.value.path == "$.event.type"


def test_unit_events_ignore_extra_keys() -> None:
    """Extra keys on a unit event are ignored and dropped."""
    event = kp.json_codec.decode(b'{"type":"Pause","why":"x"}', HookEvent)
    assert event == HookPause()
    assert kp.json_codec.encode(event) == b'{"type":"Pause"}'


def test_custom_event_needs_kind_and_payload() -> None:
    """A Custom event requires kind and payload; a null payload is kept."""
    with pytest.raises(kp.DecodeError, match="missing required field `payload`"):
        kp.json_codec.decode(b'{"type":"Custom","kind":"k"}', HookEvent)
    event = kp.json_codec.decode(b'{"type":"Custom","kind":"k","payload":null}', HookEvent)
    assert kp.json_codec.encode(event) == b'{"type":"Custom","kind":"k","payload":null}'


def test_frame_needs_an_event() -> None:
    """A hook frame without an event is rejected."""
    with pytest.raises(kp.DecodeError, match="missing required field `event`"):
        kp.json_codec.decode(b'{"session_id":"s"}', HookFrame)


def test_hook_reply_params() -> None:
    """hook_reply params are session_id, hook_id and a required result, in that order."""
    reply = HookReplyParams(session_id="s", hook_id="h-1", result={"ok": True})
    assert kp.json_codec.encode(reply) == b'{"session_id":"s","hook_id":"h-1","result":{"ok":true}}'
    with pytest.raises(kp.DecodeError, match="missing required field `result`"):
        kp.json_codec.decode(b'{"session_id":"s","hook_id":"h"}', HookReplyParams)
