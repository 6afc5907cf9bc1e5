"""``kigi-stream serve --mcp`` as a real subprocess, driven by the official MCP
client (and, for what a client cannot send, by raw JSON lines). What the server
answers whatever carries it (the tools it lists, bad arguments, no progress
without a token) is tested in process, in test_mcp_server.py."""

from __future__ import annotations

import asyncio
import functools
import json
import shlex
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mcp import Client, StdioServerParameters
from mcp_raw import INITIALIZE, INITIALIZED, bash_call
from processes import until_group_gone
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime._tools._shell import DEFAULT_TAIL_CAPACITY
from kigi_tool_runtime.mcp import ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_FRAME, META_STREAM
from kigi_tool_runtime.testing import check_stream

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"]
PY = sys.executable


# 100 MB of text with 2-, 3- and 4-byte characters, in 64 KiB writes.
UNIT = "ab é € 😀 xyz\n"
BLOCK = (UNIT * 4096).encode()
FLOOD_BYTES = len(BLOCK) * (100 * 1024 * 1024 // len(BLOCK))


def _flood(seconds_between: float = 0.0) -> str:
    return (
        "import sys, time\n"
        f"block = ({UNIT!r} * 4096).encode()\n"
        f"for _ in range({FLOOD_BYTES // len(BLOCK)}):\n"
        "    sys.stdout.buffer.write(block)\n"
        + (f"    time.sleep({seconds_between})\n" if seconds_between else "")
    )


def _sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on a fresh event loop (the suite's tests are sync)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _params(*options: str) -> StdioServerParameters:
    return StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *options])


class _Recorder:
    """A message handler that folds progress and keeps each kigi frame."""

    def __init__(self) -> None:
        self.folder = ProgressFolder()
        self.frames: list[ToolCallProgressFrame[PartialResultPayload]] = []
        self.progress: list[float] = []

    async def __call__(self, message: Any) -> None:
        params = getattr(message, "params", None)
        meta = getattr(params, "meta", None) or {}
        if META_FRAME in meta:
            raw = msgspec.json.encode(meta[META_FRAME])
            self.frames.append(json_codec.decode(raw, ToolCallProgressFrame[PartialResultPayload]))
            self.progress.append(params.progress)
        await self.folder.message_handler(message)


@_sync
async def test_split_characters_reassemble_exactly_from_progress() -> None:
    """2-, 3- and 4-byte characters cut across ticks arrive whole: the folded
    text is the output exactly, over several notifications with progress
    1, 2, 3, ..., and the result carries the excerpt and the outcome."""
    recorder = _Recorder()
    async with asyncio.timeout(30), Client(_params(), message_handler=recorder) as client:
        folded = await recorder.folder.call_tool(client, "bash", {"command": [PY, "-c", SPLIT]})
    assert folded.text == SPLIT_TEXT
    assert folded.complete
    assert len(recorder.frames) >= 3
    assert recorder.progress == [float(i) for i in range(1, len(recorder.progress) + 1)]
    assert "\ufffd" not in "".join(frame.body.delta for frame in recorder.frames)
    result = folded.result
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["output"] == SPLIT_TEXT
    assert result.structured_content["exit_code"] == 0
    assert result.content[0].text.startswith(SPLIT_TEXT)  # type: ignore[union-attr]
    assert result.meta is not None
    assert result.meta[META_STREAM]["frames_sent"] == len(recorder.frames)


@_sync
async def test_the_official_progress_callback_gets_the_deltas_in_delta_mode() -> None:
    """With ``--mcp-message delta``, a host using only the client's
    progress_callback sees the live deltas as messages, in order, with strictly
    increasing progress."""
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with asyncio.timeout(30), Client(_params("--mcp-message", "delta")) as client:
        result = await client.call_tool(
            "bash", {"command": [PY, "-c", SPLIT]}, progress_callback=on_progress
        )
        await asyncio.sleep(0.2)  # the client runs callbacks in tasks of their own
    assert not result.is_error
    assert "".join(message or "" for _, message in seen) == SPLIT_TEXT
    assert [p for p, _ in seen] == [float(i) for i in range(1, len(seen) + 1)]


@pytest.mark.slow
@_sync
async def test_a_100_mb_flood_reassembles_exactly_with_every_loss_reported() -> None:
    """100 MB of multi-byte text: every delta folded from the notifications is
    the source's bytes at its place, every skipped byte is in a gap frame
    (check_stream judges that against the source), and the folded report
    agrees: the stream accounts for all 100 MB."""
    recorder = _Recorder()
    async with asyncio.timeout(100), Client(_params(), message_handler=recorder) as client:
        folded = await recorder.folder.call_tool(
            client, "bash", {"command": [PY, "-c", _flood()]}, read_timeout_seconds=90
        )
    result = folded.result
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["total_bytes"] == FLOOD_BYTES
    assert result.meta is not None
    stream_meta = result.meta[META_STREAM]
    assert stream_meta["frames_dropped"] == 0
    assert folded.missing == 0
    source = BLOCK * (FLOOD_BYTES // len(BLOCK))
    checked = check_stream(recorder.frames, source, tail_capacity=DEFAULT_TAIL_CAPACITY)
    (report,) = folded.reports()
    assert report.total_bytes == FLOOD_BYTES
    lost = sum(span.lost_bytes for span in checked.lost)
    assert report.lost_bytes_min <= lost <= report.lost_bytes  # a range only where held
    assert len(report.gaps) == len(checked.lost)
    assert folded.text == checked.text
    assert len(checked.text.encode()) + lost == FLOOD_BYTES == report.text_bytes + lost


@_sync
async def test_cancelling_mid_flood_stops_the_process_group(tmp_path: Path) -> None:
    """Cancelling the client's call mid-flood (the client sends
    notifications/cancelled) stops the command's process group, and the
    server goes on serving."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; exec {PY} -c {shlex.quote(_flood(0.01))}"
    recorder = _Recorder()
    async with asyncio.timeout(60), Client(_params(), message_handler=recorder) as client:
        call = asyncio.create_task(recorder.folder.call_tool(client, "bash", {"command": command}))
        while len(recorder.frames) < 3:
            await asyncio.sleep(0.02)
        pid = int(pidfile.read_text())
        assert group_alive(pid)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until_group_gone(pid)
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["bash"]


@_sync
async def test_deadline_in_meta_ends_the_call_with_a_timeout_error(tmp_path: Path) -> None:
    """_meta dev.kigi/deadline_ms bounds the call: a timeout error result with
    the kigi code, and the command is stopped."""
    pidfile = tmp_path / "pid"
    async with asyncio.timeout(30), Client(_params()) as client:
        result = await client.call_tool(
            "bash",
            {"command": f"echo $$ > {pidfile}; sleep 30"},
            meta={"dev.kigi/deadline_ms": 300},
        )
        assert result.is_error
        assert result.meta is not None
        assert result.meta["dev.kigi/error"]["kind"] == "timeout"
        await until_group_gone(int(pidfile.read_text()))


# -- raw JSON lines: what the official client will not send ----------------------------


class _Raw:
    """A ``kigi-stream serve --mcp`` child spoken to in raw JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, *options: str, limit: int = 64 * 1024 * 1024) -> _Raw:
        """Start the child (with extra ``serve`` options) and initialize;
        ``limit`` bounds a line, and what the reader buffers unread (twice
        that) before it stops taking the pipe."""
        proc = await asyncio.create_subprocess_exec(
            *SERVE,
            *options,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=limit,
        )
        raw = cls(proc)
        await raw.send(INITIALIZE)
        assert (await raw.read())["id"] == 0
        await raw.send(INITIALIZED)
        return raw

    async def send(self, message: Any) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        await self.proc.stdin.drain()

    async def read(self) -> Any:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        assert line, "the server closed its output"
        return json.loads(line)

    async def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return await self.proc.wait()


@_sync
async def test_malformed_and_unknown_requests_get_errors_and_serving_goes_on() -> None:
    """Not JSON, or nested too deeply to parse: -32700; JSON but no message, or
    nested deeper than the SDK reads: -32600 echoing the id; an unknown method:
    -32601; an unknown tool: -32602; then tools/list still answers."""
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        await raw.send(b'{"jsonrpc": "2.0", "id": 1, "method": ')
        reply = await raw.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32700
        await raw.send({"jsonrpc": "2.0", "id": 2, "params": {}})
        reply = await raw.read()
        assert reply["id"] == 2
        assert reply["error"]["code"] == -32600
        await raw.send(b"[1, 2]")
        reply = await raw.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32600
        deep = b"[" * 100_000 + b"]" * 100_000
        await raw.send(b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": ' + deep)
        reply = await raw.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32700
        assert "nested too deeply" in reply["error"]["message"]
        # Deeper than the SDK's parser goes, yet JSON: refused with its id.
        middle = b"[" * 300 + b"]" * 300
        await raw.send(
            b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"x": ' + middle + b"}}"
        )
        reply = await raw.read()
        assert reply["id"] == 7
        assert reply["error"]["code"] == -32600
        assert "nested too deeply" in reply["error"]["message"]
        await raw.send({"jsonrpc": "2.0", "id": 3, "method": "tools/explode", "params": {}})
        reply = await raw.read()
        assert reply["id"] == 3
        assert reply["error"]["code"] == -32601
        await raw.send(
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope"}}
        )
        reply = await raw.read()
        assert reply["id"] == 4
        assert reply["error"]["code"] == -32602
        assert "nope" in reply["error"]["message"]
        await raw.send({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}})
        reply = await raw.read()
        assert reply["id"] == 5
        assert reply["result"]["tools"][0]["name"] == "bash"
        assert await raw.close() == 0


@_sync
async def test_a_line_over_the_limit_is_refused_unread() -> None:
    """A line longer than --max-frame-bytes gets -32600 without being parsed,
    and the next request is served."""
    async with asyncio.timeout(30):
        raw = await _Raw.start("--max-frame-bytes", "4096")
        await raw.send(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 9000}}
        )
        reply = await raw.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32600
        assert "exceeds the limit of 4096 bytes" in reply["error"]["message"]
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        assert (await raw.read())["id"] == 2
        assert await raw.close() == 0


@_sync
async def test_every_notification_of_a_call_precedes_its_response() -> None:
    """On the wire, each call's progress notifications all come before its
    response, numbered 1, 2, 3, ...; none follows it."""
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        # Two calls that stream over several ticks, and one whose whole output
        # comes in a burst right before it exits (its last frames and its
        # response are made at the same moment).
        burst = "import sys; sys.stdout.write('x' * 3_000_000)"
        commands = {10: [PY, "-c", SPLIT], 11: [PY, "-c", SPLIT], 13: [PY, "-c", burst]}
        for request_id, command in commands.items():
            await raw.send(bash_call(request_id, command, f"p{request_id}"))
        progress: dict[str, list[float]] = {f"p{request_id}": [] for request_id in commands}
        answered: set[str] = set()
        while len(answered) < len(commands):
            message = await raw.read()
            if message.get("method") == "notifications/progress":
                token = message["params"]["progressToken"]
                assert token not in answered, "progress after the response"
                progress[token].append(message["params"]["progress"])
            else:
                answered.add(f"p{message['id']}")
                sent = message["result"]["_meta"][META_STREAM]["frames_sent"]
                assert len(progress[f"p{message['id']}"]) == sent
        for values in progress.values():
            assert values == [float(i) for i in range(1, len(values) + 1)]
            assert len(values) >= 3
        await raw.send({"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {}})
        assert (await raw.read())["id"] == 12  # nothing else was left in flight
        assert await raw.close() == 0


@_sync
async def test_notifications_cancelled_stops_the_call_without_a_response(tmp_path: Path) -> None:
    """notifications/cancelled for a running call stops its process group; the
    call is never answered, and the next request is."""
    pidfile = tmp_path / "pid"
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        command = f"echo $$ > {pidfile}; exec {PY} -c {shlex.quote(_flood(0.01))}"
        await raw.send(bash_call(20, command, "c"))
        while (await raw.read()).get("method") != "notifications/progress":
            pass
        pid = int(pidfile.read_text())
        await raw.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20}}
        )
        await until_group_gone(pid)
        await raw.send({"jsonrpc": "2.0", "id": 21, "method": "tools/list", "params": {}})
        while True:
            message = await raw.read()
            assert message.get("id") != 20, "a cancelled call was answered"
            if message.get("id") == 21:
                break
        assert await raw.close() == 0


async def _start_sleeping_call(raw: _Raw, request_id: int, pidfile: Path) -> int:
    """Start a ``bash`` call that writes its pid and sleeps; return the pid (the
    leader of the command's process group) once written."""
    await raw.send(bash_call(request_id, f"echo $$ > {pidfile}; sleep 60"))
    while not pidfile.exists() or not pidfile.read_text().strip():
        await asyncio.sleep(0.02)
    return int(pidfile.read_text())


@_sync
async def test_end_of_input_cancels_running_calls_and_exits(tmp_path: Path) -> None:
    """A host that goes away (closes the server's input) mid-call: the command's
    process group is stopped and the server exits 0."""
    pidfile = tmp_path / "pid"
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        pid = await _start_sleeping_call(raw, 30, pidfile)
        assert await raw.close() == 0
        assert not group_alive(pid)


@pytest.mark.slow
@_sync
async def test_a_host_that_stops_reading_loses_frames_said_in_the_next_frame_and_the_result() -> (
    None
):
    """A host that stops reading mid-flood: once a notification has waited
    STALL_S, the call drops its oldest queued frames instead of waiting; the
    next frame sent says how many (dropped_count), the result counts them all
    and says so to the model, progress still rises by one per notification,
    the message of each frame after dropped ones starts with the marker that
    says so (status mode, the default), and the folded stream reports the
    loss instead of hiding it."""
    # 40 MB over about 4 s, so the flood outlasts the host's pause.
    flood = (
        "import sys, time\n"
        "block = ('ab é € 😀 xyz\\n' * 4096).encode()\n"
        "for _ in range(600):\n"
        "    sys.stdout.buffer.write(block); time.sleep(0.006)\n"
    )
    async with asyncio.timeout(60):
        raw = await _Raw.start(limit=256 * 1024)  # a host that really stops reading
        await raw.send(bash_call(40, [PY, "-c", flood], "slow"))
        first = await raw.read()
        assert first["method"] == "notifications/progress"
        await asyncio.sleep(2.5)  # the host stops reading; the pipe fills up
        folder = ProgressFolder()
        folder.absorb(first["params"])
        progress = [first["params"]["progress"]]
        dropped_counts = []
        while True:
            message = await raw.read()
            if message.get("id") == 40:
                result = message["result"]
                break
            params = message["params"]
            progress.append(params["progress"])
            dropped = params["_meta"][META_FRAME].get("dropped_count", 0)
            dropped_counts.append(dropped)
            # Said where it happened, for hosts that read only `message`.
            said = f"[... {dropped} frame{'s' if dropped > 1 else ''} dropped here ...]"
            assert (said in params["message"]) == bool(dropped)
            folder.absorb(params)
        assert await raw.close() == 0
    assert progress == [float(i) for i in range(1, len(progress) + 1)]
    summary = result["_meta"][META_STREAM]
    assert summary["frames_sent"] == len(progress)
    assert summary["frames_dropped"] > 0
    assert sum(dropped_counts) == summary["frames_dropped"]
    assert (
        f"{summary['frames_dropped']} progress frame(s) were dropped"
        in (result["content"][0]["text"])
    )
    (state,) = folder.reassembler.streams.values()
    report = state.report()
    assert not report.complete
    assert report.undelivered_bytes > 0
    assert "dropped_frames" in {anomaly.kind for anomaly in report.anomalies}


@_sync
async def test_sigterm_stops_running_calls_then_exits_143(tmp_path: Path) -> None:
    """SIGTERM to ``serve --mcp`` mid-call stops the command's process group
    first, then exits 128 + 15."""
    pidfile = tmp_path / "pid"
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        pid = await _start_sleeping_call(raw, 50, pidfile)
        raw.proc.send_signal(signal.SIGTERM)
        assert await raw.proc.wait() == 128 + signal.SIGTERM
        assert not group_alive(pid)


@_sync
async def test_a_progress_token_in_use_is_refused_until_its_call_ends() -> None:
    """On one connection, a call that brings the progress token of a call still
    running (as text: 7 and "7" are one) is a -32602 error, so two calls never
    mix their progress; the first call is unharmed, and once it ended the token
    is free again."""

    async with asyncio.timeout(30):
        raw = await _Raw.start()
        await raw.send(bash_call(1, "echo started; sleep 0.5; echo first", 7))
        note = await raw.read()
        assert note["params"]["message"] == "started"
        for request_id, token in ((2, 7), (3, "7")):
            await raw.send(bash_call(request_id, "echo second", token))
            reply = await raw.read()
            assert reply["id"] == request_id
            assert reply["error"]["code"] == -32602
            assert "in use by a call still running" in reply["error"]["message"]
        messages = [await raw.read(), await raw.read()]
        assert [m["params"]["message"] for m in messages[:1]] == ["first"]
        assert messages[1]["id"] == 1
        assert not messages[1]["result"]["isError"]
        await raw.send(bash_call(4, "echo again", 7))
        assert (await raw.read())["params"]["message"] == "again"
        assert (await raw.read())["id"] == 4
        assert await raw.close() == 0


def _partial_call(request_id: int, command: str, token: str, progress: str) -> dict[str, Any]:
    """A call declaring SEP-2998 partial results under ``token`` (and a
    progress token of its own, as the official client always sends one)."""
    call = bash_call(request_id, command, progress)
    call["params"]["_meta"].update(
        {
            "io.modelcontextprotocol/clientCapabilities": {"partialResults": {}},
            "partialResultToken": token,
        }
    )
    return call


@_sync
async def test_a_partial_result_token_in_use_is_refused_until_its_call_ends() -> None:
    """A call bringing the ``partialResultToken`` of a call still running (with
    a progress token of its own) is a -32602 error naming that token; the first
    call's partial results alone go under it; once it ended, the token is free."""
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        await raw.send(_partial_call(1, "echo started; sleep 0.5; echo first", "p", "g1"))
        note = await raw.read()
        assert note["params"]["content"][0]["text"] == "started\n"
        await raw.send(_partial_call(2, "echo second", "p", "g2"))
        reply = await raw.read()
        assert reply["id"] == 2
        assert reply["error"]["code"] == -32602
        assert "partialResultToken 'p' is in use" in reply["error"]["message"]
        rest = [await raw.read()]
        while "id" not in rest[-1]:
            rest.append(await raw.read())
        assert rest[-1]["id"] == 1
        texts = [n["params"]["content"][0]["text"] for n in rest[:-1] if n["params"]["content"]]
        assert texts == ["first\n"]
        await raw.send(_partial_call(3, "echo again", "p", "g3"))
        assert (await raw.read())["params"]["content"][0]["text"] == "again\n"
        assert await raw.close() == 0


@_sync
async def test_a_request_id_in_flight_is_refused_as_over_http() -> None:
    """A second ``tools/call`` with the id of a call still running is refused
    with -32600 (its id echoed, as the HTTP transport refuses it) and never
    runs; the first call answers once, with its own result; once it ended the
    id is free again."""
    async with asyncio.timeout(30):
        raw = await _Raw.start()
        await raw.send(bash_call(5, "echo started; sleep 0.5; echo first", "t1"))
        assert (await raw.read())["params"]["message"] == "started"  # status mode: the newest line
        await raw.send(bash_call("5", "echo second", "t2"))
        reply = await raw.read()
        assert reply["id"] == "5"
        assert reply["error"]["code"] == -32600
        assert "already used by a request in flight" in reply["error"]["message"]
        note, answer = await raw.read(), await raw.read()
        assert note["params"]["message"] == "first"
        assert answer["id"] == 5
        assert not answer["result"]["isError"]
        assert "first" in answer["result"]["content"][0]["text"]
        await raw.send({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        assert await raw.read() == {"jsonrpc": "2.0", "id": 6, "result": {}}  # nothing else came
        await raw.send(bash_call(5, "echo again", "t3"))
        assert (await raw.read())["params"]["message"] == "again"
        assert (await raw.read())["id"] == 5
        assert await raw.close() == 0
