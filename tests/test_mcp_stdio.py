"""``kigi-stream serve --mcp`` as a real subprocess, driven by the official MCP
client (and, for what a client cannot send, by raw JSON lines). What the server
answers whatever carries it (the tools it lists, bad arguments, no progress
without a token) is tested in process, in test_mcp_server.py; the raw lines'
answers (malformed lines, ids and tokens in use, cancelling, the order of a
call's messages) in test_mcp_lines.py."""

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
from mcp_raw import INITIALIZE, INITIALIZED, bash_call, over_long_line_refused
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

#: ``serve --mcp``'s server with a shorter stall bound (``stall_s``, its one
#: difference), so a host's pause need not outlast the default second.
#: ``sys.argv[1]``: the bound.
SHORT_STALL = """
import asyncio, sys
from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.mcp import McpToolServer, serve_stdio_mcp

asyncio.run(serve_stdio_mcp(McpToolServer([ShellTool()], stall_s=float(sys.argv[1]))))
"""
#: The stall bound :data:`SHORT_STALL` is given.
STALL_S = 0.2


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
    1, 2, 3, ..., and the result carries the excerpt and the outcome. With
    ``--mcp-message delta``, a host using only the client's progress_callback
    (a second call on the same connection) sees the live deltas as messages,
    in order, with strictly increasing progress."""
    recorder = _Recorder()
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    params = _params("--mcp-message", "delta")
    async with asyncio.timeout(30), Client(params, message_handler=recorder) as client:
        folded = await recorder.folder.call_tool(client, "bash", {"command": [PY, "-c", SPLIT]})
        frames, progress = list(recorder.frames), list(recorder.progress)
        called = await client.call_tool(
            "bash", {"command": [PY, "-c", SPLIT]}, progress_callback=on_progress
        )
        # The client runs callbacks in tasks of their own.
        while "".join(message or "" for _, message in seen) != SPLIT_TEXT:
            await asyncio.sleep(0.01)
    assert folded.text == SPLIT_TEXT
    assert folded.complete
    assert len(frames) >= 3
    assert progress == [float(i) for i in range(1, len(progress) + 1)]
    assert "\ufffd" not in "".join(frame.body.delta for frame in frames)
    result = folded.result
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["output"] == SPLIT_TEXT
    assert result.structured_content["exit_code"] == 0
    assert result.content[0].text.startswith(SPLIT_TEXT)  # type: ignore[union-attr]
    assert result.meta is not None
    assert result.meta[META_STREAM]["frames_sent"] == len(frames)
    assert not called.is_error
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


class _Raw:
    """A ``kigi-stream serve --mcp`` child spoken to in raw JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(
        cls, *options: str, limit: int = 64 * 1024 * 1024, argv: list[str] | None = None
    ) -> _Raw:
        """Start the child (with extra ``serve`` options; or ``argv``) and
        initialize; ``limit`` bounds a line, and what the reader buffers unread
        (twice that) before it stops taking the pipe."""
        proc = await asyncio.create_subprocess_exec(
            *(argv or [*SERVE, *options]),
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
async def test_a_line_over_the_limit_is_refused_unread() -> None:
    """A line longer than --max-frame-bytes gets -32600 without being parsed,
    and the next request is served."""
    async with asyncio.timeout(30):
        raw = await _Raw.start("--max-frame-bytes", "4096")
        await over_long_line_refused(raw)
        assert await raw.close() == 0


async def _start_sleeping_call(raw: _Raw, request_id: int, pidfile: Path) -> int:
    """Start a ``bash`` call that writes its pid and sleeps; return the pid (the
    leader of the command's process group) once written."""
    await raw.send(bash_call(request_id, f"echo $$ > {pidfile}; sleep 60"))
    while not pidfile.exists() or not pidfile.read_text().strip():
        await asyncio.sleep(0.02)
    return int(pidfile.read_text())


@pytest.mark.slow
@_sync
async def test_a_host_that_stops_reading_loses_frames_said_in_the_next_frame_and_the_result() -> (
    None
):
    """A host that stops reading mid-flood: once a notification has waited
    the stall bound (``stall_s``, shortened here), the call drops its oldest
    queued frames instead of waiting; the next frame sent says how many
    (dropped_count), the result counts them all and says so to the model,
    progress still rises by one per notification,
    the message of each frame after dropped ones starts with the marker that
    says so (status mode, the default), and the folded stream reports the
    loss instead of hiding it."""
    # 13 MB over at least 1.2 s, so the flood outlasts the host's pause.
    flood = (
        "import sys, time\n"
        "block = ('ab é € 😀 xyz\\n' * 4096).encode()\n"
        "for _ in range(200):\n"
        "    sys.stdout.buffer.write(block); time.sleep(0.006)\n"
    )
    async with asyncio.timeout(60):
        raw = await _Raw.start(  # a host that really stops reading
            limit=256 * 1024, argv=[PY, "-c", SHORT_STALL, str(STALL_S)]
        )
        await raw.send(bash_call(40, [PY, "-c", flood], "slow"))
        first = await raw.read()
        assert first["method"] == "notifications/progress"
        # The host stops reading for three stall bounds; the pipe fills up.
        await asyncio.sleep(3 * STALL_S)
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
