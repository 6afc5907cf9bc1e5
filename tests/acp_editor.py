"""The editor side of the ACP tests: the SDK's own ``ClientSideConnection``
(``acp.spawn_agent_process``) driving an agent child over real pipes, and what
a client rebuilds from the updates it got."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, ToolCallProgress, ToolCallStart

from kigi_tool_runtime.acp._mapping import (
    META_LIVE,
    META_LOSS,
    TERMINAL_EXIT,
    TERMINAL_INFO,
    TERMINAL_OUTPUT,
    TERMINAL_OUTPUT_DELTA,
    TERMINAL_REDRAW,
)

AGENT = Path(__file__).resolve().parent / "acp_agent.py"

#: What each capability set declares, by the mode it picks.
CAPABILITIES: dict[str, dict[str, bool]] = {
    "append_and_replace": {TERMINAL_OUTPUT_DELTA: True, TERMINAL_OUTPUT: True},
    "append": {TERMINAL_OUTPUT_DELTA: True},
    "replace": {TERMINAL_OUTPUT: True},
    "content": {},
}

#: A marker line of the live text, with its byte figures.
MARKER = re.compile(r"\[\.\.\. (\d+)(?:-(\d+))? bytes lost \.\.\.\]\n")


class Editor:
    """A client that records every update and can be told when one arrives."""

    def __init__(self) -> None:
        self.updates: list[ToolCallStart | ToolCallProgress] = []
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the agent asked for a permission")

    def calls(self) -> list[Call]:
        """The recorded updates, one :class:`Call` per tool call, in order."""
        calls: dict[str, Call] = {}
        for update in self.updates:
            if isinstance(update, ToolCallStart):
                calls[update.tool_call_id] = Call(update)
            else:
                calls[update.tool_call_id].updates.append(update)
        return list(calls.values())


@dataclass
class Call:
    """One tool call as a client saw it."""

    start: ToolCallStart
    updates: list[ToolCallProgress] = field(default_factory=list)

    @property
    def last(self) -> ToolCallProgress:
        return self.updates[-1]

    @property
    def live(self) -> list[ToolCallProgress]:
        """The updates before the last one (all of them while the call runs)."""
        if self.updates and self.updates[-1].status in ("completed", "failed"):
            return self.updates[:-1]
        return self.updates

    def appends(self) -> list[str]:
        return [
            meta[TERMINAL_OUTPUT_DELTA]["data"]
            for meta in (u.field_meta or {} for u in self.live)
            if TERMINAL_OUTPUT_DELTA in meta
        ]

    def replacements(self) -> list[str]:
        """The replacements' text, each checked to open with the redraw."""
        return [
            redrawn(meta[TERMINAL_OUTPUT]["data"])
            for meta in (u.field_meta or {} for u in self.live)
            if TERMINAL_OUTPUT in meta
        ]

    def view(self) -> str:
        """What a terminal view shows: appends added, replacements replacing."""
        text = ""
        for update in self.live:
            meta = update.field_meta or {}
            if TERMINAL_OUTPUT in meta:
                text = redrawn(meta[TERMINAL_OUTPUT]["data"])
            if TERMINAL_OUTPUT_DELTA in meta:
                text += meta[TERMINAL_OUTPUT_DELTA]["data"]
        return text

    def rebuilt(self) -> str:
        """The whole live text, put together from every update's kigi offsets
        (an append or a replacement covers bytes ``offset`` to ``end``);
        fails on a hole or on two updates that disagree."""
        known = bytearray()
        for update in self.live:
            meta = update.field_meta or {}
            figures = meta.get(META_LIVE)
            if figures is None:
                continue
            if TERMINAL_OUTPUT_DELTA in meta:
                data = meta[TERMINAL_OUTPUT_DELTA]["data"].encode()
            elif TERMINAL_OUTPUT in meta:
                data = redrawn(meta[TERMINAL_OUTPUT]["data"]).encode()
            else:
                data = content_text(update).encode()
            offset, end = figures["offset"], figures["end"]
            if MARKER.match(data.decode()) and len(data) > end - offset:
                # A replacement that opens with the losses that fell out unseen.
                data = data[len(data) - (end - offset) :]
            assert len(data) == end - offset, (figures, len(data))
            assert offset <= len(known), f"hole at {len(known)}..{offset}"
            overlap = known[offset:end]
            assert bytes(overlap) == data[: len(overlap)], f"disagreement at {offset}"
            known[offset:end] = data
        return known.decode()

    def text(self) -> str:
        """The model's text in the last update's content."""
        return content_text(self.last)

    def loss(self) -> dict[str, Any]:
        meta = self.last.field_meta or {}
        loss: dict[str, Any] = meta[META_LOSS]
        return loss

    def exit(self) -> dict[str, Any] | None:
        return (self.last.field_meta or {}).get(TERMINAL_EXIT)

    def terminal(self) -> bool:
        return TERMINAL_INFO in (self.start.field_meta or {})


def redrawn(data: str) -> str:
    """A replacement's text: what follows the redraw it must open with."""
    assert data.startswith(TERMINAL_REDRAW), data[:40]
    return data[len(TERMINAL_REDRAW) :]


def content_text(update: ToolCallProgress) -> str:
    texts = [
        item.content.text
        for item in update.content or []
        if item.type == "content" and item.content.type == "text"
    ]
    return "".join(texts)


def markers(text: str) -> list[tuple[int, int]]:
    """The (least, most) bytes each marker line of ``text`` says were lost."""
    return [(int(m[1]), int(m[2] or m[1])) for m in MARKER.finditer(text)]


@asynccontextmanager
async def agent(
    capabilities: dict[str, bool] | None,
) -> AsyncIterator[tuple[ClientSideConnection, Editor, asyncio.subprocess.Process]]:
    """The test agent as a child, initialized with ``capabilities`` under
    ``clientCapabilities._meta`` (``None``: none declared)."""
    editor = Editor()
    async with spawn_agent_process(
        editor,
        sys.executable,
        str(AGENT),
        transport_kwargs={"limit": 16 * 1024 * 1024, "stderr": None},
    ) as (conn, process):
        declared = ClientCapabilities(field_meta=capabilities) if capabilities else None
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=declared)
        yield conn, editor, process


async def prompt(conn: ClientSideConnection, session_id: str, spec: dict[str, Any]) -> str:
    """Send one call to the agent; its stop reason."""
    response = await conn.prompt(session_id=session_id, prompt=[text_block(json.dumps(spec))])
    return response.stop_reason
