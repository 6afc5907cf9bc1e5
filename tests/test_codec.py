"""The codecs: round trips of every wire type, serde-exact bytes, limits, and bad input."""

from __future__ import annotations

import json
import re
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kigi_tool_protocol as kp
from kigi_tool_protocol._codec import _ID_CACHE_ENTRIES, JsonCodec, MsgpackCodec, convert
from kigi_tool_protocol._errors import FrameTooLargeError
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING, U64_MAX
from kigi_tool_runtime.testing._strategies import partial_payloads
from kigi_tool_runtime.testing._wire_strategies import WIRE_STRATEGIES

CODECS = [pytest.param(kp.json_codec, id="json"), pytest.param(kp.msgpack_codec, id="msgpack")]
PAYLOAD = kp.PartialResultPayload(delta="hello\n", total_bytes=6)
PAYLOAD_JSON = b'{"delta":"hello\\n","total_bytes":6,"truncated":false,"gap":false}'


def _serde_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", sorted(WIRE_STRATEGIES))
@given(data=st.data())
def test_round_trip(codec: JsonCodec | MsgpackCodec, name: str, data: st.DataObject) -> None:
    """Every wire value decodes back to itself, and its encoding is a fixed point."""
    wire_type, strategy = WIRE_STRATEGIES[name]
    value = data.draw(strategy)
    encoded = codec.encode(value)
    decoded = codec.decode(encoded, wire_type)
    assert decoded == value
    assert codec.encode(decoded) == encoded


def test_every_public_wire_class_has_a_round_trip_strategy() -> None:
    """Each public Struct class is a WIRE_STRATEGIES type or a variant of one of
    its unions, so the round trip above covers every wire type."""
    covered: set[Any] = set()
    for wire_type, _ in WIRE_STRATEGIES.values():
        covered |= set(get_args(wire_type)) or {wire_type}
    public = {
        value
        for value in (getattr(kp, name) for name in kp.__all__)
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    }
    assert sorted(cls.__name__ for cls in public - covered) == []


@given(payload=partial_payloads())
def test_json_bytes_match_serde_escaping(payload: kp.PartialResultPayload) -> None:
    """JSON output is compact, in field order, and escaped exactly like serde_json."""
    expected = {
        "delta": payload.delta,
        "total_bytes": payload.total_bytes,
        "truncated": payload.truncated,
        "gap": payload.gap,
    }
    assert kp.json_codec.encode(payload) == _serde_json(expected)


def test_any_subtrees_keep_insertion_order() -> None:
    """An ``any`` value is written as held: object keys in insertion order, not sorted."""
    frame = kp.ToolCallProgressFrame(
        tool_call_id="c", kind="k", body={"z": 1, "a": {"y": 2, "b": 3}}
    )
    encoded = kp.json_codec.encode(frame)
    assert encoded == b'{"tool_call_id":"c","kind":"k","body":{"z":1,"a":{"y":2,"b":3}}}'
    assert list(kp.json_codec.decode(encoded, kp.ToolCallProgressFrame).body) == ["z", "a"]


@pytest.mark.parametrize("codec", CODECS)
def test_decoders_are_built_once(codec: JsonCodec | MsgpackCodec) -> None:
    """One typed decoder per type is built on first use and reused after."""
    first = codec._decoder(kp.ToolProgress)
    codec.decode(codec.encode(kp.TextProgress(text="x")), kp.ToolProgress)
    assert codec._decoder(kp.ToolProgress) is first


def test_identity_cache_is_bounded() -> None:
    """Type objects made afresh per call cannot grow the by-identity cache past its bound."""
    codec = JsonCodec()
    for _ in range(_ID_CACHE_ENTRIES + 10):
        union = kp.TextProgress | kp.CustomProgress  # a new object each time round
        assert codec.decode(b'{"kind":"text","text":"x"}', union) == kp.TextProgress(text="x")
    assert len(codec._by_id) <= _ID_CACHE_ENTRIES
    assert len(codec._decoders) == 1


@pytest.mark.parametrize(
    "frame",
    [PAYLOAD_JSON, bytearray(PAYLOAD_JSON), memoryview(PAYLOAD_JSON), PAYLOAD_JSON.decode()],
    ids=["bytes", "bytearray", "memoryview", "str"],
)
def test_frame_at_the_limit_decodes(frame: Any) -> None:
    """A frame exactly as long as the limit decodes, whatever buffer type holds it."""
    assert (
        kp.json_codec.decode(frame, kp.PartialResultPayload, max_bytes=len(PAYLOAD_JSON)) == PAYLOAD
    )


@pytest.mark.parametrize(
    "frame",
    [PAYLOAD_JSON, bytearray(PAYLOAD_JSON), memoryview(PAYLOAD_JSON), PAYLOAD_JSON.decode()],
    ids=["bytes", "bytearray", "memoryview", "str"],
)
def test_oversized_frame_is_rejected(frame: Any) -> None:
    """A frame one byte over the limit raises FrameTooLargeError naming size and limit."""
    limit = len(PAYLOAD_JSON) - 1
    with pytest.raises(FrameTooLargeError) as info:
        kp.json_codec.decode(frame, kp.PartialResultPayload, max_bytes=limit)
    assert (info.value.size, info.value.limit) == (len(PAYLOAD_JSON), limit)
    assert f"frame of {len(PAYLOAD_JSON)} bytes exceeds the frame limit of {limit} bytes" in str(
        info.value
    )
    assert isinstance(info.value, kp.DecodeError)


def test_oversized_frame_is_not_parsed() -> None:
    """The size check runs first: oversized garbage is too large, not malformed."""
    with pytest.raises(FrameTooLargeError):
        kp.json_codec.decode(b"{" * 65, kp.PartialResultPayload, max_bytes=64)
    with pytest.raises(FrameTooLargeError):
        kp.msgpack_codec.decode(b"\xc1" * 65, kp.PartialResultPayload, max_bytes=64)


def test_str_frames_are_measured_in_utf8_bytes() -> None:
    """A str frame's size is its UTF-8 length, not its character count."""
    frame = '"' + "é" * 10 + '"'  # 12 characters, 22 bytes
    assert kp.json_codec.decode(frame, str, max_bytes=22) == "é" * 10
    with pytest.raises(FrameTooLargeError) as info:
        kp.json_codec.decode(frame, str, max_bytes=21)
    assert info.value.size == 22


def test_default_limit_is_the_ceiling() -> None:
    """Without ``max_bytes`` the limit is MAX_FRAME_BYTES_CEILING."""
    frame = b'"' + b"x" * (MAX_FRAME_BYTES_CEILING - 1) + b'"'
    with pytest.raises(FrameTooLargeError) as info:
        kp.json_codec.decode(frame, str)
    assert info.value.limit == MAX_FRAME_BYTES_CEILING


@pytest.mark.parametrize(
    "frame", [PAYLOAD_JSON[:-1], PAYLOAD_JSON[:10], b"", b'{"delta":"x'], ids=repr
)
def test_truncated_json_is_a_decode_error(frame: bytes) -> None:
    """A frame cut short raises DecodeError saying the input was truncated."""
    with pytest.raises(kp.DecodeError, match="truncated"):
        kp.json_codec.decode(frame, kp.PartialResultPayload)


def test_trailing_garbage_is_a_decode_error() -> None:
    """Bytes after the JSON document make the frame malformed."""
    with pytest.raises(kp.DecodeError, match="malformed"):
        kp.json_codec.decode(PAYLOAD_JSON + b"x", kp.PartialResultPayload)


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82"], ids=repr)
def test_invalid_utf8_in_a_frame_is_a_decode_error(bad: bytes) -> None:
    """Invalid UTF-8 inside a string is rejected as a DecodeError, never replaced."""
    frame = b'{"delta":"a' + bad + b'b","total_bytes":1}'
    with pytest.raises(kp.DecodeError, match="UTF-8"):
        kp.json_codec.decode(frame, kp.PartialResultPayload)


@pytest.mark.parametrize(
    "escape",
    [b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\ud800x"],
    ids=["high-at-end", "lone-low", "high-then-bmp", "high-then-char"],
)
def test_unpaired_surrogate_escape_is_rejected(escape: bytes) -> None:
    """An unpaired surrogate escape cannot become a str: DecodeError."""
    frame = b'{"delta":"' + escape + b'","total_bytes":1}'
    with pytest.raises(kp.DecodeError):
        kp.json_codec.decode(frame, kp.PartialResultPayload)


def test_str_frame_with_a_lone_surrogate_is_a_decode_error() -> None:
    """A str frame that cannot be UTF-8 (a lone surrogate) is a DecodeError, not UnicodeError."""
    with pytest.raises(kp.DecodeError, match="not valid Unicode text: surrogates not allowed"):
        kp.json_codec.decode('{"delta":"\ud800","total_bytes":1}', kp.PartialResultPayload)
    with pytest.raises(kp.DecodeError, match="not valid Unicode text"):
        kp.decode_message('{"jsonrpc":"2.0","method":"\udfff","params":1}')


def test_raw_control_character_in_a_string_is_rejected() -> None:
    """A raw control character inside a JSON string is malformed JSON."""
    with pytest.raises(kp.DecodeError, match="invalid character"):
        kp.json_codec.decode(b'{"delta":"a\nb","total_bytes":1}', kp.PartialResultPayload)


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_deep_nesting_is_a_decode_error(depth: int) -> None:
    """JSON nested thousands deep raises DecodeError, not RecursionError."""
    nested = b"[" * depth + b"]" * depth
    with pytest.raises(kp.DecodeError, match="nested too deeply") as info:
        kp.json_codec.decode(nested)
    assert isinstance(info.value.__cause__, RecursionError)
    frame = b'{"tool_call_id":"c","kind":"k","body":' + nested + b"}"
    with pytest.raises(kp.DecodeError, match="nested too deeply"):
        kp.json_codec.decode(frame, kp.ToolCallProgressFrame)
    with pytest.raises(kp.DecodeError, match="nested too deeply"):
        kp.msgpack_codec.decode(b"\x91" * depth + b"\xc0")


def _deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_deeply_nested_value_cannot_be_encoded() -> None:
    """Encoding a value nested past the recursion limit raises WireError."""
    with pytest.raises(kp.WireError, match="cannot encode list"):
        kp.json_codec.encode(_deep_list(100_000))


def test_decode_errors_are_translated_with_a_path() -> None:
    """msgspec errors surface as DecodeError with the JSON path, chained from the original."""
    frame = (
        b'{"jsonrpc":"2.0","method":"tool_call_progress","params":{"tool_call_id":"c",'
        b'"kind":"bash_output_chunk","body":{"delta":"x","total_bytes":"1"}}}'
    )
    wire_type = kp.JsonRpcNotification[kp.ToolCallProgressFrame[kp.PartialResultPayload]]
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, wire_type)
    assert info.value.path == "$.params.body.total_bytes"
    assert info.value.reason == "Expected `int`, got `str`"
    assert str(info.value) == "Expected `int`, got `str` at `$.params.body.total_bytes`"
    assert isinstance(info.value.__cause__, msgspec.ValidationError)
    assert not isinstance(info.value, msgspec.MsgspecError)


def test_whole_document_errors_have_the_root_path() -> None:
    """An error about the document itself has path ``$`` and no location suffix."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(b"[]", kp.PartialResultPayload)
    assert info.value.path == "$"
    assert str(info.value) == "Expected `object`, got `array`"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [None, 7, [1]], ids=repr)
def test_input_that_is_not_bytes_like_is_a_type_error(
    codec: JsonCodec | MsgpackCodec, data: Any
) -> None:
    """decode and decode_message name what they take when handed a non-buffer."""
    expected = f"data must be bytes, bytearray, memoryview or str, not {type(data).__name__}"
    with pytest.raises(TypeError, match=re.escape(expected)):
        codec.decode(data, kp.PartialResultPayload)
    with pytest.raises(TypeError, match=re.escape(expected)):
        codec.decode_message(data)


def test_msgpack_rejects_str_input() -> None:
    """MessagePack input must be bytes; a str is a DecodeError."""
    with pytest.raises(kp.DecodeError, match="MessagePack input must be bytes"):
        kp.msgpack_codec.decode("abc", kp.PartialResultPayload)


def test_msgpack_applies_the_same_validation() -> None:
    """The MessagePack codec enforces the same types, ranges and strictness as JSON."""
    bad = msgspec.msgpack.encode({"delta": "x", "total_bytes": 1, "extra": 1})
    with pytest.raises(kp.DecodeError, match="unknown field `extra`"):
        kp.msgpack_codec.decode(bad, kp.PartialResultPayload)
    with pytest.raises(kp.DecodeError, match="truncated"):
        kp.msgpack_codec.decode(kp.msgpack_codec.encode(PAYLOAD)[:-1], kp.PartialResultPayload)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("value", "reason"),
    [(object(), "cannot encode object"), ("\ud800", "cannot encode str")],
    ids=["unsupported-type", "lone-surrogate"],
)
def test_unencodable_values_raise_wire_error(
    codec: JsonCodec | MsgpackCodec, value: Any, reason: str
) -> None:
    """A value the format cannot carry raises WireError, not a msgspec or builtin error."""
    with pytest.raises(kp.WireError, match=reason):
        codec.encode(value)


def test_msgpack_cannot_encode_past_u64() -> None:
    """An integer past u64 in an ``any`` field cannot be MessagePack-encoded: WireError."""
    with pytest.raises(kp.WireError, match="cannot encode CustomProgress"):
        kp.msgpack_codec.encode(kp.CustomProgress(subkind="s", payload=U64_MAX + 1))


def test_convert_validates_like_decoding() -> None:
    """convert() checks an already-decoded value as strictly as decoding bytes."""
    body = {"delta": "x", "total_bytes": 1}
    assert convert(body, kp.PartialResultPayload) == kp.PartialResultPayload(
        delta="x", total_bytes=1
    )
    with pytest.raises(kp.DecodeError) as info:
        convert({"delta": "x", "total_bytes": 1.0}, kp.PartialResultPayload)
    assert info.value.path == "$.total_bytes"
    with pytest.raises(kp.DecodeError, match="outside the u64 range"):
        convert({"delta": "x", "total_bytes": U64_MAX + 1}, kp.PartialResultPayload)
    with pytest.raises(kp.DecodeError, match="unknown field `gap2`"):
        convert({"delta": "x", "total_bytes": 1, "gap2": True}, kp.PartialResultPayload)
    with pytest.raises(kp.DecodeError, match="missing required field `jsonrpc`"):
        convert({"method": "m", "params": None}, kp.JsonRpcNotification)


def test_floats_in_any_values_are_laid_out_like_serde_json() -> None:
    """Floats are written in the shortest round-trip form, laid out as serde_json's ryu does."""
    values = [1.0, 0.1, -0.0, 1e15, 1e16, 1e-5, 1e-6, 12345678901234567.0, 5e-324]
    expected = b"[1.0,0.1,-0.0,1000000000000000.0,1e16,0.00001,1e-6,1.2345678901234568e16,5e-324]"
    assert kp.json_codec.encode(values) == expected
