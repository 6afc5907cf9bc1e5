"""The JSON-RPC server's driver, driven through a real `kigi-stream serve` process
over pipes (and, for tools of its own, in process over a socket pair or a sink
that stops reading): flow control, memory bounds, end of input, real tool
processes. Its protocol rules are tested on ServerProtocol and take_lines in
test_rpc_server; one session here proves their wiring."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import select
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bounded import run_within
from processes import reap

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    TextProgress,
    ToolCallResult,
    ToolCapabilities,
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
from kigi_tool_runtime._call._serving import WRITER_STALL_S
from kigi_tool_runtime._transport._rpc_server import MAX_CALLS_IN_FLIGHT
from kigi_tool_runtime._transport._server import (
    CALL_QUEUE_BYTES,
    MAX_CONTROL_BYTES,
    MAX_CONTROL_LINES,
    SERVER_CANCEL_MESSAGE,
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


def test_serve_applies_the_protocol_rules_over_real_pipes(server: ServeProcess) -> None:
    """One session with a real `kigi-stream serve`, the wiring of the protocol rules
    (each stated in full in test_rpc_server): a call streams in its session while
    garbage, a line nested too deeply, an unknown method and its own request id
    reused are each answered with their error; bad arguments end their call with
    invalid_params; tool.cancel stops the call and is acknowledged; once the call
    has ended its ids serve again; end of input exits 0. An unknown notification
    is not answered, and tools.list lists the served tool while the call runs."""
    server.send(_call("c1", "echo started; sleep 60", request_id=7) | {"session_id": "sess_s"})
    first = server.line()
    assert (first["session_id"], first["seq"]) == ("sess_s", 0)
    assert first["params"]["tool_call_id"] == "c1"
    assert first["params"]["body"]["delta"] == "started\n"

    server.send(b"this is not json")
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    assert reply["error"]["message"].startswith("parse error: ")

    deep = b"[" * 100_000 + b"]" * 100_000
    server.send(b'{"jsonrpc": "2.0", "id": 1, "method": "tool.call", "params": ' + deep + b"}")
    assert server.line() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error: nested too deeply"},
    }

    server.send({"jsonrpc": "2.0", "id": "m", "session_id": "sess_s", "method": "no.such"})
    reply = server.line()
    assert (reply["id"], reply["session_id"], reply["error"]["code"]) == ("m", "sess_s", -32601)
    assert reply["error"]["message"] == (
        "method not found: 'no.such'"
        " (methods: tools.list, tool.call, tool_call_request, tool.cancel, hook)"
    )

    server.send({"jsonrpc": "2.0", "method": "no.such.notification", "params": {}})  # ignored
    server.send({"jsonrpc": "2.0", "id": "l", "method": "tools.list"})  # params left out
    (tool,) = server.line()["result"]["tools"]
    assert (tool["id"], sorted(tool)) == (
        "bash",
        ["capabilities", "description", "id", "input_schema"],
    )

    server.send(_call("c2", "echo never", request_id=7))
    reply = server.line()
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert reply["error"]["message"] == "invalid request: id 7 is already used by a call in flight"

    server.send(_call("c3", 5, request_id=8))
    progress, reply = server.until_response()
    assert (progress, reply["id"], reply["error"]["code"]) == ([], 8, -32602)
    assert reply["error"]["data"]["code"] == "invalid_params"

    server.send(
        {"jsonrpc": "2.0", "id": 9, "method": "tool.cancel", "params": {"tool_call_id": "c1"}}
    )
    replies: dict[Any, dict[str, Any]] = {}
    while len(replies) < 2:
        message = server.line()
        assert "id" in message, message  # the cancelled command wrote nothing more
        replies[message["id"]] = message
    assert replies[9]["result"] == {"cancelled": 1}
    assert replies[7]["session_id"] == "sess_s"
    assert replies[7]["error"]["data"] == {"code": "cancelled", "tool_id": "bash"}
    assert replies[7]["error"]["message"] == "tool 'bash' call 'c1' was cancelled"

    server.send(_call("c1", "printf again", request_id=7))
    progress, response = server.until_response()
    assert [p["seq"] for p in progress] == list(range(len(progress)))
    assert "".join(p["params"]["body"]["delta"] for p in progress) == "again"
    assert (response["id"], response["result"]["tool_call_id"]) == (7, "c1")
    assert "session_id" not in response
    assert server.close() == 0


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


def test_server_rejects_bad_configuration() -> None:
    """Duplicate tool ids and non-positive bounds are ValueErrors naming the problem."""
    with pytest.raises(ValueError, match="two tools have the id 'bash'"):
        Server([ShellTool(), ShellTool()])
    with pytest.raises(ValueError, match="must be at least 1, got 0 and"):
        Server([ShellTool()], max_frame_bytes=0)


def test_a_stop_wait_that_is_not_positive_is_refused_up_front() -> None:
    """``stop_wait`` 0, negative or NaN is a ValueError from ``Server(...)``,
    not an ``internal_error`` answer to every call it then serves."""
    for stop_wait in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="stop_wait must be > 0 seconds"):
            Server([ShellTool()], stop_wait=stop_wait)
    Server([ShellTool()], stop_wait=1e-9)


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
    # The server fills its output and stops reading (nothing reads it): then its
    # input pipe fills up behind the flood. Wait for that, not a fixed time.
    assert server.proc.stdin is not None
    _until_pipe_full(server.proc.stdin.fileno(), writer)
    peak_kib = _status_kib(server.proc.pid, "VmHWM")
    codes = [server.line()["error"]["code"] for _ in range(count)]
    writer.join(timeout=LINE_WAIT_S)
    assert not errors
    assert codes == [-32700] * count
    growth_mib = (peak_kib - base_kib) / 1024
    assert growth_mib < 8, f"server memory grew {growth_mib:.1f} MiB while unread"


def _until_pipe_full(fd: int, writer: threading.Thread) -> None:
    """Wait (bounded by LINE_WAIT_S) until the pipe ``fd`` writes to holds all
    it can take, less a page, while ``writer`` still writes into it: its reader
    has stopped reading."""
    capacity = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    deadline = time.monotonic() + LINE_WAIT_S
    while True:
        assert writer.is_alive(), "the flood went through: the server never stopped reading"
        held = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
        if held >= capacity - 4096:
            return
        assert time.monotonic() < deadline, f"the server's input never filled ({held} bytes)"
        time.sleep(0.02)


class _NoArgs(msgspec.Struct, forbid_unknown_fields=True):
    pass


class _WideTool(Tool[_NoArgs]):
    """A tool whose tools.list entry is a quarter of MAX_CONTROL_BYTES; counts
    how often it was described."""

    id = "wide"
    args_type = _NoArgs
    description = "d" * (MAX_CONTROL_BYTES // 4)

    def __init__(self) -> None:
        self.described = 0

    def input_schema(self) -> dict[str, Any]:
        self.described += 1
        return super().input_schema()

    def run(self, ctx: ToolContext, args: _NoArgs) -> str:
        return "unused"


def test_queued_replies_stop_the_reader_on_bytes_as_well_as_lines() -> None:
    """While the peer does not read, replies that add up to MAX_CONTROL_BYTES stop
    the reader long before MAX_CONTROL_LINES of them wait: the replies made and
    not yet written stay within MAX_CONTROL_BYTES and one reply more. Once the
    peer reads, every request is answered."""
    requests = 20
    assert requests < MAX_CONTROL_LINES  # only the byte bound can stop the reader

    class Sink:
        def __init__(self) -> None:
            self.written = 0
            self.reading = asyncio.Event()

        def write(self, data: bytes | bytearray) -> None:
            self.written += len(data)

        async def drain(self) -> None:
            await self.reading.wait()

    async def body() -> None:
        tool = _WideTool()
        server = Server([tool])
        sink = Sink()
        reader = asyncio.StreamReader()
        for n in range(requests):
            reader.feed_data(b'{"jsonrpc":"2.0","id":%d,"method":"tools.list"}\n' % n)
        reader.feed_eof()
        serving = asyncio.create_task(server.serve(reader, sink))
        # Let the reader go as far as it may while nothing is read. Not a timing
        # assertion: a slower reader only gets less far.
        await asyncio.sleep(0.5)
        described, written = tool.described, sink.written
        sink.reading.set()
        await serving
        assert tool.described == requests
        reply_bytes = -(-sink.written // requests)  # the largest reply, within a byte
        assert reply_bytes > MAX_CONTROL_BYTES // 4
        assert described < requests
        assert described * reply_bytes - written <= MAX_CONTROL_BYTES + reply_bytes

    run_within(body(), LINE_WAIT_S)


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

    run_within(body(), LINE_WAIT_S)


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


def test_a_call_its_peer_cancelled_keeps_that_reason_at_end_of_input(tmp_path: Path) -> None:
    """A cancel read before end of input wins: the call's error is the peer's
    cancel, not the server's shutdown, even when the call is still stopping (its
    command ignores SIGTERM until the grace runs out) when end of input comes.
    The shell tool is served through ``--tools`` with a 1 s grace (its own
    ``grace`` keyword; the default is 2 s): end of input comes right behind the
    cancel, well inside it."""
    module = tmp_path / "shell_tool.py"
    module.write_text("from kigi_tool_runtime import ShellTool\nTOOL = ShellTool(grace=1.0)\n")
    call = {
        "jsonrpc": "2.0", "id": 1, "method": "tool.call",
        "params": {"tool_call_id": "c1", "tool_id": "bash",
                   "arguments": {"command": "trap '' TERM; echo started; sleep 30"}},
    }  # fmt: skip
    cancel = {"jsonrpc": "2.0", "id": 2, "method": "tool.cancel", "params": {"tool_call_id": "c1"}}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", f"{module}:TOOL"],
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
        reap(proc)
    replies = {reply["id"]: reply for reply in map(json.loads, out.splitlines()) if "id" in reply}
    assert replies[1]["error"]["data"]["code"] == "cancelled"
    assert replies[1]["error"]["message"] == "tool 'bash' call 'c1' was cancelled"


class _Count(msgspec.Struct, forbid_unknown_fields=True):
    count: int


class _CountingTool(Tool[_Count]):
    """Streams ``count`` numbered frames of about 100 bytes, then a result."""

    id = "counting"
    args_type = _Count

    async def execute(self, ctx: ToolContext, args: _Count) -> AsyncIterator[ToolEvent]:
        for n in range(args.count):
            yield CustomProgress(subkind="n", payload=[n, "x" * 90])
            await asyncio.sleep(0)
        yield ToolResult(value="done")


def test_frames_dropped_counts_what_the_call_queue_dropped() -> None:
    """A peer that stops reading (its drain never returns) stalls the output:
    the call's queue then drops its oldest frames (Rule 3). Once the peer reads
    again every frame is either written or counted in ``frames_dropped``, and the
    ``dropped_count`` of the written frames adds up to that count."""
    frames = 200

    class Sink:
        def __init__(self) -> None:
            self.data = bytearray()
            self.reading = asyncio.Event()

        def write(self, data: bytes | bytearray) -> None:
            self.data += data

        async def drain(self) -> None:
            await self.reading.wait()

    async def body() -> None:
        server = Server([_CountingTool()], call_queue_bytes=1000)
        sink = Sink()
        reader = asyncio.StreamReader()
        call = {
            "jsonrpc": "2.0", "id": 1, "method": "tool.call",
            "params": {"tool_call_id": "c", "tool_id": "counting",
                       "arguments": {"count": frames}},
        }  # fmt: skip
        reader.feed_data(json.dumps(call).encode() + b"\n")
        serving = asyncio.create_task(server.serve(reader, sink))
        async with asyncio.timeout(LINE_WAIT_S):
            while server.statistics().calls_started == 0 or server.statistics().calls_in_flight:
                await asyncio.sleep(0.01)  # the tool runs to its end, past the stall
        sink.reading.set()
        reader.feed_eof()
        await asyncio.wait_for(serving, LINE_WAIT_S)
        stats = server.statistics()
        lines = [json.loads(line) for line in bytes(sink.data).splitlines()]
        progress = [line["params"] for line in lines if line.get("method") == "tool_call_progress"]
        assert lines[-1]["id"] == 1
        assert "result" in lines[-1]
        assert stats.frames_dropped > 0
        assert stats.frames_written == len(progress)
        assert stats.frames_written + stats.frames_dropped == frames
        assert sum(p.get("dropped_count", 0) for p in progress) == stats.frames_dropped
        assert stats.lines_abandoned == 0

    asyncio.run(body())


def test_a_silent_call_gets_heartbeat_lines_that_old_consumers_skip() -> None:
    """``serve --heartbeat 0.3``: a call silent for 2 s gets several
    ``tool_call_heartbeat`` lines (no ``seq``; each silence at least one
    interval longer than the last), its frames keep ``seq`` 0, 1, 2, ...
    without a hole, nothing follows the response, and the strict consumers
    skip the heartbeats: the ``Reassembler`` folds the stream complete with no
    anomaly, ``decode_message`` reads them as notifications, and the client's
    protocol takes them as used lines that end nothing."""
    from kigi_tool_protocol import JsonRpcNotification, decode_message
    from kigi_tool_runtime import Reassembler
    from kigi_tool_runtime._transport._rpc_client import ClientProtocol

    server = ServeProcess("--heartbeat", "0.3")
    try:
        server.send(_call("c1", "echo a; sleep 2; echo b"))
        lines, response = server.until_response()
        server.send(_call("c2", "true", request_id=2))
        after, second = server.until_response()
        assert server.close() == 0
    finally:
        server.kill()
    # A beat may come before the first line (a slow start): the silence after
    # the first line is the one measured here.
    first = next(i for i, line in enumerate(lines) if line["method"] == "tool_call_progress")
    early = [line for line in lines[:first] if line["method"] == "tool_call_heartbeat"]
    beats = [line for line in lines[first:] if line["method"] == "tool_call_heartbeat"]
    frames = [line for line in lines if line["method"] == "tool_call_progress"]
    assert len(early) + len(beats) + len(frames) == len(lines)
    assert len(beats) >= 2
    assert [frame["seq"] for frame in frames] == list(range(len(frames)))
    silences = []
    for beat in beats:
        assert "seq" not in beat
        assert "id" not in beat
        params = beat["params"]
        assert set(params) == {"tool_call_id", "elapsed_ms", "silent_ms"}
        assert params["tool_call_id"] == "c1"
        assert params["silent_ms"] >= 300
        assert params["elapsed_ms"] >= params["silent_ms"]
        silences.append(params["silent_ms"])
    assert all(b - a >= 290 for a, b in itertools.pairwise(silences))
    assert response["id"] == 1
    assert second["id"] == 2
    assert all(line["method"] == "tool_call_progress" for line in after)  # none of c1's
    reassembler = Reassembler()
    protocol = ClientProtocol("s")
    for line in lines:
        raw = json.dumps(line).encode()
        reassembler.absorb_line(raw)
        if line["method"] == "tool_call_heartbeat":
            assert isinstance(decode_message(raw), JsonRpcNotification)
            assert protocol.receive_line(raw) == []
    assert protocol.lines_unused == 0
    assert reassembler.ignored == len(early) + len(beats)
    (state,) = reassembler.streams.values()
    report = state.report(ended=True)
    assert report.complete
    assert not report.anomalies
    assert state.text == "a\nb\n"
