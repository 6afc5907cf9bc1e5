"""``McpToolServer`` in-process with the official client: any kigi tool, its
result type, its errors, the server's counters."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from bounded import run_within
from mcp import Client
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_protocol import CustomProgress, StreamingSpec, TextProgress, ToolCapabilities
from kigi_tool_runtime import (
    OutputStream,
    ServedCall,
    ShellOutcome,
    ShellTool,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
    _upstream,
)
from kigi_tool_runtime.mcp import McpToolServer, ProgressFolder
from kigi_tool_runtime.mcp import _privates as mcp_privates
from kigi_tool_runtime.mcp._mapping import META_FRAME, META_STREAM

SPEC = StreamingSpec(subkind="echo_chunk", max_delta_bytes=4)


class EchoArgs(msgspec.Struct):
    parts: list[str]


class EchoOut(msgspec.Struct):
    bytes: int
    parts: int


class Echo(Tool[EchoArgs]):
    id = "kit:echo"
    description = "Echo the parts back, streamed."
    args_type = EchoArgs
    result_type = EchoOut
    capabilities = ToolCapabilities(streaming=SPEC, is_read_only=True)

    async def execute(self, ctx: ToolContext, args: EchoArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(SPEC, capacity=1024, progress=ctx.wants_progress)
        yield TextProgress(text="starting")
        for part in args.parts:
            stream.write(part.encode("latin-1"))
            for frame in stream.drain():
                yield frame
        for frame in stream.finish():
            yield frame
        if args.parts == ["lie"]:
            yield ToolResult(value={"bytes": "many"})  # not an EchoOut
            return
        yield ToolResult(value=EchoOut(bytes=stream.total, parts=len(args.parts)))


class BadKind(Tool[EchoArgs]):
    id = "bad"
    args_type = EchoArgs

    async def execute(self, ctx: ToolContext, args: EchoArgs) -> AsyncIterator[ToolEvent]:
        yield CustomProgress(subkind="\ud800", payload={})
        yield ToolResult(value=1)


def _run(body: Any) -> None:
    run_within(body(), 30)


def test_any_tool_streams_and_its_declared_result_is_validated_by_the_client() -> None:
    """A tool of one's own: dotted name, read-only hint, its deltas folded
    exactly (text progress kept apart as its own stream), structuredContent
    checked by the official client against the output schema; the counters
    add up."""
    server = McpToolServer([Echo(), ShellTool()])
    folder = ProgressFolder()

    async def body() -> None:
        async with Client(server.server, message_handler=folder.message_handler) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"kit.echo", "bash"}
            echo = tools["kit.echo"]
            assert echo.annotations is not None
            assert echo.annotations.read_only_hint is True
            assert echo.output_schema is not None
            assert echo.output_schema["required"] == ["bytes", "parts"]
            parts = ["caf\xc3", "\xa9 \xe2\x9c", "\x93 done\n"]
            folded = await folder.call_tool(client, "kit.echo", {"parts": parts})
            assert folded.result.structured_content == {"bytes": 15, "parts": 3}
            state = folder.reassembler.stream(folded.call_id, "echo_chunk")
            assert state is not None
            assert state.text == "café ✓ done\n"
            assert state.report().complete
            sent = folded.result.meta[META_STREAM]["frames_sent"]  # type: ignore[index]
            assert sent == folder.reassembler.records
            with pytest.raises(RuntimeError, match="Invalid structured content"):
                await client.call_tool("kit.echo", {"parts": ["lie"]})
        stats = server.statistics()
        assert stats.calls_started == 2
        assert stats.calls_in_flight == 0
        assert stats.notifications_sent >= sent
        assert stats.frames_dropped == 0

    _run(body)


def test_protocol_errors_and_a_frame_json_cannot_carry() -> None:
    """An unknown tool and a bad deadline are -32602 errors; a frame whose kind
    JSON cannot carry ends its call with an internal_error result."""
    server = McpToolServer([BadKind()])

    async def body() -> None:
        async with Client(server.server) as client:
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nope", {})
            assert unknown.value.code == -32602
            with pytest.raises(MCPError) as deadline:
                await client.call_tool("bad", {"parts": []}, meta={"dev.kigi/deadline_ms": "soon"})
            assert deadline.value.code == -32602
            result = await client.call_tool("bad", {"parts": []}, meta={"progressToken": "b"})
            assert result.is_error
            assert result.meta is not None
            assert result.meta["dev.kigi/error"]["kind"] == "internal_error"

    _run(body)


# -- what `serve --mcp` answers whatever carries it (moved from test_mcp_stdio.py) --


def test_lists_the_shell_tool_with_its_schemas() -> None:
    """tools/list of the server `serve --mcp` makes: bash, its input schema an
    object with the ShellArgs fields, its output schema ShellOutcome's, its
    capabilities under _meta."""
    server = McpToolServer([ShellTool()])

    async def body() -> None:
        async with Client(server.server) as client:
            tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == ["bash"]
        bash = tools[0]
        assert bash.input_schema["type"] == "object"
        assert set(bash.input_schema["properties"]) == {
            "command",
            "cwd",
            "env",
            "timeout_ms",
            "output_limit",
        }
        assert bash.input_schema["required"] == ["command"]
        assert bash.output_schema is not None
        assert set(bash.output_schema["required"]) == set(ShellOutcome.__struct_fields__)
        assert bash.meta is not None
        assert bash.meta["dev.kigi/capabilities"]["supports_cancel"] is True

    _run(body)


def test_no_progress_without_a_token() -> None:
    """A call without a progressToken gets its result and no notification."""
    server = McpToolServer([ShellTool()])
    frames: list[Any] = []

    async def handler(message: Any) -> None:
        params = getattr(message, "params", None)
        if META_FRAME in (getattr(params, "meta", None) or {}):
            frames.append(message)

    async def body() -> None:
        async with Client(server.server, message_handler=handler) as client:
            result = await client.call_tool("bash", {"command": [sys.executable, "-c", SPLIT]})
        assert frames == []
        assert result.structured_content is not None
        assert result.structured_content["output"] == SPLIT_TEXT
        assert result.meta is not None
        assert result.meta[META_STREAM]["frames_sent"] == 0
        assert result.meta[META_STREAM]["progress_requested"] is False

    _run(body)


def test_bad_arguments_are_an_error_result_naming_the_field() -> None:
    """Arguments the schema refuses: isError with invalid_params and the path."""
    server = McpToolServer([ShellTool()])

    async def body() -> None:
        async with Client(server.server) as client:
            result = await client.call_tool("bash", {"command": "true", "timeout_ms": "soon"})
        assert result.is_error
        assert result.meta is not None
        error = result.meta["dev.kigi/error"]
        assert error["kind"] == "invalid_params"
        assert error["data"]["details"]["path"] == "$.timeout_ms"

    _run(body)


def test_construction_errors() -> None:
    """Two tools with one MCP name, and an empty outbox, are refused."""
    with pytest.raises(ValueError, match="MCP name"):
        McpToolServer([ShellTool(), ShellTool()])
    with pytest.raises(ValueError, match="outbox_bytes"):
        McpToolServer([ShellTool()], outbox_bytes=0)


def test_a_truncation_notice_is_one_more_notification() -> None:
    """Output refused whole at the shell tool's hard limit ends the stream with
    the truncation notice: it is a notification of its own (progress still
    rising by one, an empty message), and the folded stream says truncated;
    one closing notification, without a frame, says the truncation in its
    message for hosts that read only text (delta mode: the status is pinned
    in test_mcp_live_message)."""
    server = McpToolServer([ShellTool(limit=10)], message_mode="delta")
    seen: list[tuple[float, str | None]] = []
    folder = ProgressFolder()

    async def handler(message: Any) -> None:
        params = getattr(message, "params", None)
        if params is not None and hasattr(params, "progress"):
            seen.append((params.progress, params.message))
        await folder.message_handler(message)

    async def body() -> None:
        async with Client(server.server, message_handler=handler) as client:
            folded = await folder.call_tool(
                client, "bash", {"command": "printf 0123456789; sleep 0.2; printf more"}
            )
            assert folded.text == "0123456789"
            (report,) = folded.reports()
            assert report.truncated
            assert not folded.complete
            assert folded.missing == 0

    _run(body)
    assert [progress for progress, _ in seen] == [float(i) for i in range(1, len(seen) + 1)]
    assert seen[-2][1] == ""
    assert seen[-1][1] == "\n[... output truncated at the limit ...]\n"
    assert "".join(message or "" for _, message in seen) == (
        "0123456789\n[... output truncated at the limit ...]\n"
    )
    assert [note.message for note in folder.notes] == [seen[-1][1]]


@pytest.fixture
def fresh_mcp_fence() -> Iterator[None]:
    """The fence says its warnings afresh in each test."""
    mcp_privates.MCP.forget()
    yield
    mcp_privates.MCP.forget()


@pytest.mark.usefixtures("fresh_mcp_fence")
@pytest.mark.parametrize("how", ["attribute gone", "out of range"])
def test_an_unreadable_session_connection_falls_back_to_the_session_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Rule 6 keys tokens on the connection under a request's session, which
    the SDK keeps privately (``_privates`` Rule 1; that the key is the
    connection, not the per-request session, is
    ``test_a_progress_token_in_use_is_refused_until_its_call_ends``, run with
    warnings as errors). Where it cannot be read (gone, or the SDK outside the
    pinned range) the key is the session itself, said by one
    ``RuntimeWarning`` naming the package, its version and what degrades."""
    session = ServerSession.__new__(ServerSession)  # no connection under it
    if how == "out of range":
        session._connection = "the connection"
        monkeypatch.setattr(_upstream, "installed", lambda package: "9.0")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        keys = [mcp_privates.connection_of(session) for _ in range(3)]
    assert keys == [session] * 3
    assert len(said) == 1
    version = "9.0" if how == "out of range" else importlib.metadata.version("mcp")
    assert str(said[0].message).startswith(f"mcp {version} ")
    assert "per request, not per connection" in str(said[0].message)


@pytest.mark.usefixtures("fresh_mcp_fence")
def test_a_readable_session_connection_is_the_key_without_a_warning() -> None:
    """Inside the pinned range, the key is the connection under the SDK's
    session; any other session object is its own key."""
    session = ServerSession.__new__(ServerSession)
    session._connection = "the connection"
    assert mcp_privates.connection_of(session) == "the connection"
    other = SimpleNamespace(_connection="not read")
    assert mcp_privates.connection_of(other) is other
    assert mcp_privates.MCP.usable("unused")


class Burst(Tool[EchoArgs]):
    """Streams one custom frame per part, as fast as it may."""

    id = "burst"
    args_type = EchoArgs

    async def execute(self, ctx: ToolContext, args: EchoArgs) -> AsyncIterator[ToolEvent]:
        for part in args.parts:
            yield CustomProgress(subkind="n", payload=part)
        yield ToolResult(value=len(args.parts))


class _StuckSession:
    """A host that takes no notification until let go, keeping what it took."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.notes: list[Any] = []

    async def send_notification(self, note: Any, related_request_id: Any = None) -> None:
        await self.go.wait()
        self.notes.append(note)


class _Context:
    """The part of the SDK's ``ServerRequestContext`` a call reads."""

    def __init__(self, session: _StuckSession, token: str) -> None:
        self.session = session
        self.params = {"name": "burst", "_meta": {"progressToken": token}}
        self.request_id = 1
        self.request = None


def test_the_counters_count_what_the_queues_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that takes nothing: once it has stalled, the call's queue drops
    its oldest frames; the server's frames_dropped counts them while the call
    runs and after, and equals what the result and the frames say."""
    import mcp_types as types

    from kigi_tool_runtime.mcp import _server

    monkeypatch.setattr(_server, "STALL_S", 0.01)
    parts = [f"{i:04}" for i in range(20)]  # 6 encoded bytes each
    server = McpToolServer([Burst()], outbox_bytes=10)  # room for one frame
    session = _StuckSession()

    async def body() -> None:
        params = types.CallToolRequestParams(name="burst", arguments={"parts": parts})
        call = asyncio.ensure_future(server._call_tool(_Context(session, "t"), params))  # type: ignore[arg-type]
        # The first frame is being sent, the last is kept: every other is dropped.
        while server.statistics().frames_dropped < len(parts) - 2:
            await asyncio.sleep(0.01)
        assert server.statistics().calls_in_flight == 1
        session.go.set()
        result = await call
        assert result.meta is not None
        assert result.meta[META_STREAM]["frames_dropped"] == len(parts) - 2
        said = [note.params.meta["dev.kigi/frame"].get("dropped_count") for note in session.notes]
        assert said == [None, len(parts) - 2]

    _run(body)
    stats = server.statistics()
    assert stats.calls_in_flight == 0
    assert stats.frames_dropped == len(parts) - 2
    assert stats.notifications_sent == 2


class Gappy(Tool[EchoArgs]):
    """Writes 40 bytes into an 8-byte tail before its first drain, so the
    tail keeps the newest and reports what it skipped as a gap (as the shell
    tool's tail does under a flood), then returns."""

    id = "gappy"
    args_type = EchoArgs
    capabilities = ToolCapabilities(streaming=SPEC)

    async def execute(self, ctx: ToolContext, args: EchoArgs) -> AsyncIterator[ToolEvent]:
        stream = OutputStream(SPEC, capacity=8, progress=ctx.wants_progress)
        stream.write(b"x" * 40)
        for frame in stream.drain():
            yield frame
        stream.write(b"end\n")
        for frame in stream.finish():
            yield frame
        yield ToolResult(value="done")


def test_the_result_says_a_gap_in_the_output_as_every_host_does() -> None:
    """A gap in the live output is said in the MCP result's text, in the same
    line as the in-process hosts' (``ServedCall``: LangGraph, pydantic-ai,
    ADK, ACP) say it; a call without progress streamed nothing, so lost nothing."""
    server = McpToolServer([Gappy()])
    folder = ProgressFolder()
    line = "[kigi: the live output lost 32 bytes (1 gap)]"

    async def body() -> None:
        async with Client(server.server, message_handler=folder.message_handler) as client:
            folded = await folder.call_tool(client, "gappy", {"parts": []})
            quiet = await client.call_tool("gappy", {"parts": []})
        async with ServedCall(Gappy(), {"parts": []}, call_id="c1") as call:
            end = await call.run()
        (content,) = folded.result.content
        assert content.type == "text"
        assert content.text == end.text == f"done\n{line}"
        assert not folded.complete
        (plain,) = quiet.content
        assert plain.type == "text"
        assert plain.text == "done"

    _run(body)


def test_a_producer_failing_as_its_call_is_cancelled_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call cancelled while its producer fails: the producer's failure is
    raised from the handler (not lost behind the cancellation), and no task of
    the call runs on once it has returned (``_server`` Rule 13)."""
    import mcp_types as types

    from kigi_tool_runtime.mcp import _server

    started = asyncio.Event()

    async def broken_produce(run: Any, feed: Any, queued: Any, **options: Any) -> Any:
        started.set()
        while not run.ctx.cancelled:
            await asyncio.sleep(0.01)
        raise LookupError("the producer broke")

    monkeypatch.setattr(_server, "produce", broken_produce)
    server = McpToolServer([Burst()])

    async def body() -> None:
        before = asyncio.all_tasks()
        params = types.CallToolRequestParams(name="burst", arguments={"parts": ["a"]})
        call = asyncio.ensure_future(
            server._call_tool(_Context(_StuckSession(), "t"), params)  # type: ignore[arg-type]
        )
        await started.wait()
        call.cancel()
        with pytest.raises(LookupError, match="the producer broke"):
            await call
        assert asyncio.all_tasks() <= before
        assert server.statistics().calls_in_flight == 0

    _run(body)
