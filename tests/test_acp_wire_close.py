"""The end of an ACP connection while prompts run: the SDK's ``close`` cancels
the handlers still running. A handler that answers its cancelled request
(``stopReason: "cancelled"``, as the protocol asks) has that answer written
by ``StdioWire``, or dropped when the output is gone, never a
``ConnectionError`` that fails the close and with it ``run_agent``
(``acp/_stdio.py`` Rule 5); a call cancelled as its update's send fails
raises its cancellation (``acp/_host.py`` Rule 5)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from acp import PROTOCOL_VERSION
from acp.agent.connection import AgentSideConnection
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse
from sinks import KeptSink

from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.acp import AcpToolCalls
from kigi_tool_runtime.acp._stdio import StdioWire

pytestmark = pytest.mark.timeout(60)

#: Prompts running when the connection closes.
PROMPTS = 8


class _WaitingAgent:
    """Each prompt waits until cancelled, then answers ``cancelled``."""

    def __init__(self) -> None:
        self.running = 0
        self.all_running = asyncio.Event()
        self._sessions = 0

    def on_connect(self, conn: Any) -> None:
        pass

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._sessions += 1
        return NewSessionResponse(session_id=f"session-{self._sessions}")

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self.running += 1
        if self.running == PROMPTS:
            self.all_running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return PromptResponse(stop_reason="cancelled")
        raise AssertionError("unreachable")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _requests() -> bytes:
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    ]
    for n in range(1, PROMPTS + 1):
        messages.append(
            {
                "jsonrpc": "2.0",
                "id": 100 + n,
                "method": "session/new",
                "params": {"cwd": "/", "mcpServers": []},
            }
        )
    for n in range(1, PROMPTS + 1):
        messages.append(
            {
                "jsonrpc": "2.0",
                "id": 200 + n,
                "method": "session/prompt",
                "params": {
                    "sessionId": f"session-{n}",
                    "prompt": [{"type": "text", "text": "wait"}],
                },
            }
        )
    return b"".join(map(_line, messages))


@pytest.mark.parametrize("output", ["open", "lost"])
async def test_answers_to_handlers_cancelled_by_the_close_do_not_fail_it(output: str) -> None:
    """Prompts are running when the editor's input ends and the connection is
    closed: the close returns; with the output still open each prompt's
    ``cancelled`` answer is written, with it lost none is (nothing could
    take it)."""
    reader = asyncio.StreamReader()
    reader.feed_data(_requests())
    sink = KeptSink()
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    agent = _WaitingAgent()
    wire = StdioWire(reader, sink, lost)
    connection = AgentSideConnection(agent, wire, listening=False)
    listening = asyncio.create_task(connection.listen())
    await agent.all_running.wait()
    if output == "lost":
        lost.set_result(None)
    reader.feed_eof()
    await listening
    await connection.close()
    answers = {
        message["id"]: message
        for message in map(json.loads, bytes(sink.written).splitlines())
        if "id" in message and "method" not in message
    }
    prompts = {200 + n for n in range(1, PROMPTS + 1)}
    if output == "open":
        assert prompts <= answers.keys()
        assert {answers[n]["result"]["stopReason"] for n in prompts} == {"cancelled"}
    else:
        assert not prompts & answers.keys()


class _ClosingUpdates:
    """A connection closed under a call's task: the SDK cancels the task (its
    handler) as the call's send fails with ``ConnectionError``, the order the
    SDK's ``close`` gives them when a send was about to go out."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        assert self.task is not None
        self.task.cancel()
        raise ConnectionError("Connection closed")


async def test_a_call_cancelled_as_its_send_fails_raises_its_cancellation() -> None:
    """``AcpToolCalls`` Rule 5: a call whose task is cancelled while the send
    it waits on fails on the closed connection raises ``CancelledError``
    (Rule 3), not an exception group of the send's ``ConnectionError``, and
    stops its tool."""
    updates = _ClosingUpdates()
    calls = AcpToolCalls(updates)
    run = asyncio.create_task(calls.run("s1", ShellTool(), {"command": "sleep 30"}))
    updates.task = run
    with pytest.raises(asyncio.CancelledError):
        await run
    assert calls.running("s1") == 0


async def test_an_answer_to_an_editor_gone_is_dropped_an_update_fails() -> None:
    """The output gone, the connection not yet closed (``run_agent`` closes it
    next): a handler's answer is dropped, never failing its task (the SDK
    logs such a failure with a traceback); a notification the agent sends
    still fails with ``ConnectionError`` (Rule 2), so its call stops."""
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    lost.set_result(None)
    sink = KeptSink()
    wire = StdioWire(asyncio.StreamReader(), sink, lost)
    await wire.send({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}})
    await wire.send({"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": "x"}})
    with pytest.raises(ConnectionError):
        await wire.send({"jsonrpc": "2.0", "method": "session/update", "params": {}})
    assert sink.written == b""
