"""The one progress-line codec: ``encode_progress_line`` writes what the JSON codec
writes for the notification, ``decode_progress_line`` reads it back and
``decode_progress_frame`` the params it leaves raw, one set of bounds on all
sides."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcNotification,
    JsonRpcResponse,
    PartialResultPayload,
    ToolCallProgressFrame,
    WireError,
    decode_message,
    encode_progress_line,
    json_codec,
)
from kigi_tool_protocol._errors import FrameTooLargeError
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS
from kigi_tool_protocol._progress_line import (
    append_progress_line,
    append_progress_lines,
    decode_progress_frame,
    decode_progress_line,
    encode_delta_lines,
)
from kigi_tool_runtime.testing import damaged_frame_logs, frame_logs
from kigi_tool_runtime.testing._frame_strategies import tool_call_frames
from kigi_tool_runtime.testing._strategies import partial_payloads
from kigi_tool_runtime.testing._wire_strategies import WIRE_STRATEGIES
from kigi_tool_runtime.testing._wire_strategies import json_values as any_json

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), U64_MAX) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
payloads = st.builds(
    PartialResultPayload,
    delta=st.text(),
    total_bytes=st.integers(0, U64_MAX),
    truncated=st.booleans(),
    gap=st.booleans(),
)
bodies = st.one_of(
    payloads,
    json_values,
    payloads.map(lambda p: msgspec.Raw(json_codec.encode(p))),
)


def _by_the_codec(
    call_id: str,
    kind: str,
    body: Any,
    seq: int | None,
    session_id: str | None,
    dropped_count: int | None,
) -> bytes:
    frame: ToolCallProgressFrame[Any] = ToolCallProgressFrame(
        tool_call_id=call_id, kind=kind, body=body, dropped_count=dropped_count
    )
    note = JsonRpcNotification(
        session_id=session_id, seq=seq, method=METHOD_TOOL_CALL_PROGRESS, params=frame
    )
    return json_codec.encode(note)


@given(
    call_id=st.text(min_size=1),
    kind=st.text(),
    body=bodies,
    seq=st.none() | st.integers(0, U64_MAX),
    session_id=st.none() | st.text(min_size=1),
    dropped_count=st.none() | st.integers(0, U32_MAX),
)
def test_encode_writes_the_codecs_bytes(
    call_id: str,
    kind: str,
    body: Any,
    seq: int | None,
    session_id: str | None,
    dropped_count: int | None,
) -> None:
    """Byte for byte what json_codec writes for the notification, newline last;
    newline=False leaves it off; append_progress_line appends the same bytes."""
    expected = _by_the_codec(call_id, kind, body, seq, session_id, dropped_count)
    options: dict[str, Any] = {
        "seq": seq,
        "session_id": session_id,
        "dropped_count": dropped_count,
    }
    assert encode_progress_line(call_id, kind, body, **options) == expected + b"\n"
    assert encode_progress_line(call_id, kind, body, newline=False, **options) == expected
    out = bytearray(b"before\n")
    append_progress_line(out, call_id, kind, body, **options)
    assert bytes(out) == b"before\n" + expected + b"\n"


@given(
    call_id=st.text(min_size=1),
    kind=st.text(),
    payload=payloads,
    seq=st.none() | st.integers(0, U64_MAX),
    session_id=st.none() | st.text(min_size=1),
    dropped_count=st.none() | st.integers(0, U32_MAX),
)
def test_a_partial_result_line_decodes_back_typed(
    call_id: str,
    kind: str,
    payload: PartialResultPayload,
    seq: int | None,
    session_id: str | None,
    dropped_count: int | None,
) -> None:
    """Every line the encoder writes with a partial result, at any bound, decodes
    to the same notification with a typed frame."""
    line = encode_progress_line(
        call_id,
        kind,
        payload,
        seq=seq,
        session_id=session_id,
        dropped_count=dropped_count,
        newline=False,
    )
    for form in (line, bytearray(line), memoryview(line), line.decode("utf-8")):
        note = decode_progress_line(form)
        assert isinstance(note, JsonRpcNotification)
        assert note.seq == seq
        assert note.session_id == session_id
        assert note.params == ToolCallProgressFrame(
            tool_call_id=call_id, kind=kind, body=payload, dropped_count=dropped_count
        )


@given(
    call_id=st.text(min_size=1),
    frames=st.lists(
        st.tuples(
            st.sampled_from(["bash_output_chunk", "text", "k\u00e9"]),
            bodies | bodies.map(lambda body: msgspec.Raw(json_codec.encode(body))),
            st.none() | st.integers(0, U64_MAX),
            st.none() | st.integers(0, U32_MAX),
        ),
        max_size=6,
    ),
    session_id=st.none() | st.text(min_size=1),
)
def test_append_progress_lines_writes_each_lines_bytes(
    call_id: str, frames: list[tuple[str, Any, int | None, int | None]], session_id: str | None
) -> None:
    """A batch appends exactly what append_progress_line appends frame by frame,
    whatever mix of kinds, counters and bodies (encoded or not) it holds."""
    expected = bytearray(b"before\n")
    for kind, body, seq, dropped_count in frames:
        options = {"seq": seq, "session_id": session_id, "dropped_count": dropped_count}
        append_progress_line(expected, call_id, kind, body, **options)
    out = bytearray(b"before\n")
    assert append_progress_lines(out, call_id, iter(frames), session_id=session_id) == len(frames)
    assert out == expected


def test_append_progress_lines_keeps_the_lines_before_a_bad_frame() -> None:
    """A frame that cannot be written raises as append_progress_line does; the
    lines before it stay, nothing of it is written."""
    body = PartialResultPayload(delta="x", total_bytes=1)
    first = encode_progress_line("c", "k", body, seq=0)
    for bad, error in (
        (("k", body, -1, None), ValueError),
        (("k", body, 1, U32_MAX + 1), ValueError),
        (("k", "\ud800", 1, None), WireError),
        ((5, body, 1, None), TypeError),
    ):
        out = bytearray()
        with pytest.raises(error):
            append_progress_lines(out, "c", [("k", body, 0, None), bad])  # type: ignore[list-item]
        assert out == first


def test_bounds_are_the_wires_on_both_sides() -> None:
    """seq is a u64 and dropped_count a u32: out of range, encoding is a
    ValueError, and a line carrying it is not taken as a progress line."""
    body = PartialResultPayload(delta="x", total_bytes=1)
    for seq in (-1, U64_MAX + 1):
        with pytest.raises(ValueError, match="outside the u64 range"):
            encode_progress_line("c", "k", body, seq=seq)
    for dropped in (-1, U32_MAX + 1):
        with pytest.raises(ValueError, match="outside the u32 range"):
            encode_progress_line("c", "k", body, dropped_count=dropped)
    out = bytearray(b"kept")
    with pytest.raises(ValueError, match="u64"):
        append_progress_line(out, "c", "k", body, seq=-1)
    assert out == b"kept"
    good = encode_progress_line("c", "k", body, seq=U64_MAX, dropped_count=U32_MAX)
    assert isinstance(decode_progress_line(good).params, ToolCallProgressFrame)
    past_seq = good.replace(b'"seq":%d' % U64_MAX, b'"seq":%d' % (U64_MAX + 1))
    with pytest.raises(DecodeError, match="u64"):
        decode_progress_line(past_seq)
    past_dropped = good.replace(b":%d}" % U32_MAX, b":%d}" % (U32_MAX + 1))
    assert past_dropped != good
    message = decode_progress_line(past_dropped)
    assert isinstance(message, JsonRpcNotification)
    assert isinstance(message.params, msgspec.Raw)  # not taken as a frame


def test_values_json_cannot_carry_are_wire_errors() -> None:
    """A lone surrogate in an id, kind or body, or a body msgspec cannot encode,
    is a WireError; a wrong type is a TypeError naming the argument."""
    with pytest.raises(WireError):
        encode_progress_line("c", "k\ud800", {})
    with pytest.raises(WireError):
        encode_progress_line("c\ud800", "k", {})
    with pytest.raises(WireError):
        encode_progress_line("c", "k", {}, session_id="s\ud800")
    with pytest.raises(WireError):
        encode_progress_line("c", "k", {"delta": "\udfff"})
    with pytest.raises(WireError):
        encode_progress_line("c", "k", object())
    with pytest.raises(TypeError, match="`kind` must be a str"):
        encode_progress_line("c", 3, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`seq` must be an int"):
        encode_progress_line("c", "k", {}, seq=True)
    with pytest.raises(TypeError, match="`dropped_count` must be an int"):
        encode_progress_line("c", "k", {}, dropped_count=1.0)  # type: ignore[arg-type]


# Texts that JSON must escape, that look like the joins and the formatting of
# the lines (`","`, `%`), and characters of every length.
delta_texts = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from(['","', '"', "\\", "%", "%d", "\n", "\x00", "\x7f", "é", "✓", "😀", "a"]),
        max_size=8,
    ).map("".join),
)


@given(
    call_id=st.text(min_size=1),
    kind=st.text(),
    deltas=st.lists(delta_texts, max_size=6),
    total_bytes=st.integers(0, U64_MAX),
    truncated=st.booleans(),
    gap=st.booleans(),
    seq=st.integers(0, U64_MAX),
    session_id=st.none() | st.text(min_size=1),
)
def test_delta_lines_are_the_lines_of_their_frames(
    call_id: str,
    kind: str,
    deltas: list[str],
    total_bytes: int,
    truncated: bool,
    gap: bool,
    seq: int,
    session_id: str | None,
) -> None:
    """encode_delta_lines writes, byte for byte, encode_progress_line's line for
    each frame in turn: one PartialResultPayload a delta, numbered from seq, the
    first with the gap flag; and each line decodes back to its frame."""
    seq = min(seq, U64_MAX - len(deltas) + 1)
    expected = b"".join(
        encode_progress_line(
            call_id,
            kind,
            PartialResultPayload(
                delta=delta,
                total_bytes=total_bytes,
                truncated=truncated,
                gap=gap and index == 0,
            ),
            seq=seq + index,
            session_id=session_id,
        )
        for index, delta in enumerate(deltas)
    )
    data = encode_delta_lines(
        call_id,
        kind,
        deltas,
        total_bytes=total_bytes,
        truncated=truncated,
        gap=gap,
        seq=seq,
        session_id=session_id,
    )
    assert data == expected
    lines = data.splitlines()
    assert len(lines) == len(deltas)
    for index, line in enumerate(lines):
        note = decode_progress_line(line)
        assert isinstance(note, JsonRpcNotification)
        assert note.seq == seq + index
        assert isinstance(note.params, ToolCallProgressFrame)
        assert note.params.body == PartialResultPayload(
            delta=deltas[index],
            total_bytes=total_bytes,
            truncated=truncated,
            gap=gap and index == 0,
        )


def test_delta_lines_refuse_what_their_frames_could_not_carry() -> None:
    """Each argument is checked, even with no delta to write: a wrong type is a
    TypeError naming it, a number outside the u64 range (the last frame's seq
    included) a ValueError, a value JSON cannot carry a WireError."""

    def lines(deltas: Any = ("a", "b"), **changes: Any) -> bytes:
        call_id = changes.pop("call_id", "c")
        options: dict[str, Any] = {"total_bytes": 2, "seq": 0, **changes}
        return encode_delta_lines(call_id, "k", deltas, **options)

    assert lines(()) == b""
    assert lines(seq=U64_MAX - 1).count(b"\n") == 2
    for deltas in ((), ("a",)):
        with pytest.raises(ValueError, match="`seq` = -1 is outside the u64 range"):
            lines(deltas, seq=-1)
        with pytest.raises(ValueError, match=f"`seq` = {U64_MAX + 1} is outside the u64"):
            lines(deltas, seq=U64_MAX + 1)
        with pytest.raises(ValueError, match="`total_bytes`"):
            lines(deltas, total_bytes=U64_MAX + 1)
        with pytest.raises(TypeError, match="`seq` must be an int, not bool"):
            lines(deltas, seq=True)
        with pytest.raises(TypeError, match="`total_bytes` must be an int, not float"):
            lines(deltas, total_bytes=2.0)
        with pytest.raises(TypeError, match="`truncated` must be a bool, not int"):
            lines(deltas, truncated=1)
        with pytest.raises(TypeError, match="`gap` must be a bool, not NoneType"):
            lines(deltas, gap=None)
        with pytest.raises(TypeError, match="`session_id` must be a str or None"):
            lines(deltas, session_id=b"s")
    with pytest.raises(ValueError, match=f"`seq` = {U64_MAX + 1} is outside"):
        lines(seq=U64_MAX)  # the second frame's seq
    for deltas in ("ab", None, b"ab", 3):
        with pytest.raises(TypeError, match="`deltas` must be a sequence of str"):
            lines(deltas)
    for empty in ({"call_id": ""}, {"session_id": ""}):
        with pytest.raises(ValueError, match="must not be empty"):
            lines(**empty)
    with pytest.raises(ValueError, match="`tool_call_id` must not be empty"):
        encode_progress_line("", "k", {})
    with pytest.raises(TypeError, match="`delta` must be a str, not bytes"):
        lines(["a", b"b"])
    with pytest.raises(WireError):
        lines(["a", "\udfff"])
    with pytest.raises(WireError):
        encode_delta_lines("c\ud800", "k", ["a"], total_bytes=1, seq=0)


def test_a_raw_body_is_written_as_it_is() -> None:
    raw = msgspec.Raw(b'{"delta":"\xc3\xa9","total_bytes":2,"truncated":false,"gap":false}')
    line = encode_progress_line("c", "k", raw, seq=0)
    assert line == (
        b'{"jsonrpc":"2.0","seq":0,"method":"tool_call_progress","params":{"tool_call_id":"c",'
        b'"kind":"k","body":' + bytes(raw) + b"}}\n"
    )


def test_other_messages_decode_with_raw_parts() -> None:
    """Any other JSON-RPC message comes back as decode_message gives it, params
    and result left Raw; a text note is a notification with Raw params."""
    text = encode_progress_line("c", "text", {"text": "hi"}, seq=4, newline=False)
    note = decode_progress_line(text)
    assert isinstance(note, JsonRpcNotification)
    assert note.seq == 4
    assert isinstance(note.params, msgspec.Raw)
    assert json_codec.decode(note.params) == {
        "tool_call_id": "c",
        "kind": "text",
        "body": {"text": "hi"},
    }
    response = decode_progress_line(b'{"jsonrpc":"2.0","id":7,"result":{"a":1}}')
    assert isinstance(response, JsonRpcResponse)
    assert isinstance(response.result, msgspec.Raw)
    assert bytes(response.result) == b'{"a":1}'


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b'{"id":1,"result":1}',  # no jsonrpc tag
        b'{"jsonrpc":"1.0","method":"tool_call_progress","params":{}}',
        b'{"jsonrpc":"2.0","seq":-1,"method":"tool_call_progress","params":{}}',
    ],
)
def test_lines_that_are_no_message_are_decode_errors(line: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_progress_line(line)


def test_a_line_past_the_limit_is_not_parsed() -> None:
    line = encode_progress_line("c", "k", PartialResultPayload(delta="x" * 100, total_bytes=100))
    with pytest.raises(FrameTooLargeError):
        decode_progress_line(line[:-1], max_bytes=50)
    with pytest.raises(FrameTooLargeError):
        decode_progress_line(line[:-1].decode(), max_bytes=50)


def test_many_distinct_heads_stay_correct() -> None:
    """More (call, kind, session) keys than the head cache holds still encode right."""
    body = PartialResultPayload(delta="d", total_bytes=1)
    for n in range(3000):
        call, kind, session = f"c{n}", f"k{n % 7}", None if n % 2 else f"s{n}"
        line = encode_progress_line(call, kind, body, seq=n, session_id=session)
        assert line == _by_the_codec(call, kind, body, n, session, None) + b"\n"


class _Name(str):
    """A str subclass, as libraries hand out for names."""


class _Kind(enum.StrEnum):
    OUTPUT = "kind-of-a-str-enum"


@pytest.mark.parametrize("warm", [False, True])
def test_ids_of_a_str_subclass_are_written_as_their_text(warm: bool) -> None:
    """An id or kind of a ``str`` subclass (a ``StrEnum`` member included) is written
    as its text, the same bytes whether or not its head was encoded before."""
    body = PartialResultPayload(delta="d", total_bytes=1)
    call, session = f"sub-{warm}-call", f"sub-{warm}-session"
    expected = _by_the_codec(call, _Kind.OUTPUT.value, body, 3, session, None) + b"\n"
    if warm:
        assert encode_progress_line(call, _Kind.OUTPUT.value, body, seq=3, session_id=session) == (
            expected
        )
    lines = encode_delta_lines(
        _Name(call), _Kind.OUTPUT, ["d"], total_bytes=1, seq=3, session_id=_Name(session)
    )
    assert lines == expected
    line = encode_progress_line(_Name(call), _Kind.OUTPUT, body, seq=3, session_id=_Name(session))
    assert line == expected


#: The body types the runtime decodes frames with: plain JSON, kept raw, typed.
BODY_TYPES = (Any, msgspec.Raw, PartialResultPayload)


def _outcome(decode: Callable[[], Any]) -> Any:
    """What a decode gives: its value, or its error's class, reason and path."""
    try:
        return decode()
    except DecodeError as error:
        return (type(error), error.reason, error.path)


@given(
    data=st.data(),
    name=st.sampled_from(sorted(WIRE_STRATEGIES)),
    body_type=st.sampled_from(BODY_TYPES),
)
def test_a_frame_decodes_as_the_strict_codec_decodes_it(
    data: st.DataObject, name: str, body_type: Any
) -> None:
    """On the encoding of every wire value, decode_progress_frame gives what
    json_codec.decode gives for ToolCallProgressFrame[body_type]: the same frame,
    or the same error at the same path."""
    _, values = WIRE_STRATEGIES[name]
    params = json_codec.encode(data.draw(values, label=name))
    expected = _outcome(lambda: json_codec.decode(params, ToolCallProgressFrame[body_type]))
    assert _outcome(lambda: decode_progress_frame(params, body_type)) == expected


@given(
    frame=tool_call_frames(bodies=st.one_of(any_json(), partial_payloads())),
    seq=st.none() | st.integers(0, U64_MAX),
    body_type=st.sampled_from(BODY_TYPES),
)
def test_a_frame_within_its_line_decodes_as_the_whole_line_does(
    frame: ToolCallProgressFrame[Any], seq: int | None, body_type: Any
) -> None:
    """The params decode_progress_line leaves raw decode to the params of the
    whole line decoded strictly; a partial-result frame comes back as
    decode_progress_line's own."""
    line = encode_progress_line(
        frame.tool_call_id,
        frame.kind,
        frame.body,
        seq=seq,
        dropped_count=frame.dropped_count,
        newline=False,
    )
    message = decode_message(line, params=msgspec.Raw)
    assert isinstance(message, JsonRpcNotification)
    whole = _outcome(
        lambda: json_codec.decode(line, JsonRpcNotification[ToolCallProgressFrame[body_type]])
    )
    got = _outcome(lambda: decode_progress_frame(message.params, body_type))
    if isinstance(whole, tuple):
        error_type, reason, path = whole
        assert path.startswith("$.params.body")
        assert got == (error_type, reason, "$" + path[len("$.params") :])
    else:
        assert got == whole.params
    fast = decode_progress_line(line)
    if isinstance(fast.params, ToolCallProgressFrame):
        assert decode_progress_frame(message.params, PartialResultPayload) == fast.params


def _lines_of_logs() -> st.SearchStrategy[list[bytes]]:
    return st.one_of(
        frame_logs().map(lambda log: list(log.lines)), damaged_frame_logs().map(lambda d: d[0])
    )


@given(lines=_lines_of_logs(), body_type=st.sampled_from(BODY_TYPES))
def test_errors_carry_the_paths_of_the_whole_line(lines: list[bytes], body_type: Any) -> None:
    """Over intact and damaged frame logs: where a line is a notification, its
    params decode (or fail, with the same reason, at the same path below
    ``$.params``) as the whole line decoded strictly does."""
    for line in lines:
        try:
            message = decode_message(line, params=msgspec.Raw)
        except DecodeError:
            continue
        if not isinstance(message, JsonRpcNotification):
            continue
        whole = _outcome(
            lambda line=line: json_codec.decode(
                line, JsonRpcNotification[ToolCallProgressFrame[body_type]]
            )
        )
        got = _outcome(lambda message=message: decode_progress_frame(message.params, body_type))
        if isinstance(whole, tuple):
            error_type, reason, path = whole
            # An error with no path (invalid UTF-8) is at the root of both.
            at = "$" if path == "$" else "$" + path[len("$.params") :]
            assert path == "$" or path.startswith("$.params")
            assert got == (error_type, reason, at)
        else:
            assert got == whole.params


def test_a_frame_has_the_wires_bounds() -> None:
    """dropped_count is a u32, the frame fields are required, and params past
    ``max_bytes`` are not parsed; up to it they are, whatever the ceiling."""

    def params(dropped: int) -> bytes:
        return b'{"tool_call_id":"c","kind":"k","body":null,"dropped_count":%d}' % dropped

    assert decode_progress_frame(params(U32_MAX)).dropped_count == U32_MAX
    with pytest.raises(DecodeError) as error:
        decode_progress_frame(params(U32_MAX + 1))
    assert error.value.path == "$.dropped_count"
    with pytest.raises(DecodeError) as error:
        decode_progress_frame(b'{"tool_call_id":"c","kind":"k"}')
    assert "missing required field `body`" in error.value.reason
    with pytest.raises(DecodeError) as error:
        decode_progress_frame(
            b'{"tool_call_id":"c","kind":"k","body":{"delta":1}}', PartialResultPayload
        )
    assert error.value.path == "$.body.delta"
    exact = params(7)
    assert decode_progress_frame(msgspec.Raw(exact), max_bytes=len(exact)).body is None
    with pytest.raises(FrameTooLargeError):
        decode_progress_frame(msgspec.Raw(exact), max_bytes=len(exact) - 1)
    with pytest.raises(TypeError):
        decode_progress_frame(None)  # type: ignore[call-overload]


def test_a_frame_past_the_ceiling_decodes_under_a_larger_limit() -> None:
    """max_bytes is the caller's: params longer than the default ceiling decode
    when it allows them, and are refused at the default."""
    big = "x" * (MAX_FRAME_BYTES_CEILING + 1)
    params = json_codec.encode(
        ToolCallProgressFrame(tool_call_id="c", kind="text", body={"text": big})
    )
    with pytest.raises(FrameTooLargeError):
        decode_progress_frame(params)
    frame = decode_progress_frame(params, msgspec.Raw, max_bytes=len(params))
    assert bytes(frame.body) == json_codec.encode({"text": big})
