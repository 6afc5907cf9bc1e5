"""An editor for the tests that dies: the SDK's ``ClientSideConnection``
(``acp.spawn_agent_process``) runs an agent script (``argv[1]``), sends it one
prompt (the text ``argv[2]``), prints ``pgid <command's group> agent <agent's
pid>`` once the command has printed its process group, and then waits to be
killed. The agent's stderr is a pipe to this editor (as an editor keeps an
agent's log), gone with it."""

from __future__ import annotations

import asyncio
import os
import re
import sys

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities
from acp_editor import CAPABILITIES, Editor


async def main(agent: str, text: str) -> None:
    editor = Editor()
    async with spawn_agent_process(
        editor,
        sys.executable,
        agent,
        transport_kwargs={"limit": 16 * 1024 * 1024},
    ) as (conn, process):
        declared = ClientCapabilities(field_meta=CAPABILITIES["append"])
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        turn = asyncio.create_task(
            conn.prompt(session_id=session.session_id, prompt=[text_block(text)])
        )
        while True:
            calls = editor.calls()
            match = re.search(r"pgid (\d+)\n", "".join(calls[0].appends())) if calls else None
            if match is not None:
                break
            editor.changed.clear()
            await editor.changed.wait()
        print("pgid", match[1], "agent", process.pid, flush=True)
        await turn  # never: the test kills this editor first


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
