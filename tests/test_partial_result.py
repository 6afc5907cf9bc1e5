"""``StreamingSpec`` (lenient) and ``PartialResultPayload`` (strict) on the wire."""

from __future__ import annotations

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._limits import U64_MAX


def _payload(fields: str) -> kp.PartialResultPayload:
    return kp.json_codec.decode(b"{" + fields.encode() + b"}", kp.PartialResultPayload)


def test_payload_rejects_an_unknown_field_by_name() -> None:
    """An unknown payload field is a DecodeError that names the field."""
    with pytest.raises(kp.DecodeError) as info:
        _payload('"delta":"x","total_bytes":1,"accumulation":"append"')
    assert info.value.reason == "Object contains unknown field `accumulation`"
    assert info.value.path == "$"


@pytest.mark.parametrize(
    ("fields", "reason", "path"),
    [
        ('"delta":1,"total_bytes":1', "Expected `str`, got `int`", "$.delta"),
        ('"delta":"x","total_bytes":"1"', "Expected `int`, got `str`", "$.total_bytes"),
        ('"delta":"x","total_bytes":true', "Expected `int`, got `bool`", "$.total_bytes"),
        ('"delta":"x","total_bytes":1,"gap":"false"', "Expected `bool`, got `str`", "$.gap"),
        ('"delta":"x","total_bytes":1,"truncated":0', "Expected `bool`, got `int`", "$.truncated"),
        ('"delta":"x","total_bytes":1,"gap":null', "Expected `bool`, got `null`", "$.gap"),
        ('"delta":null,"total_bytes":1', "Expected `str`, got `null`", "$.delta"),
    ],
    ids=[
        "numeric-delta",
        "string-total",
        "bool-total",
        "string-gap",
        "int-flag",
        "null-flag",
        "null-delta",
    ],
)
def test_payload_rejects_wrong_types(fields: str, reason: str, path: str) -> None:
    """Each field takes exactly its JSON type: no coercion, and no null for the flags."""
    with pytest.raises(kp.DecodeError) as info:
        _payload(fields)
    assert (info.value.reason, info.value.path) == (reason, path)


@pytest.mark.parametrize(
    ("total", "reason", "path"),
    [
        ("-1", "Expected `int` >= 0", "$.total_bytes"),
        ("1.0", "Expected `int`, got `float`", "$.total_bytes"),
        ("1e3", "Expected `int`, got `float`", "$.total_bytes"),
        (str(U64_MAX + 1), f"`total_bytes` = {U64_MAX + 1} is outside the u64 range", "$"),
        ("9" * 40, "is outside the u64 range 0..=18446744073709551615", "$"),
    ],
    ids=["negative", "float", "exponent", "u64-max-plus-one", "huge"],
)
def test_payload_rejects_total_bytes_outside_u64(total: str, reason: str, path: str) -> None:
    """total_bytes is a u64: negatives, floats and values past 2**64-1 are rejected."""
    with pytest.raises(kp.DecodeError) as info:
        _payload(f'"delta":"x","total_bytes":{total}')
    assert reason in info.value.reason
    assert info.value.path == path


def test_payload_accepts_u64_max() -> None:
    """2**64-1 is the largest total_bytes, and is written back as an integer literal."""
    payload = _payload(f'"delta":"","total_bytes":{U64_MAX}')
    assert payload.total_bytes == U64_MAX
    assert str(U64_MAX).encode() in kp.json_codec.encode(payload)


def test_payload_u64_range_is_checked_on_construction() -> None:
    """Constructing a payload with total_bytes outside u64 raises ValueError."""
    with pytest.raises(ValueError, match="outside the u64 range"):
        kp.PartialResultPayload(delta="x", total_bytes=U64_MAX + 1)
    with pytest.raises(ValueError, match="outside the u64 range"):
        kp.PartialResultPayload(delta="x", total_bytes=-1)


def test_payload_flags_default_false_and_are_always_written() -> None:
    """Missing flags read as false; all four fields are always written, in order."""
    payload = _payload('"total_bytes":3,"delta":"abc"')
    assert (payload.truncated, payload.gap) == (False, False)
    assert kp.json_codec.encode(payload) == (
        b'{"delta":"abc","total_bytes":3,"truncated":false,"gap":false}'
    )


def test_payload_nested_in_a_frame_reports_the_full_path() -> None:
    """A bad payload inside a typed progress frame names its path from the frame root."""
    frame = b'{"tool_call_id":"c","kind":"k","body":{"delta":"x","total_bytes":-5}}'
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.ToolCallProgressFrame[kp.PartialResultPayload])
    assert info.value.path == "$.body.total_bytes"


def test_spec_is_lenient() -> None:
    """StreamingSpec ignores unknown fields and accepts an empty subkind and a zero cap."""
    spec = kp.json_codec.decode(b'{"subkind":"","max_delta_bytes":0,"x":[1]}', kp.StreamingSpec)
    assert spec == kp.StreamingSpec(subkind="", max_delta_bytes=0)
    assert kp.json_codec.encode(spec) == b'{"subkind":"","max_delta_bytes":0}'


@pytest.mark.parametrize(
    ("cap", "reason"),
    [("4294967296", "Expected `int` <= 4294967295"), ("-1", "Expected `int` >= 0")],
    ids=["past-u32", "negative"],
)
def test_spec_cap_is_a_u32(cap: str, reason: str) -> None:
    """max_delta_bytes is a u32."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(f'{{"subkind":"s","max_delta_bytes":{cap}}}', kp.StreamingSpec)
    assert (info.value.reason, info.value.path) == (reason, "$.max_delta_bytes")


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"subkind": 123}, TypeError, "subkind"),
        ({"subkind": "x", "max_delta_bytes": "8"}, TypeError, "max_delta_bytes"),
        ({"subkind": "x", "max_delta_bytes": True}, TypeError, "max_delta_bytes"),
        ({"subkind": "x", "max_delta_bytes": -1}, ValueError, "max_delta_bytes"),
        ({"subkind": "x", "max_delta_bytes": 2**32}, ValueError, "max_delta_bytes"),
        ({"subkind": 123, "max_delta_bytes": "8"}, TypeError, "subkind"),
    ],
)
def test_streaming_spec_refuses_a_wrong_field_on_construction(
    fields: dict[str, object], error: type[Exception], field: str
) -> None:
    """A spec built in Python with a wrong type or an out-of-range cap is refused,
    naming the field, instead of being encoded as written."""
    with pytest.raises(error, match=f"`{field}`"):
        kp.StreamingSpec(**fields)  # type: ignore[arg-type]


def test_streaming_spec_decode_still_reports_the_json_path() -> None:
    """Decoding a bad spec is still a DecodeError at the field's path, and a good
    one round-trips."""
    spec = kp.StreamingSpec(subkind="x", max_delta_bytes=8)
    assert kp.json_codec.decode(kp.json_codec.encode(spec), kp.StreamingSpec) == spec
    with pytest.raises(kp.DecodeError, match=r"\$\.max_delta_bytes"):
        kp.json_codec.decode(b'{"subkind":"x","max_delta_bytes":"8"}', kp.StreamingSpec)
