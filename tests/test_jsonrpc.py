"""JSON-RPC envelopes: version, ids, the result/error rule, and ``decode_message``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._codec import JsonCodec, MsgpackCodec, convert
from kigi_tool_protocol._errors import FrameTooLargeError
from kigi_tool_protocol._hooks import HookFrame
from kigi_tool_protocol._jsonrpc import JSONRPC_VERSION
from kigi_tool_protocol._limits import I64_MAX, I64_MIN, U64_MAX
from kigi_tool_protocol._methods import METHOD_HOOK, METHOD_TOOL_CALL_PROGRESS
from kigi_tool_protocol._tool_call import ToolOutputJson
from kigi_tool_protocol._tool_error import CancelledWire, error_code_for

REQUEST_TAIL = ',"id":"r","method":"tool.call","params":{}}'


@pytest.mark.parametrize(
    ("version", "reason", "path"),
    [
        ('"1.0"', "Invalid value '1.0'", "$.jsonrpc"),
        ('"3.0"', "Invalid value '3.0'", "$.jsonrpc"),
        ("2.0", "Expected `str`", "$.jsonrpc"),
        ("null", "Expected `str`", "$.jsonrpc"),
        ('""', '`jsonrpc` must be "2.0", got ""', "$"),
    ],
    ids=["1.0", "3.0", "number", "null", "empty"],
)
@pytest.mark.parametrize(
    "wire_type", [kp.JsonRpcRequest, kp.JsonRpcRequest[kp.ToolCallParams[Any]]]
)
def test_wrong_jsonrpc_version_is_rejected(
    wire_type: Any, version: str, reason: str, path: str
) -> None:
    """jsonrpc must be exactly the string "2.0"."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode('{"jsonrpc":' + version + REQUEST_TAIL, wire_type)
    assert reason in info.value.reason
    assert info.value.path == path


@pytest.mark.parametrize(
    "frame",
    [
        '{"id":"r","method":"tool.call","params":{}}',
        '{"method":"tool_call_progress","params":{}}',
        '{"id":"r","result":{}}',
    ],
    ids=["request", "notification", "response"],
)
def test_missing_jsonrpc_is_rejected(frame: str) -> None:
    """jsonrpc is required on every envelope, however it is decoded."""
    for wire_type in (kp.JsonRpcRequest, kp.JsonRpcNotification, kp.JsonRpcResponse):
        if frame.startswith('{"method"') != (wire_type is kp.JsonRpcNotification):
            continue
        with pytest.raises(kp.DecodeError, match="missing required field `jsonrpc`"):
            kp.json_codec.decode(frame, wire_type)
        with pytest.raises(kp.DecodeError, match="missing required field `jsonrpc`"):
            kp.msgpack_codec.decode(kp.msgpack_codec.encode(msgspec.json.decode(frame)), wire_type)
    with pytest.raises(kp.DecodeError, match="missing required field `jsonrpc`"):
        kp.decode_message(frame)


@pytest.mark.parametrize(
    ("id_json", "reason"),
    [
        ("null", "Expected `int | str`, got `null`"),
        ("1.5", "Expected `int | str`, got `float`"),
        ("1.0", "Expected `int | str`, got `float`"),
        ("true", "Expected `int | str`, got `bool`"),
        (str(I64_MAX + 1), f"Expected `int` <= {I64_MAX}"),
        (str(I64_MIN - 1), f"Expected `int` >= {I64_MIN}"),
        ("[]", "Expected `int | str`, got `array`"),
    ],
    ids=["null", "float", "integral-float", "bool", "past-i64", "below-i64", "array"],
)
def test_bad_ids_are_rejected(id_json: str, reason: str) -> None:
    """An id is a string or an i64; anything else is a DecodeError at ``$.id``."""
    frame = '{"jsonrpc":"2.0","id":' + id_json + ',"result":1}'
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.JsonRpcResponse)
    assert (info.value.reason, info.value.path) == (reason, "$.id")


@pytest.mark.parametrize("request_id", ["", "r", I64_MIN, I64_MAX, 0])
def test_string_and_i64_ids_round_trip(request_id: str | int) -> None:
    """String ids (even empty) and ids across the whole i64 range are kept."""
    request = kp.JsonRpcRequest(id=request_id, method="m", params=None)
    decoded = kp.json_codec.decode(kp.json_codec.encode(request), kp.JsonRpcRequest)
    assert decoded.id == request_id
    assert type(decoded.id) is type(request_id)


@pytest.mark.parametrize(
    ("tail", "which"),
    [
        (',"result":1,"error":{"code":1,"message":"m"}', "both"),
        ("", "neither"),
        (',"result":null', "neither"),
    ],
    ids=["both", "neither", "null-result-only"],
)
def test_response_needs_exactly_one_of_result_and_error(tail: str, which: str) -> None:
    """A response with both, or neither (result:null counts as absent), is rejected."""
    frame = '{"jsonrpc":"2.0","id":"r"' + tail + "}"
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.JsonRpcResponse)
    assert f"exactly one of `result` and `error`, got {which}" in info.value.reason
    # Without result or error, decode_message reads the frame as a request lacking a method.
    reason = f"got {which}" if tail else "missing required field `method`"
    with pytest.raises(kp.DecodeError, match=reason):
        kp.decode_message(frame)


def test_response_rule_holds_on_construction() -> None:
    """Constructing a response with both or neither of result and error raises ValueError."""
    error = kp.JsonRpcError(code=-32603, message="boom")
    with pytest.raises(ValueError, match="got both"):
        kp.JsonRpcResponse(id=1, result={}, error=error)
    with pytest.raises(ValueError, match="got neither"):
        kp.JsonRpcResponse(id=1)


def test_envelopes_report_their_version() -> None:
    """Every envelope reads jsonrpc "2.0" and writes it first."""
    notification: kp.JsonRpcNotification[list[int]] = kp.JsonRpcNotification(method="m", params=[])
    assert notification.jsonrpc == JSONRPC_VERSION == "2.0"
    assert kp.json_codec.encode(notification) == b'{"jsonrpc":"2.0","method":"m","params":[]}'


@pytest.mark.parametrize("field", ["session_id"])
def test_empty_session_id_is_rejected(field: str) -> None:
    """session_id, when present, is a non-empty SessionId on every envelope."""
    for frame in (
        '{"jsonrpc":"2.0","id":1,"session_id":"","method":"m","params":1}',
        '{"jsonrpc":"2.0","session_id":"","method":"m","params":1}',
        '{"jsonrpc":"2.0","id":1,"session_id":"","result":1}',
    ):
        with pytest.raises(kp.DecodeError) as info:
            kp.decode_message(frame)
        assert info.value.path == f"$.{field}"
        assert info.value.reason == "Expected `str` of length >= 1"


@pytest.mark.parametrize(
    ("seq", "reason"),
    [("-1", "Expected `int` >= 0"), (str(U64_MAX + 1), "outside the u64 range"), ("1.0", "float")],
    ids=["negative", "past-u64", "float"],
)
def test_notification_seq_is_a_u64(seq: str, reason: str) -> None:
    """seq is a u64 counter."""
    frame = '{"jsonrpc":"2.0","seq":' + seq + ',"method":"m","params":{}}'
    with pytest.raises(kp.DecodeError, match=reason):
        kp.json_codec.decode(frame, kp.JsonRpcNotification)


def test_params_are_required_but_may_be_null() -> None:
    """params must be present on requests and notifications; null is a value."""
    with pytest.raises(kp.DecodeError, match="missing required field `params`"):
        kp.decode_message('{"jsonrpc":"2.0","id":1,"method":"m"}')
    with pytest.raises(kp.DecodeError, match="missing required field `params`"):
        kp.decode_message('{"jsonrpc":"2.0","method":"m"}')
    message = kp.decode_message('{"jsonrpc":"2.0","method":"m","params":null}')
    assert kp.json_codec.encode(message) == b'{"jsonrpc":"2.0","method":"m","params":null}'


def test_decode_message_classifies_by_keys() -> None:
    """result/error make a response, else id makes a request, else a notification."""
    request = kp.decode_message('{"method":"m","id":"r","jsonrpc":"2.0","params":{}}')
    notification = kp.decode_message('{"jsonrpc":"2.0","method":"m","params":{}}')
    response = kp.decode_message('{"jsonrpc":"2.0","id":"r","error":{"code":1,"message":"x"}}')
    assert type(request) is kp.JsonRpcRequest
    assert type(notification) is kp.JsonRpcNotification
    assert type(response) is kp.JsonRpcResponse
    assert response.error == kp.JsonRpcError(code=1, message="x")


def test_decode_message_decodes_params_by_method() -> None:
    """A method-to-type mapping decodes known params typed and the rest as plain values."""
    line = (
        b'{"jsonrpc":"2.0","session_id":"s","method":"tool_call_progress","params":'
        b'{"tool_call_id":"c","kind":"bash_output_chunk","body":{"delta":"hi","total_bytes":2}}}'
    )
    types = {METHOD_TOOL_CALL_PROGRESS: kp.ToolCallProgressFrame[kp.PartialResultPayload]}
    message = kp.decode_message(line, params=types)
    assert isinstance(message, kp.JsonRpcNotification)
    assert message.params == kp.ToolCallProgressFrame(
        tool_call_id="c",
        kind="bash_output_chunk",
        body=kp.PartialResultPayload(delta="hi", total_bytes=2),
    )
    other = kp.decode_message(b'{"jsonrpc":"2.0","method":"ping","params":{"a":1}}', params=types)
    assert other.params == {"a": 1}  # type: ignore[union-attr]
    bad = line.replace(b'"total_bytes":2', b'"total_bytes":2,"x":1')
    with pytest.raises(kp.DecodeError) as info:
        kp.decode_message(bad, params=types)
    assert info.value.path == "$.params.body"


def test_decode_message_leaves_untyped_params_plain() -> None:
    """Without a type, params stay plain JSON values, ready for convert() later."""
    line = (
        '{"jsonrpc":"2.0","id":7,"method":"tool.call",'
        '"params":{"tool_call_id":"c","tool_id":"t","arguments":null}}'
    )
    message = kp.decode_message(line)
    assert isinstance(message, kp.JsonRpcRequest)
    assert message.params == {"tool_call_id": "c", "tool_id": "t", "arguments": None}
    params = convert(message.params, kp.ToolCallParams)
    assert params == kp.ToolCallParams(tool_call_id="c", tool_id="t", arguments=None)


@pytest.mark.parametrize(
    ("line", "reason", "path"),
    [
        ('{"jsonrpc":"2.0","method":5,"params":1}', "Expected `str`, got `int`", "$.method"),
        ('{"jsonrpc":"2.0","seq":-1,"method":"m","params":1}', "Expected `int` >= 0", "$.seq"),
        ('{"jsonrpc":"2.0","seq":true,"method":"m","params":1}', "got `bool`", "$.seq"),
        (
            '{"jsonrpc":"2.0","seq":18446744073709551616,"method":"m","params":1}',
            "outside the u64 range",
            "$.seq",
        ),
        ('{"jsonrpc":"2.0","result":1}', "Object missing required field `id`", "$"),
        ('{"jsonrpc":"2.0","id":1,"params":1}', "Object missing required field `method`", "$"),
        ('{"jsonrpc":"2.0","id":1,"result":1,"error":null}', "", ""),
        (
            '{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}',
            "got `float`",
            "$.error.code",
        ),
    ],
    ids=[
        "method-not-str",
        "negative-seq",
        "bool-seq",
        "seq-past-u64",
        "response-without-id",
        "request-without-method",
        "null-error-is-absent",
        "float-error-code",
    ],
)
def test_decode_message_checks_each_kind(line: str, reason: str, path: str) -> None:
    """decode_message applies each kind's rules, with paths from the message root."""
    if not reason:
        assert kp.decode_message(line) == kp.JsonRpcResponse(id=1, result=1)
        return
    with pytest.raises(kp.DecodeError) as info:
        kp.decode_message(line)
    assert reason in info.value.reason
    assert info.value.path == path


def test_decode_message_result_paths() -> None:
    """A typed result that does not fit names its path under ``$.result``."""
    line = (
        '{"jsonrpc":"2.0","id":1,"result":{"tool_call_id":"","output":{"kind":"text","value":""}}}'
    )
    with pytest.raises(kp.DecodeError) as info:
        kp.decode_message(line, result=kp.ToolCallResult)
    assert info.value.path == "$.result.tool_call_id"


def test_decode_message_works_over_msgpack() -> None:
    """The MessagePack codec classifies and validates messages the same way."""
    wire = kp.JsonRpcNotification(
        session_id="s", seq=3, method=METHOD_HOOK, params=HookFrame.cancel("s", "t", "c")
    )
    data = kp.msgpack_codec.encode(wire)
    assert kp.msgpack_codec.decode_message(data, params={METHOD_HOOK: HookFrame}) == wire


@pytest.mark.parametrize("codec", [kp.json_codec, kp.msgpack_codec], ids=["json", "msgpack"])
def test_decode_message_can_defer_params_and_result(codec: JsonCodec | MsgpackCodec) -> None:
    """params/result=msgspec.Raw keep those parts undecoded for a later typed decode."""
    params = kp.ToolCallParams(tool_call_id="c", tool_id="t", arguments=None)
    request = codec.encode(kp.JsonRpcRequest(id=7, method="tool.call", params=params))
    message = codec.decode_message(request, params=msgspec.Raw)
    assert isinstance(message, kp.JsonRpcRequest)
    assert isinstance(message.params, msgspec.Raw)
    assert codec.decode(message.params, kp.ToolCallParams) == params
    reply = codec.encode(kp.JsonRpcResponse(id=7, result={"ok": [1]}))
    response = codec.decode_message(reply, result=msgspec.Raw)
    assert isinstance(response, kp.JsonRpcResponse)
    assert isinstance(response.result, msgspec.Raw)
    assert codec.decode(response.result) == {"ok": [1]}


def test_deferred_null_result_still_counts_as_absent() -> None:
    """With result=msgspec.Raw, a null result is still absent: alone it is rejected."""
    with pytest.raises(kp.DecodeError, match="got neither"):
        kp.decode_message(b'{"jsonrpc":"2.0","id":1,"result":null}', result=msgspec.Raw)
    with pytest.raises(kp.DecodeError, match="got neither"):
        kp.msgpack_codec.decode_message(
            msgspec.msgpack.encode({"jsonrpc": "2.0", "id": 1, "result": None}), result=msgspec.Raw
        )
    message = kp.decode_message(
        b'{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":1,"message":"m"}}',
        result=msgspec.Raw,
    )
    assert message == kp.JsonRpcResponse(id=1, error=kp.JsonRpcError(code=1, message="m"))


def test_deferring_one_method_still_types_the_others() -> None:
    """A mapping may mix Raw and typed methods; typed ones keep rooted error paths."""
    types = {METHOD_HOOK: msgspec.Raw, METHOD_TOOL_CALL_PROGRESS: kp.ToolCallProgressFrame}
    hook = kp.decode_message(b'{"jsonrpc":"2.0","method":"hook","params":{"x":1}}', params=types)
    assert isinstance(hook.params, msgspec.Raw)  # type: ignore[union-attr]
    line = (
        b'{"jsonrpc":"2.0","method":"tool_call_progress",'
        b'"params":{"tool_call_id":"","kind":"k","body":1}}'
    )
    with pytest.raises(kp.DecodeError) as info:
        kp.decode_message(line, params=types)
    assert info.value.path == "$.params.tool_call_id"


def test_decode_message_checks_the_frame_limit_first() -> None:
    """decode_message rejects an oversized frame before looking at it."""
    with pytest.raises(FrameTooLargeError):
        kp.decode_message(b"not json at all", max_bytes=4)
    with pytest.raises(FrameTooLargeError):
        kp.msgpack_codec.decode_message(b"\xc1" * 8, max_bytes=4)


def test_decode_message_rejects_non_objects() -> None:
    """A message must be a JSON object."""
    with pytest.raises(kp.DecodeError, match="Expected `object`, got `array`"):
        kp.decode_message(b"[]")


def test_error_data_carries_a_tool_error() -> None:
    """A failed call's error.data is a ToolErrorWire, recoverable with convert()."""
    wire = CancelledWire(tool_id="Kigi:read_file")
    reply: kp.JsonRpcResponse[None] = kp.JsonRpcResponse(
        id="req",
        error=kp.JsonRpcError(
            code=error_code_for(wire), message="tool call cancelled by server", data=wire
        ),
    )
    encoded = kp.json_codec.encode(reply)
    assert encoded == (
        b'{"jsonrpc":"2.0","id":"req","error":{"code":-32603,"message":"tool call cancelled'
        b' by server","data":{"code":"cancelled","tool_id":"Kigi:read_file"}}}'
    )
    decoded = kp.json_codec.decode(encoded, kp.JsonRpcResponse)
    assert decoded.error is not None
    assert convert(decoded.error.data, kp.ToolErrorWire) == wire


def test_error_code_is_an_i32() -> None:
    """error.code is an i32."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(b'{"code":2147483648,"message":"m"}', kp.JsonRpcError)
    assert info.value.path == "$.code"


def test_typed_result_decodes_in_one_pass() -> None:
    """JsonRpcResponse[ToolCallResult] decodes the result typed."""
    line = (
        b'{"jsonrpc":"2.0","id":"r","result":{"tool_call_id":"c",'
        b'"output":{"kind":"json","value":{"text":"hi"}}}}'
    )
    response = kp.json_codec.decode(line, kp.JsonRpcResponse[kp.ToolCallResult])
    assert response.result == kp.ToolCallResult(
        tool_call_id="c", output=ToolOutputJson(value={"text": "hi"})
    )
    assert kp.decode_message(line, result=kp.ToolCallResult) == response
