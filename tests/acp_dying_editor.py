"""An editor for the tests that dies: the SDK's ``ClientSideConnection``
(``acp.spawn_agent_process``) runs the test agent, asks it for one call of
``argv``, prints ``pgid <command's group> agent <agent's pid>`` once the
command has printed its process group, and then waits to be killed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities
from acp_editor import AGENT, CAPABILITIES, Editor


async def main(argv: list[str]) -> None:
    editor = Editor()
    async with spawn_agent_process(
        editor, sys.executable, str(AGENT), transport_kwargs={"limit": 16 * 1024 * 1024}
    ) as (conn, process):
        declared = ClientCapabilities(field_meta=CAPABILITIES["append"])
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        spec = {"args": {"command": argv}}
        turn = asyncio.create_task(
            conn.prompt(session_id=session.session_id, prompt=[text_block(json.dumps(spec))])
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
    asyncio.run(main(json.loads(sys.argv[1])))
