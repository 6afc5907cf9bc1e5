"""The JSON-RPC server, driven through a real `kigi-stream serve` process over pipes
(and, for tools of its own, in process over a socket pair)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kigi_tool_protocol import (
    CustomProgress,
    JsonRpcResponse,
    PartialResultPayload,
    TextProgress,
    ToolCallResult,
    ToolCapabilities,
    json_codec,
)
from kigi_tool_runtime import (
    CallProgress,
    Client,
    RemoteToolError,
    Server,
    ShellTool,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
)
from kigi_tool_runtime._transport._rpc_server import MAX_CALLS_IN_FLIGHT
from kigi_tool_runtime._transport._server import (
    CALL_QUEUE_BYTES,
    MAX_CONTROL_BYTES,
    MAX_CONTROL_LINES,
    SERVER_CANCEL_MESSAGE,
    WRITER_STALL_S,
    _Outbox,
    _Writer,
    progress_line,
)

#: Generous bound for any single expected line: a stuck server fails the test
#: instead of hanging it; never a timing assertion.
LINE_WAIT_S = 60.0


class ServeProcess:
    """A `kigi-stream serve` child with line-level helpers."""

    def __init__(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kigi_tool_runtime", "serve", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buf = b""

    def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def line(self) -> dict[str, Any]:
        deadline = time.monotonic() + LINE_WAIT_S
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._fd], [], [], max(left, 0))
            assert ready, "the server wrote no line in time"
            chunk = os.read(self._fd, 1 << 20)
            assert chunk, f"the server closed its output; buffered: {self._buf[:200]!r}"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        decoded: dict[str, Any] = json.loads(line)
        return decoded

    def until_response(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        progress: list[dict[str, Any]] = []
        while True:
            message = self.line()
            if "id" in message:
                return progress, message
            progress.append(message)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=LINE_WAIT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        assert self.proc.stdin is not None
        self.proc.stdout.close()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def _call(call_id: str, command: Any, request_id: Any = 1, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tool.call",
        "params": {
            "tool_call_id": call_id,
            "tool_id": "bash",
            "arguments": {"command": command},
            **params,
        },
    }


@pytest.fixture
def server() -> Any:
    proc = ServeProcess()
    yield proc
    proc.kill()


def test_a_call_streams_progress_then_its_result(server: ServeProcess) -> None:
    """A call yields seq-numbered progress from 0 and one result with the outcome."""
    server.send(_call("c1", "printf one; sleep 0.3; printf two"))
    progress, response = server.until_response()
    assert [p["seq"] for p in progress] == list(range(len(progress)))
    assert all(p["method"] == "tool_call_progress" for p in progress)
    assert "".join(p["params"]["body"]["delta"] for p in progress) == "onetwo"
    assert all("dropped_count" not in p["params"] for p in progress)
    assert response["id"] == 1
    value = response["result"]["output"]["value"]
    assert (value["exit_code"], value["output"]) == (0, "onetwo")


def test_a_line_nested_too_deeply_is_a_parse_error(server: ServeProcess) -> None:
    """A line nested past the parser's depth gets -32700 and the server goes on."""
    deep = "[" * 100_000 + "]" * 100_000
    server.send(('{"jsonrpc": "2.0", "id": 1, "method": "tool.call", "params": ' + deep).encode())
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    assert reply["error"]["message"] == "parse error: nested too deeply"
    server.send(_call("c1", "printf ok"))
    _, response = server.until_response()
    assert response["result"]["output"]["value"]["output"] == "ok"


def test_malformed_lines_get_errors_and_the_server_keeps_serving(server: ServeProcess) -> None:
    """Garbage, non-objects, bad envelopes, unknown methods and bad params each get
    their JSON-RPC error; a valid call afterwards still works."""
    server.send(b"this is not json")
    reply = server.line()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert reply["error"]["message"].startswith("parse error: ")

    server.send(b"[1, 2]")
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "must be a JSON object" in reply["error"]["message"]

    server.send({"jsonrpc": "1.0", "id": 7, "method": "tool.call", "params": {}})
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (7, -32600)
    assert '`jsonrpc` must be "2.0", got "1.0"' in reply["error"]["message"]

    server.send({"jsonrpc": "2.0", "id": 8, "method": "tool.call"})
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (8, -32600)
    assert "`params` is missing; 'tool.call' takes an object of params" in reply["error"]["message"]

    server.send({"jsonrpc": "2.0", "id": True, "method": "tool.call", "params": {}})
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "`id` must be a string or an integer" in reply["error"]["message"]

    server.send({"jsonrpc": "2.0", "id": "m", "method": "no.such.method", "params": {}})
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == ("m", -32601)
    assert reply["error"]["message"] == (
        "method not found: 'no.such.method'"
        " (methods: tools.list, tool.call, tool_call_request, tool.cancel, hook)"
    )

    server.send({"jsonrpc": "2.0", "id": "n", "method": "tools/list"})
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == ("n", -32601)
    assert "(methods: tools.list, " in reply["error"]["message"]

    server.send({"jsonrpc": "2.0", "id": "l", "method": "tools.list"})  # params left out
    reply = server.line()
    assert [tool["id"] for tool in reply["result"]["tools"]] == ["bash"], reply

    server.send({"jsonrpc": "2.0", "id": 9, "method": "tool.call", "params": {"tool_id": "bash"}})
    reply = server.line()
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"]["code"] == "invalid_params"
    assert "tool_call_id" in reply["error"]["message"]

    server.send(_call("c2", "true", request_id=10) | {})
    reply = server.line()
    assert "result" in reply, reply

    bad_tool = _call("c3", "true", request_id=11)
    bad_tool["params"]["tool_id"] = "nope"
    server.send(bad_tool)
    reply = server.line()
    assert reply["error"]["code"] == -32011
    assert reply["error"]["data"] == {"code": "tool_not_found", "tool_id": "nope"}

    bad_args = _call("c4", 5, request_id=12)
    server.send(bad_args)
    reply = server.line()
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"]["code"] == "invalid_params"

    server.send({"jsonrpc": "2.0", "method": "no.such.notification", "params": {}})
    server.send(_call("c5", "echo fine", request_id=13))
    progress, response = server.until_response()
    assert response["id"] == 13
    assert "".join(p["params"]["body"]["delta"] for p in progress) == "fine\n"


def test_an_oversized_line_is_rejected_without_being_held() -> None:
    """A line past --max-frame-bytes gets frame_too_large (-32018, id null) with its
    full size, the server's memory does not grow by it, and serving goes on."""
    proc = ServeProcess("--max-frame-bytes", "4096")
    try:
        proc.send({"jsonrpc": "2.0", "id": 0, "method": "tools.list", "params": {}})
        assert proc.line()["id"] == 0
        size = 64 * 1024 * 1024
        assert proc.proc.stdin is not None
        chunk = b"x" * (1 << 20)
        for _ in range(size // len(chunk)):
            proc.proc.stdin.write(chunk)
        proc.proc.stdin.write(b"\n")
        proc.proc.stdin.flush()
        reply = proc.line()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32018
        assert reply["error"]["data"] == {"code": "frame_too_large", "bytes": size, "limit": 4096}
        peak_kib = _status_kib(proc.proc.pid, "VmHWM")
        assert peak_kib < 48 * 1024, f"server peaked at {peak_kib} KiB for a {size}-byte line"
        proc.send(_call("c1", "echo ok"))
        _, response = proc.until_response()
        assert response["result"]["output"]["value"]["output"] == "ok\n"
    finally:
        proc.kill()


def test_end_of_input_mid_call_cancels_and_exits_cleanly(server: ServeProcess) -> None:
    """Closing the server's input mid-call ends the call with a cancelled error
    (the server's own wording), then the server exits 0."""
    server.send(_call("c1", "echo started; sleep 60"))
    first = server.line()
    assert first["params"]["body"]["delta"] == "started\n"
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    _, response = server.until_response()
    assert response["error"]["code"] == -32603
    assert response["error"]["message"] == SERVER_CANCEL_MESSAGE
    assert response["error"]["data"] == {"code": "cancelled", "tool_id": "bash"}
    assert server.proc.wait(timeout=LINE_WAIT_S) == 0


def test_hook_cancel_notification_cancels_only_that_call(server: ServeProcess) -> None:
    """A hook Cancel notification naming one call cancels it; the other call finishes."""
    server.send(_call("slow", "echo s; sleep 60", request_id=1))
    server.send(_call("other", "echo o; sleep 0.5; echo done", request_id=2))
    server.send(
        {
            "jsonrpc": "2.0",
            "session_id": "sess_a",
            "method": "hook",
            "params": {
                "session_id": "sess_a",
                "tool_id": "bash",
                "call_id": "slow",
                "event": {"type": "Cancel"},
            },
        }
    )
    responses: dict[Any, dict[str, Any]] = {}
    while len(responses) < 2:
        message = server.line()
        if "id" in message:
            responses[message["id"]] = message
    assert responses[1]["error"]["data"] == {"code": "cancelled", "tool_id": "bash"}
    assert responses[2]["result"]["output"]["value"]["output"] == "o\ndone\n"


def test_tool_cancel_request_is_acknowledged(server: ServeProcess) -> None:
    """`tool.cancel` with a tool_call_id cancels the call and answers how many it hit."""
    server.send(_call("slow", "echo s; sleep 60", request_id=1))
    assert server.line()["params"]["body"]["delta"] == "s\n"
    server.send(
        {"jsonrpc": "2.0", "id": 2, "method": "tool.cancel", "params": {"tool_call_id": "slow"}}
    )
    replies: dict[Any, dict[str, Any]] = {}
    while len(replies) < 2:
        message = server.line()
        replies[message["id"]] = message
    assert replies[2]["result"] == {"cancelled": 1}
    assert replies[1]["error"]["data"]["code"] == "cancelled"
    server.send(
        {"jsonrpc": "2.0", "id": 3, "method": "tool.cancel", "params": {"tool_call_id": "gone"}}
    )
    assert server.line()["result"] == {"cancelled": 0}


def test_session_ended_cancels_every_call_and_session_id_is_echoed(
    server: ServeProcess,
) -> None:
    """Messages carry the request's session_id back; a SessionEnded hook request
    cancels every call in flight and answers how many."""
    for n in (1, 2):
        server.send(_call(f"c{n}", "echo up; sleep 60", request_id=n) | {"session_id": "sess_z"})
    firsts = [server.line(), server.line()]
    assert {f["params"]["tool_call_id"] for f in firsts} == {"c1", "c2"}
    assert all(f["session_id"] == "sess_z" for f in firsts)
    server.send(
        {
            "jsonrpc": "2.0",
            "id": "h",
            "method": "hook",
            "params": {"session_id": "sess_z", "event": {"type": "SessionEnded"}},
        }
    )
    replies: dict[Any, dict[str, Any]] = {}
    while len(replies) < 3:
        message = server.line()
        replies[message["id"]] = message
    assert replies["h"]["result"] == {"cancelled": 2}
    for n in (1, 2):
        assert replies[n]["session_id"] == "sess_z"
        assert replies[n]["error"]["data"]["code"] == "cancelled"


def test_a_bad_hook_is_answered_with_invalid_params(server: ServeProcess) -> None:
    """A hook request whose params are not a HookFrame gets -32602 naming the field."""
    server.send({"jsonrpc": "2.0", "id": 4, "method": "hook", "params": {"event": {}}})
    reply = server.line()
    assert reply["error"]["code"] == -32602
    assert reply["error"]["message"].startswith("invalid params for hook: ")


def test_duplicate_call_id_in_flight_is_refused(server: ServeProcess) -> None:
    """A second call reusing an in-flight tool_call_id gets invalid_params naming it."""
    server.send(_call("same", "echo a; sleep 60", request_id=1))
    assert server.line()["params"]["tool_call_id"] == "same"
    server.send(_call("same", "true", request_id=2))
    reply = server.line()
    assert reply["id"] == 2
    assert reply["error"]["message"] == "tool_call_id 'same' is already in flight"


def test_a_request_id_in_flight_is_refused_with_a_null_id(server: ServeProcess) -> None:
    """A second call reusing the id of a call in flight gets -32600 with id null
    (so it cannot be read as the first call's reply), and the first call goes on."""
    server.send(_call("first", "echo a; sleep 0.3; echo b", request_id=7))
    assert server.line()["params"]["tool_call_id"] == "first"
    server.send(_call("second", "echo never", request_id=7))
    refusal = server.line()
    assert refusal["id"] is None
    assert refusal["error"]["code"] == -32600
    assert refusal["error"]["message"] == (
        "invalid request: id 7 is already used by a call in flight"
    )
    rest = [server.line(), server.line()]
    assert rest[0]["params"]["body"]["delta"] == "b\n"
    assert rest[1]["id"] == 7
    assert rest[1]["result"]["tool_call_id"] == "first"
    server.send(_call("third", "true", request_id=7))
    assert server.line()["result"]["tool_call_id"] == "third"


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


FLOOD_BYTES = 100 * 1024 * 1024

FLOOD = (
    "import os, sys\n"
    "block = (b'0123456789abcdef' * 4096)\n"  # 64 KiB
    f"for _ in range({FLOOD_BYTES} // len(block)):\n"
    "    os.write(1, block)\n"
    "open(sys.argv[1], 'w').close()\n"
)


@pytest.mark.slow
def test_a_reader_that_stops_reading_keeps_server_memory_flat(tmp_path: Path) -> None:
    """While the server's output is not read, a 100 MB flood runs to the end with the
    server's peak memory bounded; once the reader counts as stalled, frames are
    dropped and counted on a later frame, and the final result arrives with every
    byte counted."""
    done = tmp_path / "done"
    proc = ServeProcess()
    try:
        proc.send({"jsonrpc": "2.0", "id": 0, "method": "tools.list", "params": {}})
        assert proc.line()["id"] == 0
        base_kib = _status_kib(proc.proc.pid, "VmHWM")
        proc.send(_call("flood", [sys.executable, "-c", FLOOD, str(done)]))
        deadline = time.monotonic() + 240
        while not done.exists():
            assert time.monotonic() < deadline, "the flood did not finish while unread"
            time.sleep(0.2)
        # Stay stopped well past the stall threshold: the server must stop waiting
        # for room and drop (counted) while nobody reads. A generous wait, not a
        # timing assertion: reading earlier would only make the test weaker.
        time.sleep(3 * WRITER_STALL_S + 1)
        peak_kib = _status_kib(proc.proc.pid, "VmHWM")
        progress, response = proc.until_response()
    finally:
        proc.kill()
    growth_mib = (peak_kib - base_kib) / 1024
    assert growth_mib < 40, f"server memory grew {growth_mib:.0f} MiB for a 100 MiB flood"
    dropped = [p["params"].get("dropped_count", 0) for p in progress]
    assert sum(dropped) > 0
    assert [p["seq"] for p in progress] == list(range(len(progress)))
    value = response["result"]["output"]["value"]
    assert value["total_bytes"] == FLOOD_BYTES
    assert value["exit_code"] == 0
    assert progress[-1]["params"]["body"]["total_bytes"] == FLOOD_BYTES


def test_progress_line_is_the_served_wire() -> None:
    """progress_line writes the notification in wire order, with dropped_count only when set."""
    body = {"delta": "hi", "total_bytes": 2, "truncated": False, "gap": False}
    assert progress_line("c", 0, "bash_output_chunk", body) == (
        b'{"jsonrpc":"2.0","seq":0,"method":"tool_call_progress","params":{"tool_call_id":"c",'
        b'"kind":"bash_output_chunk","body":{"delta":"hi","total_bytes":2,"truncated":false,'
        b'"gap":false}}}\n'
    )
    line = progress_line("c", 3, "text", {"text": "x"}, session_id="s", dropped_count=2)
    assert line == (
        b'{"jsonrpc":"2.0","session_id":"s","seq":3,"method":"tool_call_progress",'
        b'"params":{"tool_call_id":"c","kind":"text","body":{"text":"x"},"dropped_count":2}}\n'
    )


def test_batched_frames_are_the_same_bytes_as_progress_line() -> None:
    """The writer's batch encoding equals progress_line frame by frame, numbers seq
    from 0, reports drops on the next frame, and puts the final response last."""
    outbox = _Outbox("c", "sess_q")
    bodies = [msgspec.Raw(msgspec.json.encode({"delta": f"é{n}\u2028"})) for n in range(5)]
    for body in bodies[:2]:
        assert outbox.push("k", body, budget=10**6) == 0
    batch = bytearray()
    assert outbox.take(10**6, batch) == (2, False)
    assert outbox.push("k", bodies[2], budget=1) == 0
    assert outbox.push("k", bodies[3], budget=1) == 1  # the oldest queued frame goes
    outbox.final = b'{"final":true}\n'
    assert outbox.take(10**6, batch) == (1, True)
    assert bytes(batch) == (
        progress_line("c", 0, "k", bodies[0], "sess_q")
        + progress_line("c", 1, "k", bodies[1], "sess_q")
        + progress_line("c", 2, "k", bodies[3], "sess_q", dropped_count=1)
        + b'{"final":true}\n'
    )


def test_server_rejects_bad_configuration() -> None:
    """Duplicate tool ids and non-positive bounds are ValueErrors naming the problem."""
    with pytest.raises(ValueError, match="two tools have the id 'bash'"):
        Server([ShellTool(), ShellTool()])
    with pytest.raises(ValueError, match="must be at least 1, got 0 and"):
        Server([ShellTool()], max_frame_bytes=0)


def test_calls_past_the_in_flight_bound_are_refused(server: ServeProcess) -> None:
    """The call past MAX_CALLS_IN_FLIGHT gets a custom tool_busy error; the others run."""
    for n in range(MAX_CALLS_IN_FLIGHT):
        server.send(_call(f"c{n}", "sleep 60", request_id=n))
    server.send(_call("one-too-many", "true", request_id="x"))
    reply = server.line()
    assert reply["id"] == "x"
    assert reply["error"]["data"]["code"] == "custom"
    assert reply["error"]["data"]["subcode"] == "tool_busy"
    assert f"{MAX_CALLS_IN_FLIGHT} calls are already in flight" in reply["error"]["message"]
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    cancelled = [server.line() for _ in range(MAX_CALLS_IN_FLIGHT)]
    assert {r["error"]["data"]["code"] for r in cancelled} == {"cancelled"}
    assert server.proc.wait(timeout=LINE_WAIT_S) == 0


def test_a_garbage_flood_with_no_reader_keeps_memory_bounded(server: ServeProcess) -> None:
    """A peer that floods bad lines and does not read: the server stops reading once
    MAX_CONTROL_LINES replies wait, so its memory stays flat; every line is answered."""
    server.send({"jsonrpc": "2.0", "id": 0, "method": "tools.list", "params": {}})
    assert server.line()["id"] == 0
    base_kib = _status_kib(server.proc.pid, "VmHWM")
    count = 200 * MAX_CONTROL_LINES
    errors: list[BaseException] = []

    def flood() -> None:
        try:
            assert server.proc.stdin is not None
            server.proc.stdin.write(b"x\n" * count)
            server.proc.stdin.flush()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writer = threading.Thread(target=flood)
    writer.start()
    time.sleep(2)  # the server fills its output and stops reading; nothing reads it
    peak_kib = _status_kib(server.proc.pid, "VmHWM")
    codes = [server.line()["error"]["code"] for _ in range(count)]
    writer.join(timeout=LINE_WAIT_S)
    assert not errors
    assert codes == [-32700] * count
    growth_mib = (peak_kib - base_kib) / 1024
    assert growth_mib < 8, f"server memory grew {growth_mib:.1f} MiB while unread"


def test_bounds_are_sane() -> None:
    """The per-call queue holds many full frames, and the in-flight bound is finite."""
    assert CALL_QUEUE_BYTES >= 16 * 16 * 1024
    assert 1 <= MAX_CALLS_IN_FLIGHT <= 1024


class _Lone(msgspec.Struct, forbid_unknown_fields=True):
    where: str  # "kind", "payload" or "" (nowhere)


#: A lone surrogate: a Python str may hold it, no JSON encoder can write it.
_LONE_SURROGATE = "\ud800"


class _LoneTool(Tool[_Lone]):
    """Yields one text frame, then one custom frame with a lone surrogate in its
    subkind or its payload (or nowhere), then a result."""

    id = "lone"
    args_type = _Lone

    async def execute(self, ctx: ToolContext, args: _Lone) -> AsyncIterator[ToolEvent]:
        yield TextProgress(text="before")
        kind = _LONE_SURROGATE if args.where == "kind" else "fine"
        payload = _LONE_SURROGATE if args.where == "payload" else "ok"
        yield CustomProgress(subkind=kind, payload=payload)
        yield ToolResult(value="sent")


@pytest.mark.parametrize(
    ("where", "kind"), [("kind", repr(_LONE_SURROGATE)), ("payload", "'fine'")]
)
def test_a_frame_that_cannot_be_encoded_ends_its_call_with_an_error(where: str, kind: str) -> None:
    """A progress frame JSON cannot carry (a lone surrogate in its subkind or its
    payload) ends its call with internal_error naming the frame's kind; the frame
    before it arrives, the server goes on serving the next call and ends cleanly
    at end of input."""

    async def body() -> None:
        ours, theirs = socket.socketpair()
        server = Server([_LoneTool()])
        server_reader, server_writer = await asyncio.open_connection(sock=theirs)
        serving = asyncio.create_task(server.serve(server_reader, server_writer))
        reader, writer = await asyncio.open_connection(sock=ours)
        client = await Client.connect(reader, writer)
        try:
            bad = client.call("lone", {"where": where})
            kinds: list[str] = []

            async def take_all() -> None:
                async for item in bad:
                    assert isinstance(item, CallProgress)
                    kinds.append(item.frame.kind)

            with pytest.raises(RemoteToolError) as caught:
                await take_all()
            assert kinds == ["text"]
            assert caught.value.wire.code == "internal_error"
            assert f"a progress frame of kind {kind} cannot be sent as JSON: " in (
                caught.value.message
            )
            *progress, result = [item async for item in client.call("lone", {"where": ""})]
            assert isinstance(result, ToolCallResult)
            assert [p.frame.kind for p in progress if isinstance(p, CallProgress)] == [
                "text",
                "fine",
            ]
        finally:
            await client.aclose()
            await serving
            server_writer.close()
            await server_writer.wait_closed()
        assert server.statistics().calls_started == 2

    async def bounded() -> None:
        async with asyncio.timeout(LINE_WAIT_S):
            await body()

    asyncio.run(bounded())


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


def test_lines_nested_too_deeply_get_errors_and_the_server_keeps_serving(
    server: ServeProcess,
) -> None:
    """A line nested deeper than the decoder recurses (brackets, objects, deep
    inside params) gets one -32700/-32600 error with a null id; the call in
    flight still gets its reply and a later request is still answered."""
    server.send(_call("c1", "sleep 0.5; echo late"))
    lines = _deep_lines()
    for line in lines:
        server.send(line)
    server.send({"jsonrpc": "2.0", "id": "after", "method": "tools.list", "params": {}})
    refused: list[dict[str, Any]] = []
    answered: dict[Any, dict[str, Any]] = {}
    while len(refused) < len(lines) or set(answered) != {1, "after"}:
        message = server.line()
        if "id" not in message:
            continue  # the call's progress
        if message["id"] is None:
            refused.append(message)
        else:
            answered[message["id"]] = message
    for reply in refused:
        assert reply["error"]["code"] in (-32700, -32600), reply
    assert any("nested too deeply" in r["error"]["message"] for r in refused)
    assert [t["id"] for t in answered["after"]["result"]["tools"]] == ["bash"]
    assert answered[1]["result"]["output"]["value"]["output"] == "late\n"
    assert server.close() == 0


def test_every_depth_around_the_recursion_limit_is_answered() -> None:
    """Requests nested 900 to 1000 deep in each envelope value and in the
    arguments, around where the decoder stops, each get their reply (whichever
    step refuses them) and the server ends cleanly at end of input."""
    shapes = [
        (b'{"jsonrpc":', b',"id":1,"method":"m","params":{}}'),
        (b'{"jsonrpc":"2.0","id":2,"method":"tools.list","params":{},"session_id":', b"}"),
        (b'{"jsonrpc":"2.0","id":3,"method":"tool.cancel","params":', b"}"),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"tool.call","params":{"tool_call_id":"x",'
            b'"tool_id":"bash","arguments":{"command":"true","env":',
            b"}}}",
        ),
    ]
    lines = [
        head + b"[" * depth + b"]" * depth + tail
        for depth in range(900, 1001, 2)
        for head, tail in shapes
    ]
    done = subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", "serve"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=LINE_WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(replies) == len(lines)
    assert all("error" in reply or "result" in reply for reply in replies)


def test_error_replies_quote_only_an_excerpt_and_decode_strictly(server: ServeProcess) -> None:
    """A 2 M-character method of DEL characters, a 4 MB unknown tool id and a huge
    unknown params key: each error reply is a few hundred bytes, not the
    input echoed; an empty session_id is refused and not echoed back, so the
    SDK's own strict decoder reads every reply."""
    huge = "\x7f" * 2_000_000  # 12 MB escaped, under the frame limit
    server.send({"jsonrpc": "2.0", "id": 1, "method": huge, "params": {}})
    server.send(
        _call("c1", "true", request_id=2)
        | {"params": {"tool_call_id": "c1", "tool_id": "a" * 4_000_000, "arguments": {}}}
    )
    server.send(
        _call("c2", "true", request_id=3)
        | {"params": {"tool_call_id": "c2", "tool_id": "bash", "arguments": {}, huge: 1}}
    )
    server.send({"jsonrpc": "2.0", "id": 4, "method": "tools.list", "params": {}, "session_id": ""})
    answered = []
    for _ in range(4):  # a call is answered when it ends: in any order
        raw = json.dumps(server.line()).encode()
        assert len(raw) < 2000, raw[:300]
        reply = json_codec.decode_message(raw, params=msgspec.Raw, result=msgspec.Raw)
        assert isinstance(reply, JsonRpcResponse)
        assert reply.error is not None
        assert reply.session_id is None
        answered.append(reply.id)
    assert sorted(answered) == [1, 2, 3, 4]  # type: ignore[type-var]


def test_queued_error_replies_are_bounded_in_bytes() -> None:
    """The control queue stops the reader on bytes as well as on lines: a few
    replies that add up to MAX_CONTROL_BYTES pause reading until written."""

    class Stalled:
        def write(self, data: bytes) -> None:
            pass

        async def drain(self) -> None:
            await asyncio.sleep(3600)

    async def body() -> None:
        writer = _Writer(Stalled(), CALL_QUEUE_BYTES)  # type: ignore[arg-type]
        reply = b"x" * (MAX_CONTROL_BYTES // 4)
        for _ in range(3):
            writer.control(reply)
        assert writer._space.is_set()
        writer.control(reply)
        assert not writer._space.is_set()
        assert MAX_CONTROL_LINES > 4

    asyncio.run(body())


class _Size(msgspec.Struct, forbid_unknown_fields=True):
    size: int


class _BoundedTool(Tool[_Size]):
    """Declares max_frame_bytes 400 and sends one delta of ``size`` characters."""

    id = "bounded"
    args_type = _Size
    capabilities = ToolCapabilities(max_frame_bytes=400)

    async def execute(self, ctx: ToolContext, args: _Size) -> AsyncIterator[ToolEvent]:
        payload = PartialResultPayload(delta="x" * args.size, total_bytes=args.size)
        yield CustomProgress(subkind="chunk", payload=payload)
        yield ToolResult(value="sent")


def test_a_tools_declared_max_frame_bytes_bounds_its_frames() -> None:
    """A frame over the tool's declared max_frame_bytes never goes out: the
    call ends with frame_too_large naming the size and the limit; a frame
    within it is sent."""

    async def body() -> None:
        ours, theirs = socket.socketpair()
        server = Server([_BoundedTool()])
        server_reader, server_writer = await asyncio.open_connection(sock=theirs)
        serving = asyncio.create_task(server.serve(server_reader, server_writer))
        reader, writer = await asyncio.open_connection(sock=ours)
        client = await Client.connect(reader, writer)
        try:
            *progress, result = [item async for item in client.call("bounded", {"size": 10})]
            assert isinstance(result, ToolCallResult)
            assert len(progress) == 1
            large = client.call("bounded", {"size": 1000})

            async def take_all() -> None:
                async for item in large:
                    raise AssertionError(f"a frame over the limit was sent: {item!r}")

            with pytest.raises(RemoteToolError) as caught:
                await take_all()
            assert caught.value.wire.code == "frame_too_large"
            assert caught.value.wire.limit == 400  # type: ignore[union-attr]
            assert caught.value.wire.bytes > 1000  # type: ignore[union-attr]
        finally:
            await client.aclose()
            await serving
            server_writer.close()
            await server_writer.wait_closed()

    asyncio.run(body())


def test_a_call_its_peer_cancelled_keeps_that_reason_at_end_of_input() -> None:
    """A cancel read before end of input wins: the call's error is the peer's
    cancel, not the server's shutdown, even when the call is still stopping (its
    command ignores SIGTERM until the grace runs out) when end of input comes."""
    call = {
        "jsonrpc": "2.0", "id": 1, "method": "tool.call",
        "params": {"tool_call_id": "c1", "tool_id": "bash",
                   "arguments": {"command": "trap '' TERM; echo started; sleep 30"}},
    }  # fmt: skip
    cancel = {"jsonrpc": "2.0", "id": 2, "method": "tool.cancel", "params": {"tool_call_id": "c1"}}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(call).encode() + b"\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())  # the command runs: "started"
        assert first["method"] == "tool_call_progress"
        proc.stdin.write(json.dumps(cancel).encode() + b"\n")
        proc.stdin.close()  # end of input right behind the cancel
        proc.stdin = None  # closed: communicate only reads
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    replies = {reply["id"]: reply for reply in map(json.loads, out.splitlines()) if "id" in reply}
    assert replies[1]["error"]["data"]["code"] == "cancelled"
    assert replies[1]["error"]["message"] == "tool 'bash' call 'c1' was cancelled"
