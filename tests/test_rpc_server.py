"""ServerProtocol and take_lines, the server's JSON-RPC rules without I/O: plain
function tests of each rule (reply bytes, codes and messages), a state machine
over any mix of requests, cancels, hooks, garbage and call ends, and one over a
call's queued frames taken as lines."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kigi_tool_protocol import (
    JsonRpcNotification,
    JsonRpcResponse,
    ToolCallProgressFrame,
    encode_progress_line,
    json_codec,
)
from kigi_tool_protocol._limits import U32_MAX, U64_MAX
from kigi_tool_protocol._progress_line import decode_progress_line
from kigi_tool_runtime._call._queue import CallQueue, QueuePolicy
from kigi_tool_runtime._tools._errors import ToolError
from kigi_tool_runtime._transport._rpc_server import (
    MAX_CALLS_IN_FLIGHT,
    CancelCall,
    Event,
    Reply,
    ServerProtocol,
    StartCall,
    lone_surrogate,
    progress_item_of,
    take_lines,
)
from kigi_tool_runtime._wire._split import OversizedLine

TOOLS = [{"id": "bash"}]


def _protocol(max_calls: int = MAX_CALLS_IN_FLIGHT) -> ServerProtocol:
    return ServerProtocol(["bash"], lambda: TOOLS, max_calls=max_calls)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def _call(call_id: str, request_id: Any = 1, **extra: Any) -> bytes:
    params = {"tool_call_id": call_id, "tool_id": "bash", "arguments": {"command": "true"}}
    return _line(
        {"jsonrpc": "2.0", "id": request_id, "method": "tool.call", "params": params} | extra
    )


def _reply(events: list[Event]) -> dict[str, Any]:
    """The one event, a Reply, parsed."""
    assert len(events) == 1, events
    event = events[0]
    assert isinstance(event, Reply), event
    assert event.line.endswith(b"\n")
    decoded: dict[str, Any] = json.loads(event.line)
    assert decoded["id"] == event.request_id
    return decoded


def test_garbage_gets_its_error_with_a_null_id() -> None:
    """Unparseable JSON is -32700, a non-object -32600, a line nested too deeply
    -32700, an oversized line -32018; all with a null id, all counted."""
    protocol = _protocol()
    reply = _reply(protocol.receive_line(b"this is not json"))
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    assert reply["error"]["message"].startswith("parse error: ")
    reply = _reply(protocol.receive_line(b"[1, 2]"))
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "must be a JSON object" in reply["error"]["message"]
    deep = b"[" * 100_000 + b"]" * 100_000
    reply = _reply(protocol.receive_line(b'{"jsonrpc": "2.0", "id": 1, "params": ' + deep))
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    assert reply["error"]["message"] == "parse error: nested too deeply"
    reply = _reply(protocol.receive_line(OversizedLine(size=5000, limit=100)))
    assert (reply["id"], reply["error"]["code"]) == (None, -32018)
    assert reply["error"]["data"] == {"code": "frame_too_large", "bytes": 5000, "limit": 100}
    assert protocol.receive_line(b"   ") == []  # a blank line is no message
    assert protocol.lines_rejected == 4


def test_bad_envelopes_are_invalid_requests_echoing_a_readable_id() -> None:
    protocol = _protocol()
    cases = [
        ({"jsonrpc": "1.0", "id": 7, "method": "tool.call", "params": {}}, 7,
         '`jsonrpc` must be "2.0", got "1.0"'),
        ({"id": 6, "method": "tool.call", "params": {}}, 6, '`jsonrpc` is missing'),
        ({"jsonrpc": "2.0", "id": 8, "method": "tool.call"}, 8,
         "`params` is missing; 'tool.call' takes an object of params"),
        ({"jsonrpc": "2.0", "id": True, "method": "tool.call", "params": {}}, None,
         "`id` must be a string or an integer"),
        ({"jsonrpc": "2.0", "id": 2**63, "method": "tool.call", "params": {}}, None,
         "`id` must be a string or an integer in the i64 range"),
        ({"jsonrpc": "2.0", "id": 9, "params": {}}, 9, "`method` is missing or not a string"),
        ({"jsonrpc": "2.0", "id": 10, "session_id": "", "method": "tools.list"}, 10,
         "`session_id` must be a non-empty string"),
    ]  # fmt: skip
    for message, echoed, problem in cases:
        reply = _reply(protocol.receive_line(_line(message)))
        assert (reply["id"], reply["error"]["code"]) == (echoed, -32600), message
        assert problem in reply["error"]["message"], reply
    assert protocol.lines_rejected == len(cases)


def test_methods_are_answered_or_named_unknown() -> None:
    protocol = _protocol()
    reply = _reply(protocol.receive_line(_line({"jsonrpc": "2.0", "id": "m", "method": "x.y"})))
    assert (reply["id"], reply["error"]["code"]) == ("m", -32601)
    assert reply["error"]["message"] == (
        "method not found: 'x.y'"
        " (methods: tools.list, tool.call, tool_call_request, tool.cancel, hook)"
    )
    listed = _reply(
        protocol.receive_line(_line({"jsonrpc": "2.0", "id": "l", "method": "tools.list"}))
    )
    assert listed["result"] == {"tools": TOOLS}
    # Notifications of unknown methods, tools.list as a notification and
    # responses are ignored; none is rejected.
    for message in (
        {"jsonrpc": "2.0", "method": "no.such.notification", "params": {}},
        {"jsonrpc": "2.0", "method": "tools.list"},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": 1, "message": "m"}},
    ):
        assert protocol.receive_line(_line(message)) == []
    assert protocol.lines_rejected == 1


def test_a_call_starts_then_its_ids_are_free_once_it_ends() -> None:
    protocol = _protocol()
    (start,) = protocol.receive_line(_call("c1", request_id=7, session_id="sess"))
    assert isinstance(start, StartCall)
    assert (start.request_id, start.session_id) == (7, "sess")
    assert start.params.tool_call_id == "c1"
    assert json.loads(bytes(start.params.arguments)) == {"command": "true"}
    assert protocol.in_flight() == {"c1": 7}
    # The same request id while it runs: refused with a null id.
    refusal = _reply(protocol.receive_line(_call("c2", request_id=7)))
    assert (refusal["id"], refusal["error"]["code"]) == (None, -32600)
    assert (
        refusal["error"]["message"] == "invalid request: id 7 is already used by a call in flight"
    )
    # The same call id under another request id: invalid_params naming it.
    again = _reply(protocol.receive_line(_call("c1", request_id=8)))
    assert again["id"] == 8
    assert again["error"]["message"] == "tool_call_id 'c1' is already in flight"
    assert again["error"]["data"]["details"] == {"path": "$.tool_call_id"}
    protocol.call_ended("c1")
    assert protocol.in_flight() == {}
    (restart,) = protocol.receive_line(_call("c1", request_id=7))
    assert isinstance(restart, StartCall)
    assert (protocol.calls_started, protocol.lines_rejected) == (2, 2)


def test_bad_calls_are_answered_and_never_start() -> None:
    protocol = _protocol()
    unknown = _line(
        {"jsonrpc": "2.0", "id": 11, "method": "tool.call",
         "params": {"tool_call_id": "c", "tool_id": "nope", "arguments": {}}}
    )  # fmt: skip
    reply = _reply(protocol.receive_line(unknown))
    assert reply["error"]["code"] == -32011
    assert reply["error"]["data"] == {"code": "tool_not_found", "tool_id": "nope"}
    assert reply["error"]["message"] == "no tool 'nope' here (tools: bash)"
    missing = _line(
        {"jsonrpc": "2.0", "id": 9, "method": "tool.call", "params": {"tool_id": "bash"}}
    )
    reply = _reply(protocol.receive_line(missing))
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"]["code"] == "invalid_params"
    assert "tool_call_id" in reply["error"]["message"]
    # A call without an id has nowhere to reply: counted, not answered.
    no_id = _line({"jsonrpc": "2.0", "method": "tool.call", "params": {}})
    assert protocol.receive_line(no_id) == []
    assert (protocol.calls_started, protocol.lines_rejected) == (0, 3)


def test_calls_past_the_in_flight_bound_are_refused() -> None:
    protocol = _protocol()
    for n in range(MAX_CALLS_IN_FLIGHT):
        assert isinstance(protocol.receive_line(_call(f"c{n}", request_id=n))[0], StartCall)
    reply = _reply(protocol.receive_line(_call("one-too-many", request_id="x")))
    assert reply["id"] == "x"
    assert reply["error"]["data"]["code"] == "custom"
    assert reply["error"]["data"]["subcode"] == "tool_busy"
    assert f"{MAX_CALLS_IN_FLIGHT} calls are already in flight" in reply["error"]["message"]
    protocol.call_ended("c0")
    assert isinstance(protocol.receive_line(_call("now-fits", request_id="y"))[0], StartCall)


def _hook(event: dict[str, Any], request_id: Any = None, call_id: str | None = None) -> bytes:
    params: dict[str, Any] = {"session_id": "sess_a", "event": event}
    if call_id is not None:
        params["call_id"] = call_id
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": "hook", "params": params}
    if request_id is not None:
        message["id"] = request_id
    return _line(message)


def test_cancels_name_only_calls_in_flight_and_requests_are_acknowledged() -> None:
    protocol = _protocol()
    for n in (1, 2):
        protocol.receive_line(_call(f"c{n}", request_id=n))
    # A Cancel hook notification: cancels that call, no reply.
    assert protocol.receive_line(_hook({"type": "Cancel"}, call_id="c1")) == [CancelCall("c1")]
    assert protocol.receive_line(_hook({"type": "Cancel"}, call_id="gone")) == []
    # tool.cancel as a request: the cancel, then the count.
    cancel = _line(
        {"jsonrpc": "2.0", "id": 5, "method": "tool.cancel", "params": {"tool_call_id": "c2"}}
    )
    first, ack = protocol.receive_line(cancel)
    assert first == CancelCall("c2")
    assert _reply([ack])["result"] == {"cancelled": 1}
    gone = _line(
        {"jsonrpc": "2.0", "id": 6, "method": "tool.cancel", "params": {"tool_call_id": "x"}}
    )
    assert _reply(protocol.receive_line(gone))["result"] == {"cancelled": 0}
    # SessionEnded cancels every call in flight.
    *cancels, ack = protocol.receive_line(_hook({"type": "SessionEnded"}, request_id="h"))
    assert set(cancels) == {CancelCall("c1"), CancelCall("c2")}
    assert _reply([ack])["result"] == {"cancelled": 2}
    assert protocol.cancel_all() == [CancelCall("c1"), CancelCall("c2")]


def test_bad_cancel_params_are_answered_only_for_requests() -> None:
    protocol = _protocol()
    reply = _reply(
        protocol.receive_line(
            _line({"jsonrpc": "2.0", "id": 4, "method": "hook", "params": {"event": {}}})
        )
    )
    assert reply["error"]["code"] == -32602
    assert reply["error"]["message"].startswith("invalid params for hook: ")
    reply = _reply(
        protocol.receive_line(
            _line({"jsonrpc": "2.0", "id": 5, "method": "tool.cancel", "params": {}})
        )
    )
    assert reply["error"]["message"].startswith("invalid params for tool.cancel: ")
    assert protocol.receive_line(_line({"jsonrpc": "2.0", "method": "hook", "params": 3})) == []
    assert protocol.lines_rejected == 3


def test_error_replies_echo_the_session_id_only_with_a_readable_id() -> None:
    """A reply answers in the request's session: its session_id is echoed on a
    result and on an error; a null-id reply carries none."""
    protocol = _protocol()
    listed = _reply(
        protocol.receive_line(
            _line({"jsonrpc": "2.0", "id": 1, "session_id": "sess_e", "method": "tools.list"})
        )
    )
    assert listed["session_id"] == "sess_e"
    unknown = _reply(
        protocol.receive_line(
            _line({"jsonrpc": "2.0", "id": 2, "session_id": "sess_e", "method": "x.y"})
        )
    )
    assert (unknown["session_id"], unknown["error"]["code"]) == ("sess_e", -32601)
    bad_params = _reply(
        protocol.receive_line(
            _line({"jsonrpc": "2.0", "id": 3, "session_id": "sess_e", "method": "hook",
                   "params": {"event": {}}})
        )
    )  # fmt: skip
    assert (bad_params["session_id"], bad_params["error"]["code"]) == ("sess_e", -32602)
    (start,) = protocol.receive_line(_call("c1", request_id=4, session_id="sess_e"))
    assert isinstance(start, StartCall)
    refusal = _reply(protocol.receive_line(_call("c2", request_id=4, session_id="sess_e")))
    assert refusal["id"] is None
    assert "session_id" not in refusal


def _deep_lines() -> list[bytes]:
    """Lines nested past what the decoder recurses: at the top, as one envelope
    value, and deep inside params and arguments."""
    head = b'{"jsonrpc":"2.0","id":5,"method":"tool.call","params":'
    call = b'{"tool_call_id":"deep","tool_id":"bash","arguments":{"command":"true","env":'
    lines = [b"[" * 1000, b"[" * 1000 + b"]" * 1000, b'{"a":' * 1000, b"[" * 200_000]
    lines += [b'{"jsonrpc":"2.0","id":' + b"[" * 1000, b'{"jsonrpc":' + b'{"a":' * 1000]
    lines += [head + b"[" * 1000, head + b'{"a":' * 1000 + b"1" + b"}" * 1000 + b"}"]
    lines += [head + call + b"[" * 5000 + b"]" * 5000 + b"}}}"]
    return lines


def test_lines_nested_too_deeply_each_get_one_null_id_error() -> None:
    """A line nested deeper than the decoder recurses (brackets, objects, deep
    inside params and arguments) gets exactly one rejected reply with a null id:
    -32600 when it is no JSON object, else -32700 "nested too deeply"; nothing
    starts, and a call in flight is untouched."""
    protocol = _protocol()
    (start,) = protocol.receive_line(_call("c1", request_id=1))
    assert isinstance(start, StartCall)
    not_an_object = "invalid request: a message must be a JSON object"
    too_deep = "parse error: nested too deeply"
    expected = [(-32600, not_an_object)] * 2 + [(-32700, too_deep), (-32600, not_an_object)]
    expected += [(-32700, too_deep)] * 5
    lines = _deep_lines()
    got = []
    for line in lines:
        reply = _reply(protocol.receive_line(line))
        assert reply["id"] is None
        got.append((reply["error"]["code"], reply["error"]["message"]))
    assert got == expected
    assert protocol.lines_rejected == len(lines)
    assert (protocol.calls_started, protocol.in_flight()) == (1, {"c1": 1})


def test_error_replies_quote_only_an_excerpt_and_decode_strictly() -> None:
    """A 2 M-character method of DEL characters and a 4 MB unknown tool id are
    answered in a few hundred bytes, not echoed; an empty session_id is refused
    and not echoed back; the SDK's own strict decoder reads every reply. An
    unknown key in a call's params, however large, is ignored."""
    protocol = _protocol()
    huge = "\x7f" * 2_000_000  # 12 MB escaped
    unknown_tool = _line(
        {"jsonrpc": "2.0", "id": 2, "method": "tool.call",
         "params": {"tool_call_id": "c1", "tool_id": "a" * 4_000_000, "arguments": {}}}
    )  # fmt: skip
    lines = [
        _line({"jsonrpc": "2.0", "id": 1, "method": huge, "params": {}}),
        unknown_tool,
        _line({"jsonrpc": "2.0", "id": 4, "method": "tools.list", "params": {}, "session_id": ""}),
    ]
    codes = []
    for line in lines:
        (event,) = protocol.receive_line(line)
        assert isinstance(event, Reply)
        assert len(event.line) < 2000, event.line[:300]
        reply = json_codec.decode_message(event.line, params=msgspec.Raw, result=msgspec.Raw)
        assert isinstance(reply, JsonRpcResponse)
        assert reply.error is not None
        assert reply.session_id is None
        assert reply.id == event.request_id
        codes.append((reply.id, reply.error.code))
    assert codes == [(1, -32601), (2, -32011), (4, -32600)]
    extra_key = _line(
        {"jsonrpc": "2.0", "id": 3, "method": "tool.call",
         "params": {"tool_call_id": "c2", "tool_id": "bash", "arguments": {}, huge: 1}}
    )  # fmt: skip
    (start,) = protocol.receive_line(extra_key)
    assert isinstance(start, StartCall)
    assert (start.request_id, start.params.tool_call_id) == (3, "c2")


# -- The state machine ----------------------------------------------------------

REQUEST_IDS = st.one_of(st.integers(0, 5), st.sampled_from(["a", "b"]))
CALL_IDS = st.sampled_from(["c0", "c1", "c2", "c3"])
GARBAGE = st.sampled_from(
    [
        b"not json",
        b"[]",
        b"{",
        b'{"jsonrpc": "2.0"}',
        b'{"jsonrpc": "1.0", "method": "tool.call", "params": {}}',
        b'{"jsonrpc": "2.0", "id": null, "method": "tool.call", "params": {}}',
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools.list"}',
        b'{"jsonrpc": "2.0", "id": 1, "result": 3}',
        b"\xff\xfe",
    ]
)


class ServerProtocolMachine(RuleBasedStateMachine):
    """Any sequence of requests, cancels, hooks, garbage lines and call ends:
    exactly one reply per request (a Reply, or a started call's final response,
    which the driver writes when the call ends), none for a well-formed
    notification, a CancelCall only for a call in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol = ServerProtocol(["bash"], lambda: TOOLS, max_calls=3)
        self.running: dict[str, Any] = {}  # call id -> the request id it answers
        self.answered = 0  # requests answered, calls that ended included
        self.requests = 0  # requests sent

    def _feed(self, line: bytes | OversizedLine, sender: str, request_id: Any = None) -> None:
        """``sender``: "request" (with a readable ``request_id``), "notification"
        (well formed) or "garbage"."""
        events = self.protocol.receive_line(line)
        replies = [e for e in events if isinstance(e, Reply)]
        starts = [e for e in events if isinstance(e, StartCall)]
        for event in events:
            if isinstance(event, CancelCall):
                assert event.call_id in self.running
        for reply in replies:
            assert json.loads(reply.line)["id"] == reply.request_id
        if sender == "request":
            self.requests += 1
            # Exactly one answer: a reply now, or a call whose final response
            # answers it when it ends.
            assert len(replies) + len(starts) == 1, events
            for reply in replies:
                if reply.request_id is None:  # only a duplicate of a running call's id
                    assert request_id in self.running.values()
                else:
                    assert reply.request_id == request_id
                self.answered += 1
        elif sender == "notification":
            assert not replies
            assert not starts
        else:
            assert not starts
            assert all(reply.rejected and reply.request_id is None for reply in replies)
        for start in starts:
            call_id = start.params.tool_call_id
            assert call_id not in self.running
            assert start.request_id not in self.running.values()
            self.running[call_id] = start.request_id

    @rule(call_id=CALL_IDS, request_id=REQUEST_IDS, known=st.booleans())
    def call(self, call_id: str, request_id: Any, known: bool) -> None:
        params = {"tool_call_id": call_id, "tool_id": "bash" if known else "zsh", "arguments": {}}
        line = _line({"jsonrpc": "2.0", "id": request_id, "method": "tool.call", "params": params})
        self._feed(line, "request", request_id)

    @rule(call_id=CALL_IDS, request_id=st.none() | REQUEST_IDS)
    def cancel(self, call_id: str, request_id: Any) -> None:
        message: dict[str, Any] = {
            "jsonrpc": "2.0", "method": "tool.cancel", "params": {"tool_call_id": call_id}
        }  # fmt: skip
        if request_id is not None:
            message["id"] = request_id
        self._feed(_line(message), "notification" if request_id is None else "request", request_id)

    @rule(
        call_id=CALL_IDS,
        request_id=st.none() | REQUEST_IDS,
        kind=st.sampled_from(["Cancel", "SessionEnded", "Bogus"]),
    )
    def hook(self, call_id: str, request_id: Any, kind: str) -> None:
        line = _hook({"type": kind}, request_id=request_id, call_id=call_id)
        self._feed(line, "notification" if request_id is None else "request", request_id)

    @rule(request_id=REQUEST_IDS, method=st.sampled_from(["tools.list", "nope"]))
    def other_request(self, request_id: Any, method: str) -> None:
        line = _line({"jsonrpc": "2.0", "id": request_id, "method": method})
        self._feed(line, "request", request_id)

    @rule(method=st.sampled_from(["tools.list", "nope", "tool_call_progress"]))
    def notification(self, method: str) -> None:
        self._feed(_line({"jsonrpc": "2.0", "method": method, "params": {}}), "notification")

    @rule(line=GARBAGE)
    def garbage(self, line: bytes) -> None:
        self._feed(line, "garbage")

    @rule()
    def oversized(self) -> None:
        self._feed(OversizedLine(size=10**6, limit=10), "garbage")

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def call_ends(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[call_id]
        self.protocol.call_ended(call_id)
        self.answered += 1  # the driver writes the call's final response

    @invariant()
    def every_request_is_answered_or_running(self) -> None:
        assert self.answered + len(self.running) == self.requests
        assert self.protocol.in_flight() == self.running
        assert self.protocol.calls_in_flight <= 3


TestServerProtocol = ServerProtocolMachine.TestCase


def test_events_are_plain_values() -> None:
    """Events compare by value and a Reply's line is bytes ready to write."""
    protocol = _protocol()
    (start,) = protocol.receive_line(_call("c", request_id="r"))
    assert start == StartCall("r", None, start.params)
    assert isinstance(start.params.arguments, msgspec.Raw)


# -- A call's lines ---------------------------------------------------------------

_Queue = CallQueue[tuple[str, msgspec.Raw], bytes]


def _queue(budget: int = 10**6) -> _Queue:
    return CallQueue(QueuePolicy.drop_oldest_when_stalled(budget))


class CallLinesMachine(RuleBasedStateMachine):
    """Any mix of offers (stalled or not, under any budget), takes (of any
    size) and the final response: the lines carry seq without holes, every
    drop on the next line, the final response last and once."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: _Queue | None = None
        self.pushed = 0  # frames queued, numbered in their bodies
        self.next_seq = 0
        self.last_taken = -1  # number of the last frame taken
        self.reported = 0
        self.finished = False

    @initialize(budget=st.integers(1, 120))
    def start(self, budget: int) -> None:
        self.queue = _queue(budget)

    @precondition(lambda self: self.queue is not None and not self.queue.finished)
    @rule(size=st.integers(0, 40), stalled=st.booleans())
    def offer(self, size: int, stalled: bool) -> None:
        assert self.queue is not None
        body = msgspec.Raw(json.dumps([self.pushed, "x" * size]).encode())
        if self.queue.offer(("k", body), len(body), stalled=stalled):
            self.pushed += 1

    @precondition(lambda self: self.queue is not None and not self.queue.finished)
    @rule()
    def finish(self) -> None:
        assert self.queue is not None
        self.queue.finish(b'{"final":true}\n')

    @precondition(lambda self: self.queue is not None and not self.finished)
    @rule(max_bytes=st.integers(1, 400))
    def take(self, max_bytes: int) -> None:
        assert self.queue is not None
        out = bytearray(b"")
        queued = len(self.queue)
        taken, finished = take_lines(self.queue, "c", "sess", max_bytes, out)
        lines = bytes(out).splitlines()
        if finished:
            assert lines[-1] == b'{"final":true}'
            lines = lines[:-1]
            self.finished = True
            assert not len(self.queue)
        assert len(lines) == taken <= queued
        if queued:
            assert taken >= 1  # every turn moves at least one frame
        for line in lines:
            note = decode_progress_line(line)
            assert isinstance(note, JsonRpcNotification)
            assert note.seq == self.next_seq
            assert note.session_id == "sess"
            self.next_seq += 1
            frame = json.loads(line)["params"]
            number = frame["body"][0]
            assert number > self.last_taken
            skipped = number - self.last_taken - 1
            assert frame.get("dropped_count", 0) == skipped
            self.reported += skipped
            self.last_taken = number

    @precondition(lambda self: self.finished)
    @rule()
    def ended(self) -> None:
        # The driver takes nothing more from a finished queue.
        assert self.queue is not None
        assert not len(self.queue)
        assert self.queue.ended

    @invariant()
    def drops_are_accounted(self) -> None:
        if self.queue is None:
            return
        queued = len(self.queue)
        assert self.next_seq + self.queue.dropped + queued == self.pushed
        assert self.reported <= self.queue.dropped


TestCallLines = CallLinesMachine.TestCase


def test_lines_are_the_served_wire() -> None:
    """Frames go out as tool_call_progress notifications in wire order, with
    session_id only when the call has one and dropped_count only when set."""
    queue = _queue()
    body = msgspec.Raw(b'{"delta":"hi","total_bytes":2,"truncated":false,"gap":false}')
    assert queue.offer(("bash_output_chunk", body), len(body))
    out = bytearray()
    assert take_lines(queue, "c", None, 10**6, out) == (1, False)
    assert bytes(out) == (
        b'{"jsonrpc":"2.0","seq":0,"method":"tool_call_progress","params":{"tool_call_id":"c",'
        b'"kind":"bash_output_chunk","body":{"delta":"hi","total_bytes":2,"truncated":false,'
        b'"gap":false}}}\n'
    )
    text = msgspec.Raw(b'{"text":"x"}')
    queue = _queue(len(text))
    for _ in range(3):
        assert queue.offer(("text", text), len(text))
        assert take_lines(queue, "c", "s", 10**6, bytearray()) == (1, False)
    for _ in range(3):
        # Stalled: each offer drops the one before.
        assert queue.offer(("text", text), len(text), stalled=True)
    out = bytearray()
    assert take_lines(queue, "c", "s", 10**6, out) == (1, False)
    assert bytes(out) == (
        b'{"jsonrpc":"2.0","session_id":"s","seq":3,"method":"tool_call_progress",'
        b'"params":{"tool_call_id":"c","kind":"text","body":{"text":"x"},"dropped_count":2}}\n'
    )


def test_batched_lines_are_the_same_bytes_as_encode_progress_line() -> None:
    """A batch equals encode_progress_line frame by frame, numbers seq from 0,
    reports drops on the next frame, and puts the final response last."""
    queue = _queue(1)
    bodies = [msgspec.Raw(msgspec.json.encode({"delta": f"é{n}\u2028"})) for n in range(5)]
    for body in bodies[:2]:
        assert queue.offer(("k", body), len(body), stalled=True)
    assert queue.dropped == 1
    batch = bytearray()
    assert take_lines(queue, "c", "sess_q", 10**6, batch) == (1, False)
    assert queue.offer(("k", bodies[2]), len(bodies[2]))
    assert queue.offer(("k", bodies[3]), len(bodies[3]), stalled=True)  # the oldest goes
    queue.finish(b'{"final":true}\n')
    assert take_lines(queue, "c", "sess_q", 10**6, batch) == (1, True)
    assert bytes(batch) == (
        encode_progress_line("c", "k", bodies[1], seq=0, session_id="sess_q", dropped_count=1)
        + encode_progress_line("c", "k", bodies[3], seq=1, session_id="sess_q", dropped_count=1)
        + b'{"final":true}\n'
    )


def test_the_final_line_waits_for_the_last_frame() -> None:
    """A turn that stops at its byte limit leaves the final response for a later
    turn, after the frames still queued."""
    queue = _queue()
    body = msgspec.Raw(b'"' + b"x" * 100 + b'"')
    for _ in range(3):
        assert queue.offer(("k", body), len(body))
    queue.finish(b"end\n")
    out = bytearray()
    assert take_lines(queue, "c", None, 50, out) == (1, False)
    assert take_lines(queue, "c", None, 10**6, out) == (2, True)
    assert out.endswith(b"}}\nend\n")
    assert take_lines(queue, "c", None, 10**6, out) == (0, False)


_KINDS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=8)


@given(
    kind=_KINDS,
    session=st.none() | st.text(min_size=1, max_size=8),
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3),
        max_leaves=6,
    ),
    slack=st.integers(-2, 2),
)
def test_a_frames_size_is_its_widest_line(
    kind: str, session: str | None, body: Any, slack: int
) -> None:
    """The declared limit is held against the line as sent with the widest seq
    and drop count, byte for byte: a frame that long passes, one byte more ends
    the call with frame_too_large naming that size."""
    session = None if session is None or _has_surrogate(session) else session
    frame = ToolCallProgressFrame(tool_call_id="c", kind=kind, body=body)
    widest = len(
        encode_progress_line(
            "c",
            kind,
            msgspec.Raw(msgspec.json.encode(body)),
            seq=U64_MAX,
            session_id=session,
            dropped_count=U32_MAX,
            newline=False,
        )
    )
    limit = widest + slack
    item_of = progress_item_of("c", session, limit)
    if slack >= 0:
        (got_kind, got_body), size = item_of(frame)
        assert (got_kind, bytes(got_body), size) == (kind, msgspec.json.encode(body), len(got_body))
        assert item_of(frame)[0] == (got_kind, got_body)  # the kind's envelope, kept
    else:
        with pytest.raises(ToolError) as caught:
            item_of(frame)
        assert caught.value.kind == "frame_too_large"
        assert str(widest) in caught.value.message
    # Without a limit, nothing is measured.
    assert progress_item_of("c", session, None)(frame)[1] == len(msgspec.json.encode(body))


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def test_a_frame_json_cannot_carry_ends_the_call_naming_its_kind() -> None:
    frame = ToolCallProgressFrame(tool_call_id="c", kind="std\udc80", body=1)
    with pytest.raises(ToolError) as caught:
        progress_item_of("c", None, None)(frame)
    assert caught.value.kind == "internal_error"
    assert "'std\\udc80'" in caught.value.message


# -- lone surrogate escapes ------------------------------------------------------

_HIGH = st.integers(0xD800, 0xDBFF).map(chr)
_LOW = st.integers(0xDC00, 0xDFFF).map(chr)
_PLAIN = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=4)


@given(st.lists(st.one_of(_PLAIN, _HIGH, _LOW, st.just("\\")), max_size=12))
def test_lone_surrogate_finds_each_unpaired_escape_and_only_those(pieces: list[str]) -> None:
    """A JSON string written with ``\\uXXXX`` escapes: ``lone_surrogate`` finds
    one exactly when the text holds a surrogate no neighbour pairs, and with each
    lone one replaced by U+FFFD the line decodes to what UTF-16 decoding with
    replacement makes of the text (pairs joined, lone halves replaced)."""
    text = "".join(pieces)
    line = json.dumps({"id": 3, "s": text}).encode()
    units = text.encode("utf-16-le", "surrogatepass")
    expected = units.decode("utf-16-le", "replace")
    found = lone_surrogate(line)
    if not _has_lone(text):
        assert found is None
        assert msgspec.json.decode(line)["s"] == expected
        return
    assert found is not None
    offset, escape, readable = found
    assert line[offset : offset + 6].decode() == escape
    assert 0xD800 <= int(escape[2:], 16) <= 0xDFFF
    assert msgspec.json.decode(readable) == {"id": 3, "s": expected}


def _has_lone(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point not part of a high-low pair."""
    at = 0
    while at < len(text):
        char = text[at]
        paired = at + 1 < len(text) and "\udc00" <= text[at + 1] <= "\udfff"
        if "\ud800" <= char <= "\udbff" and paired:
            at += 2
            continue
        if "\ud800" <= char <= "\udfff":
            return True
        at += 1
    return False


def test_a_request_with_a_lone_surrogate_is_answered_with_its_id() -> None:
    """A lone surrogate escape (which the decoder calls truncated input) gets a
    -32700 that names the escape and echoes the request's id and session."""
    protocol = _protocol()
    line = (
        b'{"jsonrpc":"2.0","id":"r-9","session_id":"s1","method":"tool.call",'
        b'"params":{"tool_id":"bash","tool_call_id":"c1","arguments":{"command":"echo \\ud800"}}}'
    )
    events = protocol.receive_line(line)
    reply = _reply(events)
    assert reply["id"] == "r-9"
    assert reply["session_id"] == "s1"
    assert reply["error"]["code"] == -32700
    message = reply["error"]["message"]
    assert "\\ud800" in message
    assert "lone UTF-16 surrogate" in message
    assert "truncated" not in message
    assert protocol.calls_in_flight == 0
    assert protocol.lines_rejected == 1


def test_a_lone_surrogate_in_the_id_itself_leaves_the_id_null() -> None:
    """An id holding the surrogate is not the sender's id once replaced: null."""
    reply = _reply(_protocol().receive_line(b'{"jsonrpc":"2.0","id":"a\\udc00","method":"x"}'))
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert "\\udc00" in reply["error"]["message"]
