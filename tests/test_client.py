"""The client against a real `kigi-stream serve` process (and a few non-servers)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import math
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from bounded import run_within
from hypothesis import given
from processes import GONE_S, group_running, pid_alive, until_gone
from sinks import NullSink

from kigi_tool_protocol import (
    JsonRpcError,
    JsonRpcResponse,
    ToolCallResult,
    ToolErrorWire,
    WireError,
    json_codec,
)
from kigi_tool_protocol._tool_error import error_code_for
from kigi_tool_runtime import (
    Call,
    CallProgress,
    Client,
    Reassembler,
    RemoteToolError,
    ToolError,
    ToolErrorKind,
)
from kigi_tool_runtime._call._response import failure_of
from kigi_tool_runtime._consumer._stream_state import fold_of
from kigi_tool_runtime._process import PIPE_BYTES, group_alive
from kigi_tool_runtime._tools._runner import STOP_WAIT_S
from kigi_tool_runtime._transport import _client as client_module
from kigi_tool_runtime._transport._client import (
    CALL_BUFFER_FRAMES,
    CLOSE_GRACE_S,
    CLOSE_WAIT_S,
    MAX_CALL_TEXT_BYTES,
    TIMEOUT_GRACE_S,
)
from kigi_tool_runtime.testing import wire_values
from kigi_tool_runtime.testing._consumer_strategies import progress_line

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]

#: Generous bound on a whole test body: a hang fails instead of blocking the suite.
#: Never a timing assertion.
TEST_WAIT_S = 120.0

T = TypeVar("T")


def _run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return run_within(body(), TEST_WAIT_S)


async def _running(client: Client, command: str) -> tuple[Call, CallProgress]:
    """A call of ``command``, once its first frame has come: the call and that frame."""
    call = client.call("bash", {"command": command})
    first = await call.__anext__()
    assert isinstance(first, CallProgress)
    return call, first


async def _collect(call: Any) -> tuple[list[CallProgress], ToolCallResult]:
    progress: list[CallProgress] = []
    async for item in call:
        if isinstance(item, ToolCallResult):
            return progress, item
        progress.append(item)
    raise AssertionError("the call ended without a result")


@given(wire=wire_values(ToolErrorWire))
def test_a_received_error_is_a_tool_error_of_its_kind(wire: ToolErrorWire) -> None:
    """An error reply, decoded off the wire, raises a ``ToolError`` of the wire's
    kind whose ``to_wire`` is the received wire, byte for byte (every variant)."""
    number = error_code_for(wire)
    line = json_codec.encode(
        JsonRpcResponse[Any](id=1, error=JsonRpcError(code=number, message="m", data=wire))
    )
    failure = failure_of(json_codec.decode(line, JsonRpcResponse[Any]))
    error = RemoteToolError(failure.wire, failure.message, number=failure.number)
    assert isinstance(error, ToolError)
    assert error.kind is ToolErrorKind(wire.code)
    assert json_codec.encode(error.to_wire()) == json_codec.encode(wire)
    assert error.to_wire() == ToolError.from_wire(wire, "m").to_wire()
    assert (error.wire, error.number) == (wire, number)


def test_a_call_streams_and_returns() -> None:
    """Progress arrives in seq order and reassembles to the output; the result is last."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call = client.call(
                "bash", {"command": "printf 'héllo '; sleep 0.3; printf wörld"}, keep_text=True
            )
            progress, result = await _collect(call)
            assert [p.seq for p in progress] == list(range(len(progress)))
            assert "".join(p.appended.text or "" for p in progress) == "héllo wörld"
            state = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
            assert state is not None
            assert state.text == "héllo wörld"
            assert state.report().complete
            assert result.tool_call_id == call.tool_call_id
            value: Any = result.output.value
            assert value["exit_code"] == 0

    _run(body)


def test_two_concurrent_calls_each_get_their_own_stream() -> None:
    """Two calls in flight at once interleave on the wire and each reassembles alone."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            a = client.call(
                "bash", {"command": "for i in 1 2 3; do echo a$i; sleep 0.2; done"}, keep_text=True
            )
            b = client.call(
                "bash", {"command": "for i in 1 2 3; do echo b$i; sleep 0.2; done"}, keep_text=True
            )
            (_, ra), (_, rb) = await asyncio.gather(_collect(a), _collect(b))
            text_a = a.reassembler.stream(a.tool_call_id, "bash_output_chunk")
            text_b = b.reassembler.stream(b.tool_call_id, "bash_output_chunk")
            assert text_a is not None
            assert text_b is not None
            assert (text_a.text, text_b.text) == ("a1\na2\na3\n", "b1\nb2\nb3\n")
            assert ra.tool_call_id != rb.tool_call_id
            assert client.statistics().calls == 2

    _run(body)


def test_a_call_can_be_cancelled() -> None:
    """cancel() sends the hook Cancel; the call ends with a cancelled error."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call, _ = await _running(client, "echo started; sleep 60")
            await call.cancel()
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind is ToolErrorKind.CANCELLED
            assert caught.value.wire.code == "cancelled"
            assert caught.value.number == -32603

    _run(body)


def test_a_call_times_out() -> None:
    """A timeout is sent as deadline_ms; the call fails with a timeout error."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call = client.call("bash", {"command": "sleep 60"}, timeout=0.5)
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind is ToolErrorKind.TIMEOUT
            assert caught.value.wire.code == "timeout"

    _run(body)


def test_a_silent_server_still_times_out_on_the_client() -> None:
    """A peer that never answers cannot hang a call with a timeout: the client fails it."""

    async def body() -> None:
        silent = [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(60)"]
        client = await Client.spawn(silent, timeout_grace=SHORT_GRACE_S)
        try:
            call = client.call("bash", {"command": "true"}, timeout=0.2)
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.wire.code == "timeout"
            assert "the server did not answer in time" in caught.value.message
        finally:
            assert client.process is not None
            client.process.kill()
            await client.aclose()

    _run(body)


#: A client's timeout grace in tests that wait it out (the default is 5 s).
SHORT_GRACE_S = 0.3


@pytest.mark.parametrize("grace", [0.0, -1.0, math.inf, math.nan])
def test_a_timeout_grace_that_is_not_positive_and_finite_is_refused(grace: float) -> None:
    """Client, Client.connect and Client.spawn refuse such a grace with a clear
    error, and spawn starts nothing."""

    async def body() -> None:
        reader = asyncio.StreamReader()
        with pytest.raises(ValueError, match="timeout_grace must be > 0 seconds and finite"):
            Client(reader, NullSink(), timeout_grace=grace)
        with pytest.raises(ValueError, match="timeout_grace must be > 0 seconds and finite"):
            await Client.connect(reader, NullSink(), timeout_grace=grace)
        with pytest.raises(ValueError, match="timeout_grace must be > 0 seconds and finite"):
            await Client.spawn(["/nonexistent/never-started"], timeout_grace=grace)

    _run(body)


@pytest.mark.parametrize("grace", [None, 0.25])
def test_a_call_times_out_its_grace_past_its_timeout_by_default_five_seconds(
    grace: float | None,
) -> None:
    """In process: a call with a timeout is given up its grace past it, 5 s
    (TIMEOUT_GRACE_S, as documented) unless the client was given another."""

    async def body() -> None:
        reader = asyncio.StreamReader()
        if grace is None:
            client = Client(reader, NullSink())
        else:
            client = Client(reader, NullSink(), timeout_grace=grace)
        call = client.call("bash", {"command": "true"}, timeout=2.0)
        terms = call._terms
        assert terms.deadline == terms.started + 2.0 + (grace or 5.0)
        reader.feed_eof()  # the server's output ends: nothing left to wait for
        await client.aclose()

    assert TIMEOUT_GRACE_S == 5.0
    _run(body)


def test_a_server_killed_mid_call_gives_connection_lost() -> None:
    """Killing the server while a call waits fails it with connection_lost, naming the exit."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call, _ = await _running(client, "echo started; sleep 60")
            assert client.process is not None
            client.process.kill()
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.wire.code == "connection_lost"
            assert caught.value.kind is ToolErrorKind.CONNECTION_LOST
            assert caught.value.number == -32004
            assert "server exited with code -9" in caught.value.message
            later = client.call("bash", {"command": "true"})
            with pytest.raises(RemoteToolError, match="connection to the tool server lost"):
                await later.result()

    _run(body)


def test_a_program_that_is_no_server_fails_calls_clearly() -> None:
    """A child that prints garbage and exits: the garbage is counted, the call gets
    connection_lost."""

    async def body() -> None:
        liar = [sys.executable, "-c", "print('hello, not json'); print('{\"a\":1}')"]
        async with await Client.spawn(liar) as client:
            call = client.call("bash", {"command": "true"})
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.wire.code == "connection_lost"
            assert client.statistics().lines_unused == 2

    _run(body)


def test_a_tool_error_arrives_as_remote_tool_error() -> None:
    """A server-side error (unknown tool) is raised with its wire data and number."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            with pytest.raises(RemoteToolError) as caught:
                await client.call("no_such_tool", {}).result()
            assert caught.value.wire.code == "tool_not_found"
            assert caught.value.number == -32011
            assert caught.value.kind is ToolErrorKind.TOOL_NOT_FOUND
            tools = await client.list_tools()
            assert [tool["id"] for tool in tools] == ["bash"]

    _run(body)


def test_leaving_a_call_early_cancels_it() -> None:
    """Leaving `async with call:` early sends Cancel (the tool's process is gone);
    the server stays usable."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            async with client.call("bash", {"command": "echo $$; exec sleep 60"}) as call:
                first = await call.__anext__()
                assert isinstance(first, CallProgress)
                pid = int(first.appended.text or "")
            with pytest.raises(StopAsyncIteration):
                await call.__anext__()
            for _ in range(600):  # generous: the server kills it after the cancel
                if not Path(f"/proc/{pid}").exists():
                    break
                await asyncio.sleep(0.05)
            assert not Path(f"/proc/{pid}").exists()
            _, result = await _collect(client.call("bash", {"command": "echo after"}))
            value: Any = result.output.value
            assert value["output"] == "after\n"

    _run(body)


def test_bad_call_arguments_are_rejected() -> None:
    """A non-positive timeout and a reused call id are ValueErrors naming the problem."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            with pytest.raises(ValueError, match="timeout must be > 0 seconds, got 0"):
                client.call("bash", {"command": "true"}, timeout=0)
            client.call("bash", {"command": "sleep 60"}, tool_call_id="dup")
            with pytest.raises(ValueError, match="tool_call_id 'dup' is already in flight"):
                client.call("bash", {"command": "true"}, tool_call_id="dup")

    _run(body)


def test_a_reader_that_stops_sees_a_marked_hole_and_a_report_that_says_so() -> None:
    """The issue's case, smaller: ``seq`` floods a real server while the consumer
    takes nothing until the call has ended. The text printed from the items, as
    the README prints it, holds a gap marker exactly where lines are missing
    (the lines before it and after it each run on without a hole), the marker
    counts the missing bytes, and the summary does not say the call was whole."""

    async def body() -> None:
        async with await Client.spawn(SERVE, call_buffer_frames=8) as client:
            call = client.call("bash", {"command": "seq 1 200000"}, timeout=60)
            await client._flush()
            while call.outcome is None:  # a reader that stopped, until the end
                await asyncio.sleep(0.05)
            progress, _ = await _collect(call)
            assert call.frames_dropped > 0
            printed = "".join(item.appended.render() for item in progress)
            head, marker, tail = re.split(r"(\[\.\.\. [0-9-]+ bytes lost \.\.\.\])", printed)
            lost = int(marker.split()[1])
            whole = "".join(f"{n}\n" for n in range(1, 200001))
            assert head == ""  # the oldest items were dropped: the text starts lost
            assert whole.endswith(tail)
            assert lost == len(whole) - len(tail)
            [report] = call.reassembler.reports(ended=True)
            assert not report.complete
            assert "dropped_frames" in call.reassembler.summary(ended=True)

    _run(body)


def test_arguments_json_cannot_carry_leave_no_call_behind() -> None:
    """Unencodable arguments raise WireError from call(), send nothing, and leave
    the call id free: the next call with it runs."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            with pytest.raises(WireError, match="cannot encode JsonRpcRequest"):
                client.call("bash", {"command": object()}, tool_call_id="same")
            assert client.statistics().calls == 0
            _, result = await _collect(
                client.call("bash", {"command": "echo ok"}, tool_call_id="same")
            )
            assert result.tool_call_id == "same"
            assert client.statistics().calls == 1

    _run(body)


def test_a_consumer_that_falls_behind_loses_the_oldest_items_visibly() -> None:
    """Past the per-call buffer the oldest untaken items are dropped and counted,
    the first item left renders a gap marker for their bytes before its text,
    the loss report says so (not complete), the reassembled view still holds
    every frame, and the result arrives."""

    async def body() -> None:
        # Ten writes, each after a pause longer than the server's tick: ten frames.
        slow = "import os, time\nfor i in range(10): os.write(1, b'%d;' % i); time.sleep(0.15)\n"
        async with await Client.spawn(SERVE, call_buffer_frames=4) as client:
            call = client.call("bash", {"command": [sys.executable, "-c", slow]}, keep_text=True)
            await client._flush()
            while call.outcome is None:  # do not consume until the call has ended
                await asyncio.sleep(0.05)
            progress, result = await _collect(call)
            assert len(progress) == 4
            assert call.frames_dropped > 0
            state = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
            assert state is not None
            assert state.frames == len(progress) + call.frames_dropped
            assert state.text == "".join(f"{i};" for i in range(10))
            report = state.report()
            assert not report.complete
            dropped = [a for a in report.anomalies if a.kind == "dropped_frames"]
            assert len(dropped) == call.frames_dropped
            assert "the client dropped the untaken progress item" in dropped[0].detail
            kept = "".join(item.appended.text or "" for item in progress)
            lost = 20 - len(kept)
            printed = "".join(item.appended.render() for item in progress)
            assert printed == f"[... {lost} bytes lost ...]" + kept
            assert state.text.endswith(kept)
            value: Any = result.output.value
            assert value["total_bytes"] == 20

    _run(body)


class _NoWriter:
    """A writer that is never written to (the client is refused first)."""

    def write(self, data: bytes) -> None:
        raise AssertionError("nothing may be sent")

    async def drain(self) -> None:
        raise AssertionError("nothing may be sent")

    def close(self) -> None:
        raise AssertionError("nothing may be closed")


def test_client_bounds_are_checked() -> None:
    """A call buffer or frame limit below one is a ValueError naming both values."""

    async def body() -> None:
        with pytest.raises(ValueError, match="must be at least 1, got 16 and 0"):
            await Client.spawn(SERVE, max_frame_bytes=16, call_buffer_frames=0)
        with pytest.raises(ValueError, match="must be at least 1, got 0 and 1024"):
            await Client.connect(asyncio.StreamReader(), _NoWriter(), max_frame_bytes=0)
        assert CALL_BUFFER_FRAMES >= 64

    _run(body)


def test_close_terminates_a_server_that_ignores_end_of_input() -> None:
    """aclose() sends SIGTERM to a server that does not exit at end of input
    after its wait (here Python's default SIGTERM action ends it: -15)."""

    async def body() -> None:
        stubborn = [sys.executable, "-c", "import time; time.sleep(60)"]
        client = await Client.spawn(stubborn)
        await client.aclose(wait=0.3)
        assert client.process is not None
        assert client.process.returncode == -signal.SIGTERM
        assert CLOSE_WAIT_S > 0.3

    _run(body)


#: `kigi-stream serve` on a private pipe fed from the real stdin and never closed:
#: it never sees end of input, so only a signal stops it (SIGTERM: exit 128 + 15,
#: having cancelled its calls and stopped their process groups).
EOF_DEAF_SERVE = """
import os, sys, threading
from kigi_tool_runtime._cli._main import main
source = os.dup(0)
read_end, write_end = os.pipe()
os.dup2(read_end, 0)
os.close(read_end)

def copy():
    while data := os.read(source, 65536):
        os.write(write_end, data)

threading.Thread(target=copy, daemon=True).start()
sys.exit(main(["serve"]))
"""


def test_close_stops_a_deaf_server_with_sigterm_so_it_stops_its_commands() -> None:
    """A server that ignores end of input gets SIGTERM after the wait, not SIGKILL:
    it cancels its call (whose reply still arrives), stops the command's process
    group and exits 128 + 15."""

    async def body() -> None:
        client = await Client.spawn([sys.executable, "-c", EOF_DEAF_SERVE])
        group = 0
        try:
            call = client.call("bash", {"command": "echo $$; sleep 60"})
            first = await anext(call)
            assert isinstance(first, CallProgress)
            group = int(first.appended.text or "")
            await client.aclose(wait=0.3)
            assert client.process is not None
            assert client.process.returncode == 128 + signal.SIGTERM
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.wire.code == "cancelled"
            assert caught.value.message == "tool call cancelled by server"
            assert not group_running(group)  # zombies left to init run nothing
        finally:  # a failure must not leave the command behind
            if group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)

    _run(body)


#: A "server" that ignores both end of input and SIGTERM; it says it is ready
#: (one line) once SIGTERM is ignored, so the test never signals it sooner.
SIGTERM_DEAF = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("ready\\n")
sys.stdout.flush()
time.sleep(60)
"""


def test_close_kills_a_server_that_ignores_sigterm_after_the_grace() -> None:
    """A server still running ``grace`` seconds after SIGTERM gets SIGKILL (-9);
    the default grace outlasts the server's own wait for its tools to stop."""

    async def body() -> None:
        client = await Client.spawn([sys.executable, "-c", SIGTERM_DEAF])
        for _ in range(int(TEST_WAIT_S / 0.01)):
            if client.statistics().lines:
                break
            await asyncio.sleep(0.01)
        assert client.statistics().lines == 1, "the child never said it was ready"
        await client.aclose(wait=0.3, grace=0.3)
        assert client.process is not None
        assert client.process.returncode == -signal.SIGKILL
        assert CLOSE_GRACE_S > STOP_WAIT_S

    _run(body)


# -- the server's process group ----------------------------------------------------


async def _read_pid(path: Path) -> int:
    """The pid a child writes to ``path`` once it is set up (waited for)."""
    async with asyncio.timeout(GONE_S):
        while not (path.exists() and path.read_text().endswith("\n")):
            await asyncio.sleep(0.01)
    return int(path.read_text())


#: A "server" that ignores end of input and SIGTERM, and starts a grandchild in
#: its process group that ignores SIGTERM too; the grandchild writes its pid to
#: argv[1] once it ignores SIGTERM, so no signal comes sooner.
DEAF_FAMILY = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c",
    "import os, signal, sys, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()}\\\\n')\\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
    "time.sleep(60)", sys.argv[1]], stdout=subprocess.DEVNULL)
time.sleep(60)
"""

#: A "server" that starts a grandchild in its process group (which writes its
#: pid to argv[1] and sleeps, minding SIGTERM), then exits at end of input,
#: leaving the grandchild behind.
LEAVES_A_CHILD = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c",
    "import os, sys, time\\n"
    "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()}\\\\n')\\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
    "time.sleep(60)", sys.argv[1]], stdout=subprocess.DEVNULL)
sys.stdin.read()
"""


def _kill_group(pgid: int, *pids: int) -> None:
    """Clean-up after a failed test: the group ``pgid`` and the processes
    ``pids`` (in whatever group they are) must not outlive it; 0 is skipped."""
    if pgid:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    for pid in (pgid, *pids):
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_spawned_server_leads_its_own_process_group() -> None:
    """Client.spawn starts the server in its own session and process group, apart
    from the caller's (so a terminal's Ctrl-C reaches the caller, not the server)."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            assert client.process is not None
            pid = client.process.pid
            assert os.getpgid(pid) == pid
            assert os.getsid(pid) == pid
            assert os.getpgid(pid) != os.getpgid(0)
        assert client.process.returncode == 0
        assert not group_alive(pid)

    _run(body)


def test_close_kills_a_sigterm_deaf_server_and_its_group_after_the_grace(tmp_path: Path) -> None:
    """A server that ignores end of input and SIGTERM, with a grandchild in its
    group that ignores SIGTERM too: after wait and grace, SIGKILL ends both."""

    async def body() -> None:
        pidfile = tmp_path / "grandchild"
        client = await Client.spawn([sys.executable, "-c", DEAF_FAMILY, str(pidfile)])
        assert client.process is not None
        pgid = client.process.pid
        grandchild = 0
        try:
            grandchild = await _read_pid(pidfile)
            assert os.getpgid(grandchild) == pgid
            await client.aclose(wait=0.3, grace=0.3)
            assert client.process.returncode == -signal.SIGKILL
            await until_gone("the grandchild outlived the close", lambda: pid_alive(grandchild))
            await until_gone("the server's group outlived the close", lambda: group_alive(pgid))
            pgid = grandchild = 0
        finally:
            _kill_group(pgid, grandchild)

    _run(body)


def test_close_stops_what_an_exited_server_left_in_its_group(tmp_path: Path) -> None:
    """A server that exits at end of input but leaves a child in its group: the
    close stops that child (SIGTERM) instead of leaving it running."""

    async def body() -> None:
        pidfile = tmp_path / "grandchild"
        client = await Client.spawn([sys.executable, "-c", LEAVES_A_CHILD, str(pidfile)])
        assert client.process is not None
        pgid = client.process.pid
        grandchild = 0
        try:
            grandchild = await _read_pid(pidfile)
            await client.aclose()
            assert client.process.returncode == 0
            await until_gone("the left child outlived the close", lambda: pid_alive(grandchild))
            await until_gone("the server's group outlived the close", lambda: group_alive(pgid))
            pgid = grandchild = 0
        finally:
            _kill_group(pgid, grandchild)

    _run(body)


def test_a_cancelled_close_still_stops_the_server_and_its_commands() -> None:
    """Cancelled while waiting for a server that ignores end of input, aclose
    goes on to SIGTERM at once: the server stops its command's group and exits
    (128 + 15) before the CancelledError propagates."""

    async def body() -> None:
        client = await Client.spawn([sys.executable, "-c", EOF_DEAF_SERVE])
        assert client.process is not None
        pgid = client.process.pid
        group = 0
        try:
            call = client.call("bash", {"command": "echo $$; sleep 60"})
            first = await anext(call)
            assert isinstance(first, CallProgress)
            group = int(first.appended.text or "")
            closing = asyncio.create_task(client.aclose(wait=TEST_WAIT_S))
            await asyncio.sleep(0.3)
            assert not closing.done()
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            assert client.process.returncode == 128 + signal.SIGTERM
            assert not group_alive(pgid)
            await until_gone("the command's group outlived the close", lambda: group_alive(group))
            pgid = group = 0
        finally:
            _kill_group(pgid)
            _kill_group(group)

    _run(body)


def test_a_close_cancelled_twice_kills_a_sigterm_deaf_server_at_once(tmp_path: Path) -> None:
    """A cancelled close gives a SIGTERM-deaf server its grace; a second
    cancellation SIGKILLs its group at once, grandchild included."""

    async def body() -> None:
        pidfile = tmp_path / "grandchild"
        client = await Client.spawn([sys.executable, "-c", DEAF_FAMILY, str(pidfile)])
        assert client.process is not None
        pgid = client.process.pid
        grandchild = 0
        try:
            grandchild = await _read_pid(pidfile)
            closing = asyncio.create_task(client.aclose(wait=TEST_WAIT_S, grace=TEST_WAIT_S))
            await asyncio.sleep(0.1)
            closing.cancel()
            await asyncio.sleep(0.3)
            assert not closing.done(), "the first cancellation skipped the grace"
            assert client.process.returncode is None
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            async with asyncio.timeout(GONE_S):
                assert await client.process.wait() == -signal.SIGKILL
            await until_gone("the grandchild outlived the close", lambda: pid_alive(grandchild))
            await until_gone("the server's group outlived the close", lambda: group_alive(pgid))
            pgid = grandchild = 0
        finally:
            _kill_group(pgid, grandchild)

    _run(body)


def test_a_spawn_that_fails_after_starting_the_server_leaves_no_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure between starting the server and connecting to it (here the line
    reader) stops the server's group before the error propagates."""
    marker = f"kigi-spawn-fails-{os.getpid()}"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", marker]

    def running() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker.encode() in (entry / "cmdline").read_bytes() and pid_alive(
                        int(entry.name)
                    ):
                        found.append(int(entry.name))
        return found

    def broken(limit: int) -> Any:
        raise RuntimeError("no reader today")

    monkeypatch.setattr(client_module, "LineReader", broken)

    async def body() -> None:
        try:
            with pytest.raises(RuntimeError, match="no reader today"):
                await Client.spawn(argv)
            assert running() == []
        finally:
            _kill_group(0, *running())

    _run(body)


def test_a_client_refuses_a_server_process_outside_its_own_group() -> None:
    """The constructor refuses a running process that does not lead its own
    group: the close could not stop it by its group."""

    async def body() -> None:
        proc = await asyncio.create_subprocess_exec(
            *SERVE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            with pytest.raises(ValueError, match=r"not its own: start it with Client\.spawn"):
                Client(proc.stdout, proc.stdin, process=proc)
        finally:
            proc.stdin.close()
            async with asyncio.timeout(GONE_S):
                assert await proc.wait() == 0

    _run(body)


#: A client process that spawns `kigi-stream serve`, starts a long command,
#: prints the server's pid and the command's group, then waits to be killed.
DYING_CLIENT = """
import asyncio, sys
from kigi_tool_runtime import CallProgress, Client

async def main() -> None:
    client = await Client.spawn([sys.executable, "-m", "kigi_tool_runtime", "serve"])
    call = client.call("bash", {"command": "echo $$; exec sleep 60"})
    first = await anext(call)
    assert isinstance(first, CallProgress) and client.process is not None
    print(client.process.pid, int(first.appended.text or ""), flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def test_a_server_whose_client_is_killed_stops_itself_and_its_command() -> None:
    """kill -9 of a client process that spawned `kigi-stream serve` running a long
    command: the server (in its own group) sees end of input, cancels the call,
    stops the command's group and exits; both groups are gone."""

    async def body() -> None:
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", DYING_CLIENT, stdout=asyncio.subprocess.PIPE
        )
        assert client.stdout is not None
        server = group = 0
        try:
            async with asyncio.timeout(GONE_S):
                server, group = map(int, (await client.stdout.readline()).split())
            assert os.getpgid(server) == server != os.getpgid(0)
            client.kill()
            assert await client.wait() == -signal.SIGKILL
            await until_gone("the server outlived its client", lambda: pid_alive(server))
            await until_gone("the server's group outlived it", lambda: group_alive(server))
            await until_gone("the command outlived its server", lambda: group_alive(group))
            server = group = 0
        finally:
            if client.returncode is None:
                client.kill()
                await client.wait()
            _kill_group(server)
            _kill_group(group)

    _run(body)


#: A session leader that takes the terminal on its stdin as its controlling
#: terminal and becomes an interactive bash: a terminal with job control, as a
#: person at a keyboard has one.
TERMINAL_SHELL = """
import fcntl, os, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
"""

#: The README's way, typed at that terminal: `asyncio.run` of a main that spawns
#: `kigi-stream serve` in `async with` and waits for a long command; it prints
#: its pid, the server's and the command's group, and, after Ctrl-C, the
#: server's exit status.
TERMINAL_CLIENT = """
import asyncio, os, sys
from kigi_tool_runtime import CallProgress, Client

clients = []

async def main() -> None:
    async with await Client.spawn([sys.executable, "-m", "kigi_tool_runtime", "serve"]) as client:
        clients.append(client)
        call = client.call("bash", {"command": "echo $$; exec sleep 300"})
        first = await anext(call)
        assert isinstance(first, CallProgress) and client.process is not None
        print("PIDS", os.getpid(), client.process.pid, int(first.appended.text or ""), flush=True)
        await call.result()

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("SERVER EXIT", clients[0].process.returncode, flush=True)
    raise
"""


class _Terminal:
    """A pseudo-terminal running an interactive bash: type into it, read what it
    shows. Every read is bounded by GONE_S."""

    def __init__(self) -> None:
        self.master, slave = os.openpty()
        env = {**os.environ, "PS1": "$ ", "TERM": "dumb", "HISTFILE": os.devnull}
        try:
            self.shell = subprocess.Popen(
                [sys.executable, "-c", TERMINAL_SHELL],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                env=env,
            )
        finally:
            os.close(slave)
        self.screen = b""

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def read_until(self, pattern: bytes) -> re.Match[bytes]:
        """Read until ``pattern`` shows after what earlier reads matched."""
        deadline = time.monotonic() + GONE_S
        while (found := re.search(pattern, self.screen)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} on the terminal: {self.screen[-2000:]!r}"
            if select.select([self.master], [], [], min(left, 0.1))[0]:
                with contextlib.suppress(OSError):  # EIO: every slave end is closed
                    self.screen += os.read(self.master, 65536)
        self.screen = self.screen[found.end() :]
        return found

    def hang_up(self) -> None:
        """Close the terminal, as closing its window does (SIGHUP)."""
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    def close(self) -> None:
        self.hang_up()
        _kill_group(self.shell.pid)
        self.shell.wait(GONE_S)


def _state(pid: int) -> str:
    """The one-letter state of ``pid`` (``T`` stopped), ``-`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "-"


def _until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GONE_S
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("keys", ["ctrl-c", "ctrl-z, fg, ctrl-c", "hang-up", "ctrl-z, hang-up"])
def test_at_a_terminal_ctrl_c_ctrl_z_and_hang_up_leave_nothing_running(
    keys: str, tmp_path: Path
) -> None:
    """A program run from an interactive shell in a pseudo-terminal spawns the
    server in `async with` and waits for a long command. Ctrl-C ends it, its close
    stops the server (which exits 0) and the command; Ctrl-Z stops only the
    program (the server and its command run on) and `fg` continues it; a hang-up,
    running or stopped, ends it and then the server and the command. Nothing is
    left running in any case."""
    program = tmp_path / "client.py"
    program.write_text(TERMINAL_CLIENT)
    terminal = _Terminal()
    client = server = group = 0
    try:
        terminal.read_until(rb"\$ ")
        terminal.type(f"{sys.executable} {program}\n".encode())
        found = terminal.read_until(rb"PIDS (\d+) (\d+) (\d+)\r?\n")
        client, server, group = map(int, found.groups())
        assert os.getpgid(client) == client != os.getpgid(server) == server != group
        if keys.startswith("ctrl-z"):
            terminal.type(b"\x1a")
            _until("Ctrl-Z did not stop the program", lambda: _state(client) == "T")
            assert _state(server) not in "TZ-", "Ctrl-Z reached the server"
            assert group_alive(group)
        if keys.endswith("hang-up"):
            terminal.hang_up()
        else:
            if keys.startswith("ctrl-z"):
                # Type `fg` only once the shell has taken the terminal back and
                # prompts: keys typed while it resets the terminal can be lost.
                terminal.read_until(rb"Stopped")
                terminal.read_until(rb"\$ ")
                terminal.type(b"fg\n")
                _until("fg did not continue the program", lambda: _state(client) != "T")
            terminal.type(b"\x03")
            assert terminal.read_until(rb"SERVER EXIT (-?\d+)").group(1) == b"0"
            terminal.type(b"echo exit=$?\n")
            assert terminal.read_until(rb"exit=(\d+)").group(1) == b"130"
        _until("the program outlived its terminal", lambda: not pid_alive(client))
        _until("the server outlived its client", lambda: not pid_alive(server))
        _until("the server's group outlived it", lambda: not group_alive(server))
        _until("the command outlived its server", lambda: not group_alive(group))
        client = server = group = 0
    finally:
        _kill_group(group)
        _kill_group(server)
        _kill_group(client)
        terminal.close()


def test_closing_the_client_lets_a_command_clean_up_while_it_stops(tmp_path: Path) -> None:
    """Leaving `async with` while a command runs: the server stops the command with
    SIGTERM and its grace, so a command that says goodbye on its output and then
    cleans up on SIGTERM does both before the close returns."""
    done = tmp_path / "cleaned"
    command = (
        f"trap 'echo stopping; echo cleaned up > {done}; exit 3' TERM;"
        " echo $$; while :; do sleep 0.1; done"
    )

    async def body() -> None:
        group = 0
        try:
            async with await Client.spawn(SERVE) as client:
                call = client.call("bash", {"command": command})
                first = await anext(call)
                assert isinstance(first, CallProgress)
                group = int(first.appended.render("").split()[0])
            assert done.read_text() == "cleaned up\n"
            assert not group_alive(group)
            group = 0
        finally:
            _kill_group(group)

    _run(body)


def test_a_spawned_server_gets_a_wide_pipe() -> None:
    """On Linux the client gives the server a PIPE_BYTES stdout pipe, when allowed."""

    async def body() -> None:
        allowed = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        async with await Client.spawn(SERVE) as client:
            assert client.process is not None
            pid = client.process.pid
            fd = os.open(f"/proc/{pid}/fd/1", os.O_RDONLY | os.O_NONBLOCK)
            try:
                size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
            finally:
                os.close(fd)
            assert size == min(PIPE_BYTES, allowed) or allowed < PIPE_BYTES

    _run(body)


def test_connect_wraps_streams_the_caller_opened() -> None:
    """Client.connect speaks over streams it did not start: a serve child's pipes."""

    async def body() -> None:
        proc = await asyncio.create_subprocess_exec(
            *SERVE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        client = await Client.connect(proc.stdout, proc.stdin, session_id="sess_mine")
        try:
            assert client.session_id == "sess_mine"
            _, result = await _collect(client.call("bash", {"command": "echo wrapped"}))
            value: Any = result.output.value
            assert value["output"] == "wrapped\n"
        finally:
            await client.aclose()
            assert await proc.wait() == 0

    _run(body)


#: Bound on a request that must fail at once: far above what failing takes, far
#: below the test's own bound, so a request that waits forever fails here.
AT_ONCE_S = 10.0


def test_every_request_fails_at_once_after_the_server_is_sigkilled() -> None:
    """After a SIGKILLed server's output ends, the call in flight, a new call and
    list_tools (with and without a timeout) each fail with connection_lost at once."""

    async def body() -> None:
        client = await Client.spawn(SERVE)
        group = 0
        try:
            assert [t["id"] for t in await client.list_tools()] == ["bash"]
            call, first = await _running(client, "echo $$; exec sleep 60")
            group = int(first.appended.render("").split()[0])
            assert client.process is not None
            client.process.kill()
            async with asyncio.timeout(AT_ONCE_S):
                with pytest.raises(RemoteToolError) as caught:
                    await call.result()
            assert caught.value.wire.code == "connection_lost"
            for timeout in (None, TEST_WAIT_S):
                async with asyncio.timeout(AT_ONCE_S):
                    with pytest.raises(RemoteToolError) as caught:
                        await (
                            client.list_tools()
                            if timeout is None
                            else client.list_tools(timeout=timeout)
                        )
                assert caught.value.wire.code == "connection_lost"
                assert "server exited with code -9" in caught.value.message
            async with asyncio.timeout(AT_ONCE_S):
                with pytest.raises(RemoteToolError, match="connection to the tool server lost"):
                    await client.call("bash", {"command": "true"}, timeout=TEST_WAIT_S).result()
        finally:
            if group:  # the killed server could not stop its command's group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
            await client.aclose()

    _run(body)


def test_requests_to_a_program_that_exits_at_once_fail_with_connection_lost() -> None:
    """`Client.spawn(["true"])`: list_tools fails with connection_lost, both while
    the exit is still unseen and once it is known, and after aclose too."""

    async def body() -> None:
        client = await Client.spawn(["true"])
        async with asyncio.timeout(AT_ONCE_S):
            with pytest.raises(RemoteToolError, match="connection to the tool server lost"):
                await client.list_tools()
            with pytest.raises(RemoteToolError, match="connection to the tool server lost"):
                await client.call("bash", {"command": "true"}).result()
            with pytest.raises(RemoteToolError, match="connection to the tool server lost"):
                await client.list_tools()
            await client.aclose()
            with pytest.raises(RemoteToolError) as caught:
                await client.list_tools()
            assert caught.value.wire.code == "connection_lost"

    _run(body)


def test_list_tools_times_out_on_a_server_that_never_answers() -> None:
    """list_tools(timeout=...) fails with a timeout error from a peer that reads
    but never answers; a timeout that is not positive is refused."""

    async def body() -> None:
        silent = [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(60)"]
        client = await Client.spawn(silent)
        try:
            async with asyncio.timeout(AT_ONCE_S):
                with pytest.raises(RemoteToolError) as caught:
                    await client.list_tools(timeout=0.2)
            assert caught.value.wire.code == "timeout"
            assert caught.value.kind is ToolErrorKind.TIMEOUT
            assert "tools.list got no answer within 0.2 s" in caught.value.message
            for bad in (0, -1.0, float("nan")):
                with pytest.raises(ValueError, match="timeout must be > 0"):
                    await client.list_tools(timeout=bad)
        finally:
            await client.aclose(wait=0.3)

    _run(body)


def test_a_server_that_stops_reading_cannot_hang_a_request_with_a_timeout() -> None:
    """A peer that never reads its input: the request's flush blocks on a full
    pipe, and the timeout still ends it (a call with timeout, list_tools)."""

    async def body() -> None:
        deaf = [sys.executable, "-c", "import time; time.sleep(60)"]
        client = await Client.spawn(deaf, timeout_grace=SHORT_GRACE_S)
        try:
            big = {"command": "x" * (4 * 1024 * 1024)}  # far past any pipe's buffer
            async with asyncio.timeout(SHORT_GRACE_S + AT_ONCE_S):
                with pytest.raises(RemoteToolError) as caught:
                    await client.call("bash", big, timeout=0.2).result()
            assert caught.value.wire.code == "timeout"
            async with asyncio.timeout(AT_ONCE_S):
                with pytest.raises(RemoteToolError) as caught:
                    await client.list_tools(timeout=0.2)
            assert caught.value.wire.code == "timeout"
        finally:
            await client.aclose(wait=0.3)

    _run(body)


DEEP_TALKER = r"""
import json, sys
request = json.loads(sys.stdin.readline())
out = sys.stdout.buffer
for line in (b"[" * 1000, b'{"a":' * 1000, b"[" * 200000,
             b'{"jsonrpc":"2.0","method":"tool_call_progress","params":' + b"[" * 5000,
             b'{"jsonrpc":"2.0","id":' + b"[" * 1000):
    out.write(line + b"\n")
out.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": []}}).encode())
out.write(b"\n")
out.flush()
sys.stdin.read()
"""


def test_lines_nested_too_deeply_are_counted_unused_and_reading_goes_on() -> None:
    """The client's reader refuses lines nested past what the decoder recurses
    (counted as unused) and goes on to the answer after them."""

    async def body() -> None:
        async with await Client.spawn([sys.executable, "-c", DEEP_TALKER]) as client:
            assert await client.list_tools(timeout=TEST_WAIT_S) == []
            assert client.statistics().lines_unused == 5

    _run(body)


def test_leaving_or_cancelling_a_call_to_a_server_that_stopped_reading_returns() -> None:
    """A peer that never reads its input: cancel() and leaving `async with call`
    (their notifications stuck behind a full pipe) return all the same, each
    within the client's timeout grace."""

    async def body() -> None:
        deaf = [sys.executable, "-c", "import time; time.sleep(60)"]
        client = await Client.spawn(deaf, timeout_grace=SHORT_GRACE_S)
        try:
            big = {"command": "x" * (4 * 1024 * 1024)}  # far past any pipe's buffer
            async with asyncio.timeout(2 * SHORT_GRACE_S + AT_ONCE_S):
                call = client.call("bash", big)
                await call.cancel()
                async with call:
                    pass
            assert isinstance(call.outcome, RemoteToolError)
            assert "was abandoned" in call.outcome.message
        finally:
            await client.aclose(wait=0.3)

    _run(body)


BAD_RESULT_TALKER = r"""
import json, sys
out = sys.stdout.buffer
for number in range(2):
    request = json.loads(sys.stdin.readline())
    tools = b'["\xff"]' if number == 0 else b"[]"  # invalid UTF-8, then a good answer
    out.write(b'{"jsonrpc":"2.0","id":%d,"result":{"tools":%s}}\n' % (request["id"], tools))
    out.flush()
sys.stdin.read()
"""


def test_a_result_that_cannot_be_decoded_fails_only_its_request() -> None:
    """A tools.list result that is not valid JSON text (invalid UTF-8 inside it)
    fails that request with internal_error; the connection and the next request
    go on."""

    async def body() -> None:
        async with await Client.spawn([sys.executable, "-c", BAD_RESULT_TALKER]) as client:
            with pytest.raises(RemoteToolError) as caught:
                await client.list_tools(timeout=AT_ONCE_S)
            assert caught.value.wire.code == "internal_error"
            assert "Invalid UTF-8" in caught.value.message
            assert await client.list_tools(timeout=TEST_WAIT_S) == []


def test_a_call_keeps_no_text_unless_asked_and_then_within_its_bound() -> None:
    """By default a call's reassembler keeps figures, not text (each item's
    delta is still there); asked to keep it, past MAX_CALL_TEXT_BYTES the
    stream stops keeping it and says why, while its figures go on."""

    async def body() -> None:
        async with await Client.spawn(SERVE) as client:
            call = client.call("bash", {"command": "printf abc"})
            progress, _ = await _collect(call)
            assert "".join(p.appended.text or "" for p in progress) == "abc"
            state = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
            assert state is not None
            assert state.report().text_bytes == 3
            with pytest.raises(ValueError, match="keeps no text"):
                _ = state.text

    _run(body)
    bounded = Reassembler(max_text_bytes=4)
    for delta, total in (("abc", 3), ("de", 5), ("f", 6)):
        bounded.absorb_line(progress_line("c", "k", {"delta": delta, "total_bytes": total}))
    state = bounded.stream("c", "k")
    assert state is not None
    assert state.report().text_bytes == 6
    assert state.report().complete
    assert fold_of(state).chunks == []
    with pytest.raises(ValueError, match="passed max_text_bytes=4"):
        _ = state.text
    assert MAX_CALL_TEXT_BYTES == 64 * 1024 * 1024
    # The README names it: it is importable from the package, not only from
    # the private module.
    assert MAX_CALL_TEXT_BYTES is MAX_CALL_TEXT_BYTES


def test_a_lost_connection_names_a_valid_tool_id_for_tools_list() -> None:
    """A tools.list request failed by a lost connection carries an error the
    SDK's own strict decoder accepts (a valid tool id)."""

    async def body() -> None:
        reader = asyncio.StreamReader()
        client = await Client.connect(reader, NullSink())
        listing = asyncio.ensure_future(client.list_tools())
        await asyncio.sleep(0)
        reader.feed_eof()
        with pytest.raises(RemoteToolError) as caught:
            await listing
        wire = caught.value.wire
        assert json_codec.decode(json_codec.encode(wire), ToolErrorWire) == wire
        await client.aclose()

    _run(body)


def test_the_client_refuses_frames_past_a_tools_declared_max_frame_bytes() -> None:
    """Once list_tools has said a tool declares max_frame_bytes, a frame for a
    call of it past that size is refused and said in the call's report (an
    undecodable record, then the bytes its totals prove lost); one within it
    is taken."""

    def reply(request_id: int, result: Any) -> bytes:
        return json_codec.encode({"jsonrpc": "2.0", "id": request_id, "result": result}) + b"\n"

    async def body() -> None:
        reader = asyncio.StreamReader()
        client = await Client.connect(reader, NullSink())
        listing = asyncio.ensure_future(client.list_tools())
        await asyncio.sleep(0)
        tool = {"id": "t", "capabilities": {"max_frame_bytes": 300}}
        reader.feed_data(reply(1, {"tools": [tool]}))
        await listing
        call = client.call("t", {}, tool_call_id="c")
        small = {"delta": "ab", "total_bytes": 2}
        large = {"delta": "x" * 1000, "total_bytes": 1002}
        after = {"delta": "z", "total_bytes": 1003}
        last = {"delta": "w", "total_bytes": 1004}
        for seq, frame in enumerate((small, large, after, last)):
            reader.feed_data(progress_line("c", "k", frame, seq) + b"\n")
        result = {"tool_call_id": "c", "output": {"kind": "json", "value": None}}
        reader.feed_data(reply(2, result))
        items = [item async for item in call]
        texts = [item.appended.text for item in items if isinstance(item, CallProgress)]
        assert texts == ["ab", "z", "w"]
        report = call.reassembler.stream("c", "k").report()  # type: ignore[union-attr]
        assert [gap.lost_bytes for gap in report.gaps] == [1000]
        assert [a.kind for a in call.reassembler.anomalies] == ["undecodable", "seq_gap"]
        assert "exceeds the frame limit of 300 bytes" in call.reassembler.anomalies[0].detail
        reader.feed_eof()
        await client.aclose()

    _run(body)
