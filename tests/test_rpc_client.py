"""ClientProtocol, the client's side of the JSON-RPC rules without I/O: plain
function tests, and a state machine over calls, requests, server lines,
give-ups and a lost connection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from kigi_tool_protocol import (
    PartialResultPayload,
    ToolCallProgressFrame,
    ToolCallResult,
    WireError,
    encode_progress_line,
)
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._tool_error import (
    ConnectionLostWire,
    InternalErrorWire,
    TimeoutWire,
    error_code_for,
)
from kigi_tool_runtime import RemoteToolError
from kigi_tool_runtime._transport._rpc_client import (
    CallEnded,
    ClientEvent,
    ClientProtocol,
    Failure,
    ProgressReceived,
    ProgressRefused,
    RequestEnded,
    check_bounds,
    check_timeout,
    deadline_ms_of,
    request_timed_out,
    tool_id_of,
)
from kigi_tool_runtime._wire._split import OversizedLine

RESULT = {"tool_call_id": "c", "output": {"kind": "text", "value": "ok"}}


def _result_line(request_id: Any, result: Any = None) -> bytes:
    body = RESULT if result is None else result
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": body}).encode()


def _error_line(request_id: Any, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": -32005, "message": "it failed"}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def _progress(call_id: str, seq: int = 0, delta: str = "x") -> bytes:
    body = PartialResultPayload(delta=delta, total_bytes=len(delta))
    return encode_progress_line(call_id, "chunk", body, seq=seq, newline=False)


def test_a_call_is_a_numbered_request_line() -> None:
    protocol = ClientProtocol("sess_1")
    request_id, line = protocol.start_call(
        "bash", {"command": "true"}, tool_call_id="c1", deadline_ms=500
    )
    assert request_id == 1
    assert line.endswith(b"\n")
    assert json.loads(line) == {
        "jsonrpc": "2.0",
        "id": 1,
        "session_id": "sess_1",
        "method": "tool.call",
        "params": {
            "tool_call_id": "c1",
            "tool_id": "bash",
            "arguments": {"command": "true"},
            "deadline_ms": 500,
        },
    }
    assert protocol.is_pending("c1")
    with pytest.raises(ValueError, match="tool_call_id 'c1' is already in flight"):
        protocol.start_call("bash", {}, tool_call_id="c1", deadline_ms=None)
    with pytest.raises(WireError):
        protocol.start_call("bash", {"x": object()}, tool_call_id="c2", deadline_ms=None)
    assert not protocol.is_pending("c2")
    assert protocol.start_request("tools.list", {})[0] == 3  # an id is never reused
    assert protocol.calls_made == 1


def test_progress_and_the_response_end_the_call_once() -> None:
    protocol = ClientProtocol("s")
    protocol.start_call("bash", {}, tool_call_id="c", deadline_ms=None)
    (event,) = protocol.receive_line(_progress("c", seq=0, delta="hi"))
    assert isinstance(event, ProgressReceived)
    assert (event.call_id, event.seq, event.frame.body.delta) == ("c", 0, "hi")
    text = encode_progress_line("c", "text", {"text": "note"}, seq=1, newline=False)
    (note,) = protocol.receive_line(text)
    assert note == ProgressReceived(
        "c", ToolCallProgressFrame(tool_call_id="c", kind="text", body={"text": "note"}), 1
    )
    (ended,) = protocol.receive_line(_result_line(1))
    assert isinstance(ended, CallEnded)
    assert isinstance(ended.outcome, ToolCallResult)
    assert not protocol.is_pending("c")
    # Afterwards the same response, and frames of the call, are of no use.
    assert protocol.receive_line(_result_line(1)) == []
    assert protocol.receive_line(_progress("c", seq=2)) == []
    assert (protocol.lines, protocol.lines_unused) == (5, 2)


def test_errors_and_bad_results_are_failures() -> None:
    protocol = ClientProtocol("s")
    for n in range(3):
        protocol.start_call("bash", {}, tool_call_id=f"c{n}", deadline_ms=None)
    wire = {"code": "cancelled", "tool_id": "bash"}
    (ended,) = protocol.receive_line(_error_line(1, wire))
    assert isinstance(ended.outcome, Failure)
    assert (ended.outcome.wire.code, ended.outcome.number) == ("cancelled", -32005)
    (ended,) = protocol.receive_line(_error_line(2))  # no data: an internal error
    assert ended.outcome == Failure(InternalErrorWire(detail="it failed"), "it failed", -32005)
    (ended,) = protocol.receive_line(_result_line(3, {"not": "a result"}))
    assert isinstance(ended.outcome, Failure)
    assert ended.outcome.wire.code == "internal_error"
    assert "is not a ToolCallResult" in ended.outcome.message


def test_requests_are_answered_with_plain_values() -> None:
    protocol = ClientProtocol("s")
    request_id, line = protocol.start_request("tools.list", {})
    assert json.loads(line)["method"] == "tools.list"
    (answer,) = protocol.receive_line(_result_line(request_id, {"tools": []}))
    assert answer == RequestEnded(request_id, {"tools": []}, None)
    request_id, _ = protocol.start_request("tools.list", {})
    protocol.forget_request(request_id)
    assert protocol.receive_line(_result_line(request_id, {"tools": []})) == []


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[]",
        b'{"jsonrpc":"2.0","id":"text-id","result":1}',
        b'{"jsonrpc":"2.0","id":99,"result":1}',
        b'{"jsonrpc":"2.0","method":"tool_call_progress","params":{"kind":"k"}}',
        b'{"jsonrpc":"2.0","method":"other","params":{}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tool.call","params":{}}',
    ],
)
def test_lines_of_no_use_are_counted_and_change_nothing(line: bytes) -> None:
    protocol = ClientProtocol("s")
    protocol.start_call("bash", {}, tool_call_id="c", deadline_ms=None)
    assert protocol.receive_line(line) == []
    assert protocol.lines_unused == 1
    assert protocol.is_pending("c")


def test_an_oversized_line_is_counted() -> None:
    protocol = ClientProtocol("s", max_frame_bytes=10)
    assert protocol.receive_line(OversizedLine(size=100, limit=10)) == []
    assert protocol.receive_line(_progress("c")) == []  # past max_frame_bytes
    assert (protocol.lines, protocol.lines_unused) == (2, 2)


def test_a_lost_connection_ends_everything_pending_at_once() -> None:
    protocol = ClientProtocol("s")
    protocol.start_call("bash", {}, tool_call_id="c1", deadline_ms=None)
    protocol.start_call("fetch", {}, tool_call_id="c2", deadline_ms=None)
    request_id, _ = protocol.start_request("tools.list", {})
    events = protocol.connection_lost("the server closed its output")
    message = "connection to the tool server lost: the server closed its output"
    assert events == [
        CallEnded("c1", Failure(ConnectionLostWire(tool_id="bash"), message)),
        CallEnded("c2", Failure(ConnectionLostWire(tool_id="fetch"), message)),
        RequestEnded(request_id, None, Failure(ConnectionLostWire(tool_id="tools:list"), message)),
    ]
    assert protocol.connection_lost("again") == []
    assert protocol.pending_requests == 0
    # Started afterwards: a line, but nothing pending (the driver fails it).
    protocol.start_call("bash", {}, tool_call_id="c3", deadline_ms=None)
    assert not protocol.is_pending("c3")
    assert protocol.lost_failure("bash").message == message


def test_a_forgotten_call_gets_nothing_more() -> None:
    protocol = ClientProtocol("s")
    protocol.start_call("bash", {}, tool_call_id="c", deadline_ms=None)
    assert protocol.forget_call("c")
    assert not protocol.forget_call("c")
    assert protocol.receive_line(_progress("c")) == []
    assert protocol.receive_line(_result_line(1)) == []
    cancel = json.loads(protocol.cancel_line("bash", "c"))
    assert cancel["method"] == "hook"
    assert cancel["params"]["call_id"] == "c"
    assert cancel["params"]["event"] == {"type": "Cancel"}
    assert "id" not in cancel


def test_a_line_past_the_tools_declared_frame_limit_is_refused_and_said() -> None:
    """limit_frames (from a tool's declared max_frame_bytes, never above the
    client's own) refuses longer progress lines of that tool's calls only."""
    protocol = ClientProtocol("s", max_frame_bytes=1000)
    protocol.limit_frames("bash", 200)
    protocol.limit_frames("wide", 10**9)
    protocol.start_call("bash", {}, tool_call_id="b", deadline_ms=None)
    protocol.start_call("other", {}, tool_call_id="o", deadline_ms=None)
    protocol.start_call("wide", {}, tool_call_id="w", deadline_ms=None)
    short, long = _progress("b", delta="x"), _progress("b", delta="x" * 100)
    assert len(short) <= 200 < len(long)
    assert isinstance(protocol.receive_line(short)[0], ProgressReceived)
    assert protocol.receive_line(long) == [ProgressRefused("b", len(long), 200)]
    assert isinstance(protocol.receive_line(_progress("o", delta="x" * 100))[0], ProgressReceived)
    too_long = _progress("w", delta="x" * 1000)
    assert len(too_long) > 1000
    assert protocol.receive_line(too_long) == []  # past the client's own bound: unread
    assert protocol.lines_unused == 2


def test_requests_name_their_method_as_a_tool_id() -> None:
    assert tool_id_of("tools.list") == "tools:list"
    assert tool_id_of("a.b.c") == "a:b_c"
    assert tool_id_of("no good!") == "request"


# -- The state machine ----------------------------------------------------------

CALL_IDS = st.sampled_from(["a", "b", "c"])


class ClientProtocolMachine(RuleBasedStateMachine):
    """Whatever the server sends and whatever the driver does, each call and
    request ends at most once, only while pending; progress only reaches a
    pending call; a lost connection ends everything pending at once."""

    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.protocol = ClientProtocol("s")
        self.calls: dict[str, int] = {}  # pending call id -> request id
        self.other: set[int] = set()  # pending request ids (not calls)
        self.ended: set[int] = set()  # request ids ended (calls and requests)

    def _act(self, events: list[ClientEvent]) -> None:
        for event in events:
            if isinstance(event, ProgressReceived | ProgressRefused):
                assert event.call_id in self.calls
            elif isinstance(event, CallEnded):
                request_id = self.calls.pop(event.call_id)
                assert request_id not in self.ended
                self.ended.add(request_id)
            else:
                assert event.request_id in self.other
                self.other.remove(event.request_id)
                assert event.request_id not in self.ended
                self.ended.add(event.request_id)

    @rule(target=requests, call_id=CALL_IDS)
    def start_call(self, call_id: str) -> int:
        if call_id in self.calls:
            with pytest.raises(ValueError, match="already in flight"):
                self.protocol.start_call("t", {}, tool_call_id=call_id, deadline_ms=None)
            return 0
        request_id, _ = self.protocol.start_call("t", {}, tool_call_id=call_id, deadline_ms=None)
        if self.protocol.lost is None:
            self.calls[call_id] = request_id
        return request_id

    @rule(target=requests)
    def start_request(self) -> int:
        request_id, _ = self.protocol.start_request("tools.list", {})
        if self.protocol.lost is None:
            self.other.add(request_id)
        return request_id

    @rule(request_id=st.one_of(requests, st.integers(-1, 20)), error=st.booleans())
    def response(self, request_id: int, error: bool) -> None:
        line = _error_line(request_id) if error else _result_line(request_id)
        self._act(self.protocol.receive_line(line))

    @rule(call_id=CALL_IDS, seq=st.integers(0, 3))
    def progress(self, call_id: str, seq: int) -> None:
        self._act(self.protocol.receive_line(_progress(call_id, seq)))

    @rule(line=st.binary(max_size=20))
    def garbage(self, line: bytes) -> None:
        assert self.protocol.receive_line(line) == []

    @rule(call_id=CALL_IDS)
    def give_up(self, call_id: str) -> None:
        assert self.protocol.forget_call(call_id) == (call_id in self.calls)
        self.calls.pop(call_id, None)

    @rule()
    def lose(self) -> None:
        was_lost = self.protocol.lost is not None
        self._act(self.protocol.connection_lost("gone"))
        assert not self.calls
        assert not self.other
        assert was_lost or self.protocol.lost == "gone"

    @invariant()
    def pending_is_what_was_started_and_not_ended(self) -> None:
        assert self.protocol.pending_requests == len(self.calls) + len(self.other)
        for call_id in ("a", "b", "c"):
            assert self.protocol.is_pending(call_id) == (call_id in self.calls)


TestClientProtocol = ClientProtocolMachine.TestCase


def test_a_frame_limit_above_the_ceiling_holds_for_the_frame_too() -> None:
    """Under a frame limit above the default ceiling, text progress longer than
    the ceiling reaches its call: the frame is decoded under the line's limit."""
    protocol = ClientProtocol("s", max_frame_bytes=2 * MAX_FRAME_BYTES_CEILING)
    protocol.start_call("bash", {}, tool_call_id="c", deadline_ms=None)
    note = {"text": "x" * (MAX_FRAME_BYTES_CEILING + 1)}
    line = encode_progress_line("c", "text", note, seq=0, newline=False)
    (event,) = protocol.receive_line(line)
    assert isinstance(event, ProgressReceived)
    assert event.frame.body == note
    assert protocol.lines_unused == 0


def test_tools_listed_bounds_the_frames_of_the_tools_that_declare_it() -> None:
    """Rule 4: a declared max_frame_bytes refuses longer progress lines of that
    tool's calls (at most the client's own bound); a tool declaring none, or
    nonsense, is not bounded."""
    protocol = ClientProtocol("s", max_frame_bytes=1000)
    tools = [
        {"id": "small", "capabilities": {"max_frame_bytes": 10}},
        {"id": "huge", "capabilities": {"max_frame_bytes": 10**9}},
        {"id": "odd", "capabilities": {"max_frame_bytes": "ten"}},
        "not a tool",
    ]
    assert protocol.tools_listed({"tools": tools}) == tools
    for tool_id, call_id in (("small", "a"), ("huge", "b"), ("odd", "c")):
        protocol.start_call(tool_id, {}, tool_call_id=call_id, deadline_ms=None)
    body = {"delta": "x" * 40, "total_bytes": 40, "truncated": False, "gap": False}
    [refused] = protocol.receive_line(encode_progress_line("a", "chunk", body, newline=False))
    assert isinstance(refused, ProgressRefused)
    assert refused.limit == 10
    for call_id in ("b", "c"):
        [taken] = protocol.receive_line(encode_progress_line(call_id, "chunk", body, newline=False))
        assert isinstance(taken, ProgressReceived)


@pytest.mark.parametrize("result", [None, [], {"tools": "x"}, {"tool": []}])
def test_a_tools_list_result_without_a_tools_list_is_an_internal_error(result: Any) -> None:
    with pytest.raises(RemoteToolError, match=r"tools\.list result has no `tools` list") as caught:
        ClientProtocol("s").tools_listed(result)
    assert caught.value.wire == InternalErrorWire(detail="tools.list result has no `tools` list")


def test_bounds_and_timeouts_below_their_floor_are_refused() -> None:
    """Rule 5."""
    check_bounds(1, 1)
    check_timeout(None)
    check_timeout(0.001)
    with pytest.raises(ValueError, match="must be at least 1, got 0 and 5"):
        check_bounds(0, 5)
    with pytest.raises(ValueError, match="must be at least 1, got 5 and 0"):
        check_bounds(5, 0)
    for timeout in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
            check_timeout(timeout)


def test_timeouts_past_what_deadline_ms_carries_are_refused() -> None:
    """Rule 5: a timeout sent as ``deadline_ms`` (a u64 of milliseconds) that
    it cannot carry, infinity included, is a ``ValueError`` saying so, not an
    ``OverflowError`` or the encoder's error at the send."""
    check_timeout(1.8e16)
    assert deadline_ms_of(1.8e16) == 18_000_000_000_000_000_000
    for timeout in (float("inf"), 1e300, 2**64 / 1000, 10**30):
        with pytest.raises(ValueError, match=r"timeout must be at most .* got"):
            check_timeout(timeout)


def test_a_timeout_is_sent_in_whole_milliseconds_at_least_one() -> None:
    assert deadline_ms_of(None) is None
    assert deadline_ms_of(0.0001) == 1
    assert deadline_ms_of(2.5) == 2500


def test_a_request_that_timed_out_says_how_long_it_waited() -> None:
    failure = request_timed_out("tools.list", 0.2, 0.2345)
    assert failure.wire == TimeoutWire(tool_id="tools.list", elapsed_ms=234)
    assert failure.error().message == "tools.list got no answer within 0.2 s"
    assert failure.error().number == error_code_for(failure.wire)
