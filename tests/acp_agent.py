"""A small ACP agent for the tests, run as a child process over its stdin and
stdout on the SDK's ``AgentSideConnection`` (``kigi_tool_runtime.acp.run_agent``).

Each prompt's text is a JSON call: ``args`` for the shell tool (or, with
``tool``, for that function tool of tests/function_tools.py), and
optionally ``shell`` (``ShellTool`` keywords), ``tail_bytes``, ``pacing``
(``Pacing`` keywords) and ``cancel_by``: ``"task_cancel"`` makes
``session/cancel`` cancel the prompt's task rather than the call. The agent
runs it as one tool call and answers ``end_turn``, or ``cancelled`` when
``session/cancel`` stopped it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from acp import PROTOCOL_VERSION
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse
from function_tools import TOOLS

from kigi_tool_runtime import ShellTool, Tool
from kigi_tool_runtime.acp import AcpToolCalls, Pacing, is_cancelled, run_agent
from kigi_tool_runtime.acp._mapping import DEFAULT_TAIL_BYTES

#: The function tools a prompt may name (``tool``), by id.
FUNCTIONS = {tool.id: tool for tool in TOOLS}


class TestAgent:
    def __init__(self) -> None:
        self._capabilities: Any = None
        self._calls: dict[str, AcpToolCalls] = {}
        self._tasks: dict[str, asyncio.Task[Any] | None] = {}
        self._sessions = 0

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **kwargs: Any
    ) -> InitializeResponse:
        self._capabilities = client_capabilities
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._sessions += 1
        return NewSessionResponse(session_id=f"session-{self._sessions}")

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        spec = json.loads(prompt[0].text)
        calls = AcpToolCalls(
            self._conn,
            client_capabilities=self._capabilities,
            tail_bytes=spec.get("tail_bytes", DEFAULT_TAIL_BYTES),
            pacing=Pacing(**spec.get("pacing", {})),
        )
        self._calls[session_id] = calls
        if spec.get("cancel_by") == "task_cancel":
            self._tasks[session_id] = asyncio.current_task()
        try:
            tool: Tool[Any] = (
                FUNCTIONS[spec["tool"]] if "tool" in spec else ShellTool(**spec.get("shell", {}))
            )
            end = await calls.run(session_id, tool, spec["args"])
        except asyncio.CancelledError:
            return PromptResponse(stop_reason="cancelled")
        finally:
            self._tasks.pop(session_id, None)
        return PromptResponse(stop_reason="cancelled" if is_cancelled(end) else "end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        task = self._tasks.get(session_id)
        if task is not None:
            task.cancel()  # the agent stops its whole turn
            return
        calls = self._calls.get(session_id)
        if calls is not None:
            calls.cancel(session_id)


if __name__ == "__main__":
    print("acp_agent: serving ACP on stdin/stdout", file=sys.stderr)
    asyncio.run(run_agent(TestAgent()))
