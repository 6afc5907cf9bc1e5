"""Tool call payloads and the progress-to-frame mappings."""

from __future__ import annotations

import msgspec
import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._content import TextBlock
from kigi_tool_protocol._progress import ContentProgress
from kigi_tool_protocol._tool_call import ToolOutputWire, frame_to_progress


def test_text_progress_maps_to_a_text_frame() -> None:
    """Text progress becomes kind "text" with body {"text": ...}."""
    frame = kp.progress_to_frame("call_alpha", kp.TextProgress(text="x"), dropped_count=0)
    assert kp.json_codec.encode(frame) == (
        b'{"tool_call_id":"call_alpha","kind":"text","body":{"text":"x"},"dropped_count":0}'
    )


def test_content_progress_maps_to_a_bare_block_list() -> None:
    """Content progress becomes kind "content" with the block list as the body."""
    progress = ContentProgress(blocks=[TextBlock(text="a")])
    frame = kp.progress_to_frame("c", progress)
    assert kp.json_codec.encode(frame) == (
        b'{"tool_call_id":"c","kind":"content","body":[{"type":"text","text":"a"}]}'
    )


def test_custom_progress_maps_to_its_subkind() -> None:
    """Custom progress becomes kind = subkind and body = payload, unchanged."""
    payload = kp.PartialResultPayload(delta="hello\n", total_bytes=6)
    frame = kp.progress_to_frame(
        "call_alpha", kp.CustomProgress(subkind="bash_output_chunk", payload=payload)
    )
    assert kp.json_codec.encode(frame) == (
        b'{"tool_call_id":"call_alpha","kind":"bash_output_chunk","body":{"delta":"hello\\n",'
        b'"total_bytes":6,"truncated":false,"gap":false}}'
    )


@pytest.mark.parametrize("progress", ["text", {"kind": "text", "text": "x"}, None], ids=repr)
def test_progress_that_is_not_tool_progress_is_a_type_error(progress: object) -> None:
    """Anything but a ToolProgress is refused by name (even under ``python -O``)."""
    with pytest.raises(TypeError, match="progress must be a TextProgress, ContentProgress or"):
        kp.progress_to_frame("c", progress)  # type: ignore[arg-type]


def test_harness_reads_every_frame_as_custom_progress() -> None:
    """A frame reads back as custom progress with subkind = kind, even a text frame."""
    frame = kp.json_codec.decode(
        b'{"tool_call_id":"c","kind":"text","body":{"text":"x"}}', kp.ToolCallProgressFrame
    )
    assert frame_to_progress(frame) == kp.CustomProgress(subkind="text", payload={"text": "x"})


def test_typed_progress_frame_keeps_the_payload_strict() -> None:
    """ToolCallProgressFrame[PartialResultPayload] decodes the body strictly in one pass."""
    frame_type = kp.ToolCallProgressFrame[kp.PartialResultPayload]
    frame = kp.json_codec.decode(
        b'{"tool_call_id":"c","kind":"k","body":{"delta":"x","total_bytes":1}}', frame_type
    )
    assert frame.body == kp.PartialResultPayload(delta="x", total_bytes=1)
    with pytest.raises(kp.DecodeError, match="unknown field `v`"):
        kp.json_codec.decode(
            b'{"tool_call_id":"c","kind":"k","body":{"delta":"x","total_bytes":1,"v":2}}',
            frame_type,
        )


@pytest.mark.parametrize(
    ("count", "reason"),
    [("-1", "Expected `int` >= 0"), ("4294967296", "Expected `int` <= 4294967295")],
)
def test_dropped_count_is_a_u32(count: str, reason: str) -> None:
    """dropped_count is a u32."""
    frame = '{"tool_call_id":"c","kind":"k","body":1,"dropped_count":' + count + "}"
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.ToolCallProgressFrame)
    assert (info.value.reason, info.value.path) == (reason, "$.dropped_count")


@pytest.mark.parametrize(
    ("frame", "reason", "path"),
    [
        ('{"kind":"html","value":"x"}', "Invalid value 'html'", "$.kind"),
        ('{"kind":"text"}', "Object missing required field `value`", "$"),
        ('{"value":"x"}', "Object missing required field `kind`", "$"),
        ('{"kind":"text","value":1}', "Expected `str`, got `int`", "$.value"),
        ('{"kind":"mcp","value":{}}', "Object missing required field `blocks`", "$.value"),
    ],
    ids=["unknown-kind", "missing-value", "missing-kind", "text-not-str", "mcp-no-blocks"],
)
def test_bad_tool_output_is_rejected(frame: str, reason: str, path: str) -> None:
    """ToolOutputWire needs a known kind and the value that kind takes."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, ToolOutputWire)
    assert (info.value.reason, info.value.path) == (reason, path)


def test_result_lists_are_omitted_when_empty() -> None:
    """follow_ups and reminders are written only when non-empty; null output extras are dropped."""
    result = kp.json_codec.decode(
        b'{"tool_call_id":"c","output":{"kind":"text","value":"v"},"follow_ups":[],'
        b'"chat_completion_output":null}',
        kp.ToolCallResult,
    )
    assert result.chat_completion_output is None
    assert kp.json_codec.encode(result) == (
        b'{"tool_call_id":"c","output":{"kind":"text","value":"v"}}'
    )
    with pytest.raises(kp.DecodeError, match="Expected `array`, got `null`"):
        kp.json_codec.decode(
            b'{"tool_call_id":"c","output":{"kind":"text","value":"v"},"reminders":null}',
            kp.ToolCallResult,
        )


def test_params_deadline_is_a_u64() -> None:
    """deadline_ms is a u64, checked on decode and on construction."""
    with pytest.raises(kp.DecodeError, match="`deadline_ms` = 18446744073709551616"):
        kp.json_codec.decode(
            b'{"tool_call_id":"c","tool_id":"t","arguments":{},"deadline_ms":18446744073709551616}',
            kp.ToolCallParams,
        )
    with pytest.raises(ValueError, match="outside the u64 range"):
        kp.ToolCallParams(tool_call_id="c", tool_id="t", arguments={}, deadline_ms=-1)


def test_params_decode_arguments_typed() -> None:
    """ToolCallParams[T] decodes the arguments as T, with the error path inside them."""

    class Args(msgspec.Struct, frozen=True):
        command: str

    frame = b'{"tool_call_id":"c","tool_id":"bash","arguments":{"command":1}}'
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.ToolCallParams[Args])
    assert info.value.path == "$.arguments.command"
