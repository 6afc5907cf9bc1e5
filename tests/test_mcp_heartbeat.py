"""``kigi-stream serve --mcp`` as a real subprocess, driven by the official
``mcp`` package's ``ClientSession`` over stdio: a silent call says it is alive
every heartbeat interval (so a host that aborts idle calls never sees it idle
for longer), in the message a host shows (status mode) or in ``_meta`` alone
(delta mode), never opening a hole in the frames and never after the result."""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from kigi_tool_runtime.mcp import ProgressFolder
from kigi_tool_runtime.mcp._mapping import META_FRAME, META_HEARTBEAT, META_STREAM

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"]
#: The heartbeat interval of these runs (``--heartbeat``): small, so a silence
#: of a few intervals is short to wait out.
INTERVAL = 0.2
BEAT = re.compile(r"running (?P<run>\d+\.\d) s, no output for (?P<silent>\d+\.\d) s · (?P<line>.*)")


class _Seen:
    """Every progress notification of the call, as the session's message
    handler and its progress callback see them."""

    def __init__(self) -> None:
        self.notes: list[tuple[float, str | None, dict[str, Any]]] = []
        self.callbacks: list[tuple[float, str | None]] = []
        self.folder = ProgressFolder()

    async def handler(self, message: Any) -> None:
        params = getattr(message, "params", None)
        if params is not None and hasattr(params, "progress"):
            self.notes.append((params.progress, params.message, dict(params.meta or {})))
        await self.folder.message_handler(message)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.callbacks.append((progress, message))

    def beats(self) -> list[tuple[float, str | None, dict[str, Any]]]:
        """The heartbeats after the first frame (one may come before it, on a
        slow start: the silence after the first line is the one measured)."""
        first = next((i for i, note in enumerate(self.notes) if META_FRAME in note[2]), 0)
        return [note for note in self.notes[first:] if META_HEARTBEAT in note[2]]

    def all_beats(self) -> list[tuple[float, str | None, dict[str, Any]]]:
        return [note for note in self.notes if META_HEARTBEAT in note[2]]


async def _call(flags: list[str], command: str) -> tuple[_Seen, Any]:
    seen = _Seen()
    params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *flags])
    async with (
        asyncio.timeout(60),
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=seen.handler) as session,
    ):
        await session.initialize()
        result = await session.call_tool(
            "bash", {"command": command}, progress_callback=seen.progress
        )
        await asyncio.sleep(0.2)  # anything sent after the result would land here
    return seen, result


def test_a_silent_call_says_it_is_alive_every_interval_in_status_mode() -> None:
    """A call silent for 1.2 s with a 0.2 s interval: several heartbeats, each
    saying how long the call has run and been silent (each silence at least
    one interval longer than the one before: none is skipped) after the
    newest line; progress rises by one over frames and heartbeats, the frames
    fold whole, and the result counts the heartbeats."""
    seen, result = asyncio.run(
        _call(["--heartbeat", str(INTERVAL)], "echo started; sleep 1.2; echo finished")
    )
    assert not result.is_error
    beats = seen.beats()
    assert len(beats) >= 3
    silences = []
    for _, message, meta in beats:
        said = BEAT.fullmatch(message or "")
        assert said is not None, message
        assert said["line"] == "started"
        figures = meta[META_HEARTBEAT]
        assert figures["silent_s"] >= INTERVAL
        assert figures["elapsed_s"] >= figures["silent_s"]
        assert abs(float(said["silent"]) - figures["silent_s"]) <= 0.051  # one decimal
        silences.append(figures["silent_s"])
    for before, after in itertools.pairwise(silences):
        assert after - before >= INTERVAL - 0.01
    progress = [note[0] for note in seen.notes]
    assert progress == [float(n) for n in range(1, len(progress) + 1)]
    assert [p for p, _ in seen.callbacks] == progress  # the host's callback saw them all
    frames = [note for note in seen.notes if META_FRAME in note[2]]
    assert frames[-1][1] == "finished"
    assert result.meta is not None
    stream = result.meta[META_STREAM]
    assert stream["heartbeats_sent"] == len(seen.all_beats())
    assert stream["last_progress"] == len(seen.notes)
    (call,) = seen.folder.reassembler.streams.values()
    assert call.report(ended=True).complete


def test_in_delta_mode_a_heartbeat_has_no_message() -> None:
    """Delta mode: the messages are the output itself, and a heartbeat says its
    figures in ``_meta`` only (an appending host would add it to the output)."""
    seen, result = asyncio.run(
        _call(
            ["--mcp-message", "delta", "--heartbeat", str(INTERVAL)],
            "printf 'a\\n'; sleep 0.6; printf 'b\\n'",
        )
    )
    assert not result.is_error
    beats = seen.all_beats()
    assert len(beats) >= 1
    assert all(message is None for _, message, _ in beats)
    output = "".join(m or "" for _, m, meta in seen.notes if META_FRAME in meta)
    assert output == "a\nb\n"


def test_heartbeat_zero_sends_none() -> None:
    """``--heartbeat 0`` turns heartbeats off: a call silent for three of the
    other tests' intervals sends only its frames."""
    seen, result = asyncio.run(_call(["--heartbeat", "0"], "echo x; sleep 0.6; echo y"))
    assert not result.is_error
    assert seen.all_beats() == []
    assert result.meta is not None
    assert result.meta[META_STREAM]["heartbeats_sent"] == 0
