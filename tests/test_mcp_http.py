"""``kigi-stream serve --mcp-http`` as a real subprocess on loopback, driven by
the official MCP client over streamable HTTP."""

from __future__ import annotations

import asyncio
import functools
import json
import shlex
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_http_server import mcp_http_server
from mcp_raw import INITIALIZE, INITIALIZED, bash_call, http_headers
from processes import until_group_gone
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_runtime.mcp import ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_STREAM

PY = sys.executable
FLOOD = (
    "import sys, time\n"
    "block = ('ab é € 😀 xyz\\n' * 4096).encode()\n"
    "for _ in range(100000):\n"
    "    sys.stdout.buffer.write(block); time.sleep(0.01)\n"
)


def _sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on a fresh event loop (the suite's tests are sync)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """A ``kigi-stream serve --mcp-http 127.0.0.1:0`` child and its endpoint."""
    with mcp_http_server() as endpoint:
        yield endpoint


async def _wait_pid(pidfile: Path, seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.02)
    return int(pidfile.read_text())


@_sync
async def test_lists_the_shell_tool_over_http(url: str) -> None:
    """tools/list over streamable HTTP: bash with its object schemas."""
    async with asyncio.timeout(30), Client(url) as client:
        (bash,) = (await client.list_tools()).tools
    assert bash.name == "bash"
    assert bash.input_schema["type"] == "object"
    assert bash.input_schema["required"] == ["command"]
    assert bash.output_schema is not None
    assert bash.output_schema["type"] == "object"


@_sync
async def test_split_characters_fold_exactly_over_http(url: str) -> None:
    """The progress notifications of a call over HTTP fold into the exact
    output, and the result announces how many there were."""
    folder = ProgressFolder()
    async with asyncio.timeout(30), Client(url, message_handler=folder.message_handler) as client:
        folded = await folder.call_tool(client, "bash", {"command": [PY, "-c", SPLIT]})
    assert folded.text == SPLIT_TEXT
    assert folded.complete
    assert folded.result.meta is not None
    assert folded.result.meta[META_STREAM]["frames_sent"] >= 3
    assert folded.result.structured_content is not None
    assert folded.result.structured_content["output"] == SPLIT_TEXT


@_sync
async def test_cancelling_a_call_over_http_stops_its_process_group(
    url: str, tmp_path: Path
) -> None:
    """A call the client abandons mid-flood is cancelled on the server: its
    process group is stopped, and the connection goes on serving."""
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; exec {PY} -c {shlex.quote(FLOOD)}"
    folder = ProgressFolder()
    async with asyncio.timeout(60), Client(url, message_handler=folder.message_handler) as client:
        call = asyncio.create_task(folder.call_tool(client, "bash", {"command": command}))
        pid = await _wait_pid(pidfile)
        while folder.reassembler.records < 3:
            await asyncio.sleep(0.02)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until_group_gone(pid)
        assert [tool.name for tool in (await client.list_tools()).tools] == ["bash"]


@_sync
async def test_a_host_that_disconnects_mid_call_stops_it(url: str, tmp_path: Path) -> None:
    """A host that leaves (closes its client) while a call runs: the call is
    cancelled and its process group stopped."""
    pidfile = tmp_path / "pid"

    async def leave_mid_call() -> None:
        async with Client(url) as client:
            call = asyncio.create_task(
                client.call_tool("bash", {"command": f"echo $$ > {pidfile}; sleep 60"})
            )
            await _wait_pid(pidfile)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

    async with asyncio.timeout(30):
        await leave_mid_call()
        await until_group_gone(await _wait_pid(pidfile))


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_malformed_http_requests_are_refused_and_serving_goes_on(url: str) -> None:
    """A body that is not JSON and a foreign Host header are refused with HTTP
    errors (the second by the DNS-rebinding guard of a loopback server); a
    proper client still works afterwards."""
    status, body = _post(url, b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert status == 400, body
    assert json.loads(body)["error"]["code"] == -32700
    status, _ = _post(url, b"{}", headers={"Host": "evil.example:80"})
    assert status in (400, 403, 421)

    async def still_serving() -> None:
        async with asyncio.timeout(30), Client(url) as client:
            assert [tool.name for tool in (await client.list_tools()).tools] == ["bash"]

    asyncio.run(still_serving())


def _post_raw(url: str, message: Any, session: str | None = None) -> tuple[dict[str, str], str]:
    request = urllib.request.Request(
        url, data=json.dumps(message).encode(), method="POST", headers=http_headers(session)
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return {k.lower(): v for k, v in response.headers.items()}, response.read().decode()


def test_every_notification_precedes_the_response_on_the_http_stream(url: str) -> None:
    """On the request's own event stream, read raw, each call's progress
    notifications (1, 2, 3, ...) all come before its response, also when the
    last frames are made at the moment the command exits."""
    headers, _ = _post_raw(url, INITIALIZE)
    session = headers["mcp-session-id"]
    _post_raw(url, INITIALIZED, session)
    burst = "import sys; sys.stdout.write('x' * 3_000_000)"
    for request_id, command in ((1, [PY, "-c", SPLIT]), (2, [PY, "-c", burst])):
        _, body = _post_raw(
            url,
            bash_call(request_id, command, f"h{request_id}"),
            session,
        )
        events = [
            json.loads(line[len("data: ") :])
            for line in body.splitlines()
            if line.startswith("data: ") and line.strip() != "data:"
        ]
        *notes, response = events
        assert response["id"] == request_id
        assert all(note["method"] == "notifications/progress" for note in notes)
        assert [note["params"]["progress"] for note in notes] == [
            float(i) for i in range(1, len(notes) + 1)
        ]
        assert len(notes) >= 3
        assert response["result"]["_meta"][META_STREAM]["frames_sent"] == len(notes)


class _BreaksWhileStopping:
    """A stand-in for uvicorn's server whose ``serve`` fails once told to exit."""

    def __init__(self, config: Any) -> None:
        self.should_exit = False
        self.server_state = type("State", (), {"connections": []})()
        self.serving = asyncio.Event()

    async def serve(self, sockets: Any) -> None:
        self.serving.set()
        while not self.should_exit:
            await asyncio.sleep(0.01)
        raise LookupError("uvicorn broke while stopping")


class _NoCalls:
    """The part of ``McpToolServer`` ``serve_http`` uses, with no call running."""

    def __init__(self) -> None:
        self.server = self
        self.stopped = False

    def streamable_http_app(self, **options: Any) -> Any:
        return object()

    async def stop_calls(self) -> None:
        self.stopped = True


def test_a_failure_of_uvicorn_while_stopping_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve_http`` cancelled, and uvicorn fails as it stops: the failure is
    raised from ``serve_http`` (not lost behind the cancellation), after the
    calls were stopped, and no task of it runs on (``_http`` Rule 6)."""
    import socket

    from kigi_tool_runtime.mcp import _http

    made: list[_BreaksWhileStopping] = []

    def stand_in(config: Any) -> _BreaksWhileStopping:
        made.append(_BreaksWhileStopping(config))
        return made[-1]

    monkeypatch.setattr(_http, "_uvicorn_server", stand_in)

    async def main() -> None:
        server = _NoCalls()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            async with asyncio.timeout(30):
                serving = asyncio.create_task(_http.serve_http(server, sock))
                while not made or not made[0].serving.is_set():
                    await asyncio.sleep(0.01)
                serving.cancel()
                with pytest.raises(ExceptionGroup) as caught:
                    await serving
        assert [str(e) for e in caught.value.exceptions] == ["uvicorn broke while stopping"]
        assert server.stopped
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())
