"""The kigi events as pydantic-ai's UI adapters forward them: a real agent
served over HTTP by uvicorn (``AGUIAdapter`` and ``VercelAIAdapter``
``dispatch_request``), read as a frontend reads it (server-sent events), live,
and folded back exactly."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from pydantic_ai import Agent
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai_models import Call, Script
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kigi_tool_runtime import ShellTool
from kigi_tool_runtime.pydantic_ai import KigiToolset, ToolOutputFolder


@asynccontextmanager
async def _served(agent: Agent[None, str], adapter: str) -> AsyncIterator[str]:
    """``agent`` behind a UI adapter on a free loopback port: its URL."""

    async def run(request: Request) -> Response:
        if adapter == "ag-ui":
            return await AGUIAdapter.dispatch_request(request, agent=agent)
        return await VercelAIAdapter.dispatch_request(request, agent=agent)

    app = Starlette(routes=[Route("/", run, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        await serving
        sock.close()


def _run_input(adapter: str) -> dict[str, Any]:
    if adapter == "ag-ui":
        return {
            "threadId": "thread-1",
            "runId": "run-1",
            "state": None,
            "messages": [{"id": "m1", "role": "user", "content": "go"}],
            "tools": [],
            "context": [],
            "forwardedProps": None,
        }
    return {
        "trigger": "submit-message",
        "id": "chat-1",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
    }


def _custom(adapter: str, event: dict[str, Any]) -> tuple[str, Any] | None:
    """The name and payload of a forwarded custom event, else None."""
    if adapter == "ag-ui":
        return (event["name"], event["value"]) if event["type"] == "CUSTOM" else None
    kind = event["type"]
    return (kind, event["data"]) if kind.startswith("data-") else None


def _tool_result(adapter: str, event: dict[str, Any]) -> tuple[str, str] | None:
    """The call id and the text of a forwarded tool result, else None."""
    if adapter == "ag-ui":
        if event["type"] == "TOOL_CALL_RESULT":
            return event["toolCallId"], event["content"]
        return None
    if event["type"] == "tool-output-available":
        return event["toolCallId"], event["output"]
    return None


async def _events(url: str, adapter: str) -> AsyncIterator[dict[str, Any]]:
    """The events of one run, as the server sends them."""
    async with (
        httpx2.AsyncClient(timeout=30) as client,
        client.stream(
            "POST", url, json=_run_input(adapter), headers={"accept": "text/event-stream"}
        ) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[len("data: ") :])


@pytest.mark.parametrize("adapter", ["ag-ui", "vercel-ai"])
async def test_a_ui_adapter_forwards_each_frame_live(tmp_path: Path, adapter: str) -> None:
    """Each frame is one custom event (AG-UI `CUSTOM` named `kigi.tool_output`,
    Vercel AI `data-kigi.tool_output`) whose payload holds the delta text (a
    frontend that knows nothing of kigi concatenates its `text`), named by its
    tool call, sent while the command still runs; the payloads fold back to
    the exact output, and the tool result is the model's text."""
    flag = tmp_path / "flag"
    command = f"printf 'grüße '; while [ ! -e {flag} ]; do sleep 0.02; done; printf '✓ 😀\\n'"
    script = Script([Call("bash", {"command": command}, "c1")], "done")
    agent = Agent(script.model(), toolsets=[KigiToolset([ShellTool(tick=0.01, max_delta_bytes=3)])])
    folder = ToolOutputFolder()
    customs: list[tuple[str, Any]] = []
    results: list[tuple[str, str]] = []
    async with asyncio.timeout(60), _served(agent, adapter) as url:
        async for event in _events(url, adapter):
            custom = _custom(adapter, event)
            if custom is not None:
                customs.append(custom)
                folder.absorb_custom(*custom)
                flag.touch()  # the command goes on only once a frame has arrived
            result = _tool_result(adapter, event)
            if result is not None:
                assert customs, "the tool result came before the output"
                results.append(result)
    outputs = [value for name, value in customs if name.endswith("kigi.tool_output")]
    assert "".join(value["text"] for value in outputs) == "grüße ✓ 😀\n"
    assert {value["tool_call_id"] for value in outputs} == {"c1"}
    assert {value["tool_name"] for value in outputs} == {"bash"}
    assert [value["seq"] for value in outputs] == list(range(len(outputs)))
    (end,) = [value for name, value in customs if name.endswith("kigi.tool_output_end")]
    assert end["ok"] is True
    assert end["complete"] is True
    assert end["closing"] == ""
    folded = folder["c1"]
    assert folded.text == "grüße ✓ 😀\n"
    assert folded.complete
    assert folded.ended
    ((call_id, text),) = results
    assert call_id == "c1"
    assert text.startswith("grüße ✓ 😀\n\n[exit code 0;")
