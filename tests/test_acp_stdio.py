"""``kigi_tool_runtime.acp.run_agent``: an ACP agent on its stdin and stdout,
the wire fenced from what its tools print and the agent ended, its calls
stopped, when its editor goes away (``acp/_stdio.py``). Real processes over
real pipes; the editor killed outright is in ``test_acp.py``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities
from acp_editor import AGENT, CAPABILITIES, Editor
from hypothesis import given
from hypothesis import strategies as st
from processes import reap, until_gone, until_group_gone

from kigi_tool_runtime._process import group_alive
from kigi_tool_runtime.acp._stdio import parse_message

#: Every test's own bound on the agent it drives.
DEADLINE_S = 90

#: A command that prints its process group, then floods until stopped.
FLOOD = (
    "import os, sys, time\n"
    "print('pgid', os.getpgid(0), flush=True)\n"
    "time.sleep(0.3)\n"
    "while True: sys.stdout.write('y' * 999 + '\\n')"
)


@asynccontextmanager
async def _piped_agent(
    editor: Editor,
) -> AsyncIterator[tuple[ClientSideConnection, subprocess.Popen[bytes], Any, Any]]:
    """The test agent on pipes this test holds both ends of: the SDK's client
    connection over them, the agent, and the transports of the agent's input
    and output (closing one is the editor closing its end)."""
    to_agent, agent_in = os.pipe()
    agent_out, from_agent = os.pipe()
    proc = subprocess.Popen([sys.executable, str(AGENT)], stdin=to_agent, stdout=from_agent)
    os.close(to_agent)
    os.close(from_agent)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(agent_out, "rb")
    )
    write_transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(agent_in, "wb")
    )
    writer = asyncio.StreamWriter(write_transport, protocol, reader, loop)
    conn = ClientSideConnection(editor, writer, reader)
    try:
        yield conn, proc, write_transport, read_transport
    finally:
        read_transport.close()
        write_transport.close()
        reap(proc)


@pytest.mark.parametrize("how", ["input_closed", "output_closed"])
async def test_an_editor_that_closes_its_end_ends_the_agent(how: str) -> None:
    """Mid-flood, the editor closes the agent's input (end of input) or its
    own reading end of the agent's output (the agent's writes then fail, its
    input still open): the call stops, its process group gone, and the agent
    process exits."""
    editor = Editor()
    pgid = None
    try:
        async with asyncio.timeout(DEADLINE_S), _piped_agent(editor) as (conn, proc, into, out):
            declared = ClientCapabilities(field_meta=CAPABILITIES["append"])
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
            session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
            spec = {"args": {"command": [sys.executable, "-c", FLOOD]}}
            text = [text_block(json.dumps(spec))]
            turn = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=text))
            match = None
            while match is None:
                editor.changed.clear()
                await editor.changed.wait()
                calls = editor.calls()
                match = re.search(r"pgid (\d+)\n", "".join(calls[0].appends())) if calls else None
            pgid = int(match[1])
            while "y" * 999 not in "".join(editor.calls()[0].appends()):  # mid-flood
                editor.changed.clear()
                await editor.changed.wait()
            (into if how == "input_closed" else out).close()
            await until_group_gone(pgid)
            await until_gone(f"agent {proc.pid} still running", lambda: proc.poll() is None)
            turn.cancel()
            await conn.close()
    finally:
        if pgid is not None and group_alive(pgid):
            os.killpg(pgid, 9)


#: An agent whose tool prints during the call and starts a thread that writes
#: to descriptor 1 all the time, served by ``run_agent`` (imported first, as
#: the fence must come before what prints).
NOISY_AGENT = """
import asyncio, os, sys, threading, time

from acp import PROTOCOL_VERSION
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

from kigi_tool_runtime import Output, tool
from kigi_tool_runtime.acp import AcpToolCalls, run_agent


def chatter():
    while True:
        os.write(1, b"thread chatter to fd 1\\n")
        time.sleep(0.001)


@tool
async def noisy(out: Output, n: int) -> int:
    print("printed during the call")
    sys.stdout.write("no newline")
    threading.Thread(target=chatter, daemon=True).start()
    for i in range(n):
        out.write(f"line {i}\\n")
        await asyncio.sleep(0.002)
    return 2 * n


class NoisyAgent:
    def on_connect(self, conn):
        self.calls = AcpToolCalls(conn)

    async def initialize(self, protocol_version, client_capabilities=None, **kwargs):
        self.calls.negotiated(client_capabilities)
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd, **kwargs):
        return NewSessionResponse(session_id="session-1")

    async def prompt(self, session_id, prompt, **kwargs):
        end = await self.calls.run(session_id, noisy, {"n": int(prompt[0].text)})
        return PromptResponse(stop_reason="end_turn" if end.ok else "refusal")


asyncio.run(run_agent(NoisyAgent()))
"""


async def test_a_tool_that_prints_leaves_the_acp_wire_whole(tmp_path: Path) -> None:
    """What the tool prints and a thread writes to descriptor 1 goes to the
    agent's stderr: the editor gets every line of the live output, the call
    completed with its value, twice in a row, and the printed text is on stderr."""
    script = tmp_path / "agent.py"
    script.write_text(NOISY_AGENT, encoding="utf-8")
    stderr_path = tmp_path / "stderr"
    editor = Editor()
    lines = 200
    with stderr_path.open("wb") as stderr:
        async with (
            asyncio.timeout(DEADLINE_S),
            spawn_agent_process(
                editor, sys.executable, str(script), transport_kwargs={"stderr": stderr}
            ) as (conn, _),
        ):
            declared = ClientCapabilities(field_meta=CAPABILITIES["append"])
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            for _ in range(2):
                done = await conn.prompt(
                    session_id=session.session_id, prompt=[text_block(str(lines))]
                )
                assert done.stop_reason == "end_turn"
    calls = editor.calls()
    assert len(calls) == 2
    for call in calls:
        assert "".join(call.appends()) == "".join(f"line {i}\n" for i in range(lines))
        assert call.last.status == "completed"
        assert call.last.raw_output == 2 * lines
    printed = stderr_path.read_text(encoding="utf-8")
    assert "printed during the call" in printed
    assert "no newline" in printed
    assert "thread chatter to fd 1" in printed


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4))
def test_a_json_object_line_is_its_message(message: dict[str, Any]) -> None:
    """Any JSON object, with or without surrounding blanks, is the message."""
    line = json.dumps(message).encode()
    assert parse_message(line) == message
    assert parse_message(b"  " + line + b"\r\n") == message


@given(st.one_of(st.just(b""), st.just(b" \n"), st.binary(max_size=20).map(lambda b: b"\xff" + b)))
def test_a_blank_or_broken_line_is_skipped(line: bytes) -> None:
    assert parse_message(line) is None


@pytest.mark.parametrize("value", [[], 5, "text", None, [{"jsonrpc": "2.0"}]])
def test_a_json_line_that_is_not_an_object_is_skipped(value: Any) -> None:
    """Only an object is a JSON-RPC message: anything else is skipped, not
    handed on to fail the SDK's reading."""
    assert parse_message(json.dumps(value).encode()) is None
