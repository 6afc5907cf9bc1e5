"""``McpToolServer`` served as JSON lines in process (``serve_lines_mcp``, what
``kigi-stream serve --mcp`` runs over its stdin and stdout), spoken to in raw
lines over in-memory streams: the answers to what the official client will
not send (malformed lines, ids and tokens in use), the order of a call's
messages, cancellation, partial results only for calls that declare them;
and the server's stall bound (``stall_s``). The same promises end to end,
through a real ``serve --mcp`` child, are in test_mcp_stdio.py."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mcp import Client
from mcp_raw import INITIALIZE, INITIALIZED, bash_call, over_long_line_refused
from processes import until_group_gone
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.mcp import McpToolServer
from kigi_tool_runtime.mcp._lines import serve_lines_mcp
from kigi_tool_runtime.mcp._mapping import META_STREAM
from kigi_tool_runtime.mcp._partial import METHOD_PARTIAL_RESULT
from kigi_tool_runtime.mcp._server import STALL_S

PY = sys.executable
CAPS = "io.modelcontextprotocol/clientCapabilities"
#: Every exchange's deadline: generous, for a loaded machine.
DEADLINE_S = 60


class Lines:
    """A :class:`McpToolServer` of the ``bash`` tool served as JSON lines in
    process: lines go in through a ``StreamReader`` fed by :meth:`send`, and
    come out through this object (the server's sink) into another that
    :meth:`read` reads."""

    def __init__(self, server: McpToolServer, max_line_bytes: int) -> None:
        self.input = asyncio.StreamReader(limit=64 * 1024 * 1024)
        self.output = asyncio.StreamReader(limit=64 * 1024 * 1024)
        self.serving = asyncio.create_task(
            serve_lines_mcp(server, self.input, self, max_line_bytes=max_line_bytes)
        )

    # The server's sink.
    def write(self, data: bytes) -> None:
        self.output.feed_data(bytes(data))

    async def drain(self) -> None:
        return None

    @classmethod
    async def start(cls, max_line_bytes: int = 16 * 1024 * 1024, **options: Any) -> Lines:
        """Serve a new server (``options`` are :class:`McpToolServer`'s) and
        initialize."""
        lines = cls(McpToolServer([ShellTool()], **options), max_line_bytes)
        await lines.send(INITIALIZE)
        assert (await lines.read())["id"] == 0
        await lines.send(INITIALIZED)
        return lines

    async def send(self, message: Any) -> None:
        line = message if isinstance(message, bytes) else msgspec.json.encode(message)
        self.input.feed_data(line + b"\n")
        await asyncio.sleep(0)

    async def read(self) -> Any:
        line = await self.output.readline()
        assert line, "the server closed its output"
        return msgspec.json.decode(line)

    async def close(self) -> None:
        """End the input; serving returns once every call has stopped."""
        self.input.feed_eof()
        await self.serving


def _run(body: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(DEADLINE_S):
            await body

    asyncio.run(bounded())


def _gated(gate: Path, before: str, after: str) -> str:
    """A command that echoes ``before``, waits for ``gate`` to exist, then
    echoes ``after``: a call that runs until the test lets it end."""
    return (
        f"echo {before}; while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.01; done; echo {after}"
    )


# -- the stall bound -------------------------------------------------------------------


def test_the_stall_bound_is_one_second_unless_set() -> None:
    """The documented default: a notification waits one second before the
    host counts as stalled; ``stall_s`` sets it."""
    assert STALL_S == 1.0
    assert McpToolServer([ShellTool()])._stall_s == STALL_S
    assert McpToolServer([ShellTool()], stall_s=0.25)._stall_s == 0.25


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_stall_bound_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="stall_s must be a positive number of seconds"):
        McpToolServer([ShellTool()], stall_s=bad)


# -- malformed lines and ids -------------------------------------------------------------


def test_malformed_and_unknown_requests_get_errors_and_serving_goes_on() -> None:
    """Not JSON, or nested too deeply to parse: -32700; JSON but no message, or
    nested deeper than the SDK reads: -32600 echoing the id; an unknown method:
    -32601; an unknown tool: -32602; then tools/list still answers."""

    async def body() -> None:
        raw = await Lines.start()
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
        await raw.close()

    _run(body())


def test_a_line_over_the_limit_is_refused_unread() -> None:
    """A line longer than the line limit gets -32600 without being parsed, and
    the next request is served."""

    async def body() -> None:
        raw = await Lines.start(max_line_bytes=4096)
        await over_long_line_refused(raw)
        await raw.close()

    _run(body())


def test_a_call_with_a_null_id_is_answered_with_an_error(tmp_path: Path) -> None:
    """``"id": null`` on a tools/call: a -32600 error line with a null id (not
    taken as a notification and dropped), the command never run, and serving
    goes on."""
    pidfile = tmp_path / "pid"

    async def body() -> None:
        raw = await Lines.start()
        await raw.send(bash_call(None, f"echo $$ > {pidfile}"))
        error = await raw.read()
        assert error["id"] is None
        assert error["error"]["code"] == -32600
        await raw.send({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}})
        listing = await raw.read()
        assert listing["id"] == 9
        assert listing["result"]["tools"][0]["name"] == "bash"
        await raw.close()

    _run(body())
    assert not pidfile.exists()


def test_a_request_id_in_flight_is_refused_as_over_http(tmp_path: Path) -> None:
    """A second ``tools/call`` with the id of a call still running is refused
    with -32600 (its id echoed, as the HTTP transport refuses it) and never
    runs; the first call answers once, with its own result; once it ended the
    id is free again."""
    gate = tmp_path / "gate"

    async def body() -> None:
        raw = await Lines.start()
        await raw.send(bash_call(5, _gated(gate, "started", "first"), "t1"))
        assert (await raw.read())["params"]["message"] == "started"  # status mode: the newest line
        await raw.send(bash_call("5", "echo second", "t2"))
        reply = await raw.read()
        assert reply["id"] == "5"
        assert reply["error"]["code"] == -32600
        assert "already used by a request in flight" in reply["error"]["message"]
        gate.touch()
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
        await raw.close()

    _run(body())


# -- tokens in use ---------------------------------------------------------------------


def test_a_progress_token_in_use_is_refused_until_its_call_ends(tmp_path: Path) -> None:
    """On one connection, a call that brings the progress token of a call still
    running (as text: 7 and "7" are one) is a -32602 error, so two calls never
    mix their progress; the first call is unharmed, and once it ended the token
    is free again."""
    gate = tmp_path / "gate"

    async def body() -> None:
        raw = await Lines.start()
        await raw.send(bash_call(1, _gated(gate, "started", "first"), 7))
        note = await raw.read()
        assert note["params"]["message"] == "started"
        for request_id, token in ((2, 7), (3, "7")):
            await raw.send(bash_call(request_id, "echo second", token))
            reply = await raw.read()
            assert reply["id"] == request_id
            assert reply["error"]["code"] == -32602
            assert "in use by a call still running" in reply["error"]["message"]
        gate.touch()
        messages = [await raw.read(), await raw.read()]
        assert [m["params"]["message"] for m in messages[:1]] == ["first"]
        assert messages[1]["id"] == 1
        assert not messages[1]["result"]["isError"]
        await raw.send(bash_call(4, "echo again", 7))
        assert (await raw.read())["params"]["message"] == "again"
        assert (await raw.read())["id"] == 4
        await raw.close()

    _run(body())


def _partial_call(request_id: int, command: str, token: Any, progress: str | None) -> Any:
    """A call declaring SEP-2998 partial results under ``token`` (with a
    progress token of its own when ``progress`` is given, as the official
    client always sends one)."""
    call = bash_call(request_id, command, progress)
    call["params"].setdefault("_meta", {}).update(
        {CAPS: {"partialResults": {}}, "partialResultToken": token}
    )
    return call


def test_a_partial_result_token_in_use_is_refused_until_its_call_ends(tmp_path: Path) -> None:
    """A call bringing the ``partialResultToken`` of a call still running (with
    a progress token of its own) is a -32602 error naming that token; the first
    call's partial results alone go under it; once it ended, the token is free."""
    gate = tmp_path / "gate"

    async def body() -> None:
        raw = await Lines.start()
        await raw.send(_partial_call(1, _gated(gate, "started", "first"), "p", "g1"))
        note = await raw.read()
        assert note["params"]["content"][0]["text"] == "started\n"
        await raw.send(_partial_call(2, "echo second", "p", "g2"))
        reply = await raw.read()
        assert reply["id"] == 2
        assert reply["error"]["code"] == -32602
        assert "partialResultToken 'p' is in use" in reply["error"]["message"]
        gate.touch()
        rest = [await raw.read()]
        while "id" not in rest[-1]:
            rest.append(await raw.read())
        assert rest[-1]["id"] == 1
        texts = [n["params"]["content"][0]["text"] for n in rest[:-1] if n["params"]["content"]]
        assert texts == ["first\n"]
        await raw.send(_partial_call(3, "echo again", "p", "g3"))
        assert (await raw.read())["params"]["content"][0]["text"] == "again\n"
        await raw.close()

    _run(body())


# -- partial results only for a call that declares them ----------------------------------


async def _one_call(meta: dict[str, Any], command: str = "printf 'one\\n'") -> list[Any]:
    """One tools/call of ``command`` with ``meta``: every message the server
    wrote for it, its response last."""
    raw = await Lines.start()
    call = bash_call(1, command)
    call["params"]["_meta"] = meta
    await raw.send(call)
    out = [await raw.read()]
    while out[-1].get("id") != 1:
        out.append(await raw.read())
    await raw.close()
    return out


def test_a_call_that_does_not_declare_gets_no_partial_results() -> None:
    """A token without the capability: nothing streamed on either channel (no
    progressToken either); with a progressToken, progress as before."""

    async def body() -> None:
        bare = await _one_call({"partialResultToken": "p-2"})
        assert [message.get("id") for message in bare] == [1]
        assert bare[0]["result"]["_meta"][META_STREAM]["progress_requested"] is False
        progress = await _one_call({"partialResultToken": "p-3", "progressToken": "g"})
        methods = {message.get("method") for message in progress[:-1]}
        assert methods == {"notifications/progress"}
        declared = await _one_call({CAPS: {"partialResults": {}}, "partialResultToken": "p-4"})
        assert {message.get("method") for message in declared[:-1]} == {METHOD_PARTIAL_RESULT}

    _run(body())


def test_the_wire_is_the_drafts_numbered_per_token_and_before_the_response() -> None:
    async def body() -> None:
        command = shlex.join([PY, "-c", SPLIT])
        out = await _one_call({CAPS: {"partialResults": {}}, "partialResultToken": "p-1"}, command)
        *notes, response = out
        assert response["id"] == 1
        assert {note["method"] for note in notes} == {METHOD_PARTIAL_RESULT}
        params = [note["params"] for note in notes]
        assert [p["seq"] for p in params] == list(range(len(params)))
        assert all(p["partialResultToken"] == "p-1" for p in params)
        *frames, final = params
        assert final == {
            "partialResultToken": "p-1",
            "seq": len(frames),
            "content": [],
            "final": True,
        }
        assert all(set(p) == {"partialResultToken", "seq", "content", "_meta"} for p in frames)
        assert "".join(p["content"][0]["text"] for p in frames) == SPLIT_TEXT
        assert response["result"]["_meta"][META_STREAM]["frames_sent"] == len(frames)
        assert SPLIT_TEXT in response["result"]["content"][0]["text"]  # still whole

    _run(body())


def test_a_declared_call_with_a_bad_token_is_refused() -> None:
    async def body() -> None:
        (reply,) = await _one_call({CAPS: {"partialResults": {}}, "partialResultToken": True})
        assert reply["error"]["code"] == -32602
        assert "partialResultToken" in reply["error"]["message"]

    _run(body())


# -- a call's messages, and cancelling it -----------------------------------------------


def test_every_notification_of_a_call_precedes_its_response() -> None:
    """Each call's progress notifications all come before its response,
    numbered 1, 2, 3, ...; none follows it."""

    async def body() -> None:
        raw = await Lines.start()
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
        await raw.close()

    _run(body())


def test_notifications_cancelled_stops_the_call_without_a_response(tmp_path: Path) -> None:
    """notifications/cancelled for a running call stops its process group; the
    call is never answered, and the next request is."""
    pidfile = tmp_path / "pid"

    async def body() -> None:
        raw = await Lines.start()
        command = f"echo $$ > {pidfile}; while :; do echo tick; sleep 0.01; done"
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
        await raw.close()

    _run(body())


# -- through the official client, in process ---------------------------------------------


def test_deadline_in_meta_ends_the_call_with_a_timeout_error(tmp_path: Path) -> None:
    """_meta dev.kigi/deadline_ms bounds the call: a timeout error result with
    the kigi code, and the command is stopped."""
    pidfile = tmp_path / "pid"

    async def body() -> None:
        async with Client(McpToolServer([ShellTool()]).server) as client:
            result = await client.call_tool(
                "bash",
                {"command": f"echo $$ > {pidfile}; sleep 30"},
                meta={"dev.kigi/deadline_ms": 300},
            )
            assert result.is_error
            assert result.meta is not None
            assert result.meta["dev.kigi/error"]["kind"] == "timeout"
            await until_group_gone(int(pidfile.read_text()))

    _run(body())


# -- the end of input --------------------------------------------------------------------

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
}


async def _serve_to_the_end(messages: list[Any]) -> dict[Any, Any]:
    """Send every message and end the input at once; once serving returned,
    the answers written, by id."""
    raw = Lines(McpToolServer([ShellTool()]), 16 * 1024 * 1024)
    for message in messages:
        await raw.send(message)
    await raw.close()
    raw.output.feed_eof()
    answers = {}
    while line := await raw.output.readline():
        message = msgspec.json.decode(line)
        if "id" in message:
            answers[message["id"]] = message
    return answers


def test_a_ping_and_a_tools_list_sent_just_before_the_end_are_answered() -> None:
    async def body() -> None:
        answers = await _serve_to_the_end(
            [
                INITIALIZE,
                INITIALIZED,
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            ]
        )
        assert sorted(answers) == [0, 1, 2]
        assert answers[1]["result"] == {}
        assert [tool["name"] for tool in answers[2]["result"]["tools"]] == ["bash"]

    _run(body())


def test_2026_07_28_requests_sent_just_before_the_end_are_answered() -> None:
    """Stateless: no handshake, the envelope in each request's ``_meta``."""

    async def body() -> None:
        answers = await _serve_to_the_end(
            [
                {
                    "jsonrpc": "2.0",
                    "id": "d",
                    "method": "server/discover",
                    "params": {"_meta": ENVELOPE},
                },
                {
                    "jsonrpc": "2.0",
                    "id": "l",
                    "method": "tools/list",
                    "params": {"_meta": ENVELOPE},
                },
            ]
        )
        assert sorted(answers) == ["d", "l"]
        assert "2026-07-28" in answers["d"]["result"]["supportedVersions"]
        assert [tool["name"] for tool in answers["l"]["result"]["tools"]] == ["bash"]

    _run(body())
