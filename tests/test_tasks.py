"""Structured concurrency across the package: every task lives in a scope that
owns it (a ``TaskGroup``, a ``TaskScope``, an anyio task group), or is one of
the listed, commented exceptions, each with an owner that awaits it and hears
its failure; no constructor starts a task; every task's failure reaches
someone; each module is written against one async framework."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kigi_tool_runtime import (
    Client,
    RemoteToolError,
    Server,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
    run_tool,
)
from kigi_tool_runtime._lines import LineReader
from kigi_tool_runtime._transport._stdio import _FileFeed

#: Every wait in these tests is bounded by this, far above what any of them needs.
PATIENCE_S = 30.0

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]

PACKAGE = Path(__file__).resolve().parent.parent / "kigi_tool_runtime"

#: The modules held to the rule: every module of the package, by path in it.
MODULES = tuple(sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")))

#: The only tasks started outside a ``TaskGroup`` or a ``TaskScope``, by module
#: and function, each commented where it is started ("Not in a scope: ...",
#: or, in the scope itself, the one place it starts a task).
ALLOWED = {
    # The scope's own mechanism.
    ("_scope.py", "start"),
    # A tool that ignores its cancellation is left running (runner Rule 3).
    ("_tools/_runner.py", "_drive"),
    # The reader lives as long as the connection; aclose ends it.
    ("_transport/_client.py", "_reading"),
    # The file feed lives as long as the reader it feeds (stdio Rule 2).
    ("_transport/_stdio.py", "open_stdio"),
    # A call's cancel written in the background: the client's; aclose awaits
    # it and raises its failure (_caller Rule 5).
    ("nats/_caller.py", "cancel_later"),
}

_SPAWNERS = {"create_task", "ensure_future"}


class _Finder(ast.NodeVisitor):
    """Bare task starts: ``create_task``/``ensure_future`` called on anything
    but a name bound by ``async with asyncio.TaskGroup() as name`` (or an
    attribute such a group was stored in)."""

    def __init__(self) -> None:
        self.groups: set[str] = set()
        self.stored: set[str] = set()
        self.function = "<module>"
        self.bare: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        for item in node.items:
            call = item.context_expr
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "TaskGroup"
                and isinstance(item.optional_vars, ast.Name)
            ):
                self.groups.add(item.optional_vars.id)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.groups:
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    self.stored.add(target.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in _SPAWNERS:
            receiver = func.value if isinstance(func, ast.Attribute) else None
            scoped = (isinstance(receiver, ast.Name) and receiver.id in self.groups) or (
                isinstance(receiver, ast.Attribute) and receiver.attr in self.stored
            )
            if not scoped:
                self.bare.append((self.function, node.lineno))
        self.generic_visit(node)


def _bare_task_starts() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for module in MODULES:
        source = (PACKAGE / module).read_text()
        finder = _Finder()
        finder.visit(ast.parse(source))
        lines = source.splitlines()
        for function, lineno in finder.bare:
            found[(module, function)] = lineno
            above = "\n".join(lines[max(lineno - 5, 0) : lineno])
            assert "Not in a scope:" in above or module == "_scope.py", (
                f"{module}:{lineno} starts a task outside a scope without saying why"
            )
    return found


def test_tasks_start_in_scopes_but_for_the_listed_exceptions() -> None:
    """Counted by AST: every ``create_task``/``ensure_future`` outside a task
    group anywhere in the package is one of the listed, commented exceptions
    (five, the scope's own among them; there were fifteen)."""
    found = _bare_task_starts()
    assert set(found) == ALLOWED, f"bare task starts: {sorted(found)}"


#: Modules allowed to import both asyncio and anyio: none. The MCP line
#: transport (``mcp/_lines.py``) is anyio code that names asyncio's stream
#: reader for type checking only.
BRIDGES: set[str] = set()


def _frameworks(source: str) -> set[str]:
    """The async frameworks a module imports to run (a type-checking-only
    import is not one)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & {"asyncio", "anyio"}


def test_each_module_is_written_against_one_async_framework() -> None:
    """No module imports both asyncio and anyio to run: the MCP server, its
    HTTP side and its line transport are anyio code (the SDK's), the rest asyncio."""
    mixed = {m for m in MODULES if len(_frameworks((PACKAGE / m).read_text())) > 1}
    assert mixed == BRIDGES
    assert _frameworks("import asyncio\nfrom anyio import Event\n") == {"asyncio", "anyio"}
    assert _frameworks("import anyio\nif TYPE_CHECKING:\n    import asyncio\n") == {"anyio"}
    for module in ("mcp/_server.py", "mcp/_http.py", "mcp/_host.py", "mcp/_lines.py"):
        assert _frameworks((PACKAGE / module).read_text()) == {"anyio"}, module


def test_the_ast_count_sees_a_bare_start() -> None:
    """The finder counts a bare start and not a grouped one (the test above
    would catch one)."""
    source = (
        "async def f():\n"
        "    asyncio.create_task(g())\n"
        "    async with asyncio.TaskGroup() as tg:\n"
        "        self._tasks = tg\n"
        "        tg.create_task(g())\n"
        "    self._tasks.create_task(g())\n"
        "    loop.create_task(g())\n"
    )
    finder = _Finder()
    finder.visit(ast.parse(source))
    assert finder.bare == [("f", 2), ("f", 7)]


# -- the client ----------------------------------------------------------------


class _Sink:
    """A writer for a client whose server is not needed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def test_constructing_a_client_starts_no_task() -> None:
    """``Client(...)`` needs no running loop: its reader starts on first use."""
    client = Client(LineReader(1024), _Sink())
    assert client._read_task is None


def test_a_client_constructed_directly_reads_once_used() -> None:
    """A client constructed directly starts reading on ``async with`` and has
    no task left once closed."""

    async def main() -> None:
        reader = LineReader(1024)
        client = Client(reader, _Sink())
        await asyncio.sleep(0)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        async with asyncio.timeout(PATIENCE_S):
            async with client:
                assert client._read_task is not None
                reader.eof_received()
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


def test_no_task_is_left_once_a_spawned_client_closes() -> None:
    """A real server spawned, called and closed: nothing of the client runs on."""

    async def main() -> None:
        async with asyncio.timeout(PATIENCE_S):
            async with await Client.spawn(SERVE) as client:
                result = await client.call("bash", {"command": "echo hi"}).result()
                assert result.tool_call_id
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


def test_a_failing_reader_fails_the_calls_and_aclose() -> None:
    """A reader that fails (here its stream raises a non-I/O error) fails every
    pending call naming the error, and ``aclose`` raises it."""

    async def main() -> None:
        async with asyncio.timeout(PATIENCE_S):
            reader = asyncio.StreamReader()
            client = await Client.connect(reader, _Sink())
            call = client.call("bash", {"command": "true"})
            reader.set_exception(LookupError("broken reader"))
            with pytest.raises(RemoteToolError, match="broken reader") as caught:
                await call.result()
            assert caught.value.kind == "connection_lost"
            with pytest.raises(LookupError, match="broken reader"):
                await client.aclose()
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


# -- the server ----------------------------------------------------------------


class _Hang(Tool[msgspec.Struct]):
    """Runs until cancelled."""

    id = "hang"
    args_type = msgspec.Struct

    async def execute(self, ctx: ToolContext, args: msgspec.Struct) -> AsyncIterator[ToolEvent]:
        await asyncio.Event().wait()
        yield ToolResult(value=None)  # pragma: no cover


def test_a_server_whose_input_breaks_raises_it_and_leaves_no_task() -> None:
    """An input that fails mid-call is raised from ``serve`` as itself (Rule 8),
    after which no task of the server (writer, reader, call) runs on."""

    async def main() -> None:
        server = Server([_Hang()])
        reader = asyncio.StreamReader()
        sink = _Sink()
        reader.feed_data(
            b'{"jsonrpc":"2.0","id":1,"method":"tool.call","params":'
            b'{"tool_call_id":"c1","tool_id":"hang","arguments":{}}}\n'
        )

        async def breaks() -> None:
            while not server.statistics().calls_in_flight:
                await asyncio.sleep(0)
            reader.set_exception(ConnectionResetError("peer reset"))

        async with asyncio.timeout(PATIENCE_S):
            breaker = asyncio.create_task(breaks())
            with pytest.raises(ConnectionResetError, match="peer reset"):
                await server.serve(reader, sink)
            await breaker
        assert server.statistics().calls_in_flight == 0
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


def test_a_regular_file_that_cannot_be_read_fails_its_reader(tmp_path: Path) -> None:
    """The stdin file feed hands a read error to its reader (stdio Rule 2)."""

    async def main() -> None:
        fd = os.open(tmp_path, os.O_RDONLY)  # a directory: read() is EISDIR
        try:
            reader = asyncio.StreamReader()
            async with asyncio.timeout(PATIENCE_S):
                await _FileFeed(reader, fd).run()
                with pytest.raises(IsADirectoryError):
                    await reader.read(1)
        finally:
            os.close(fd)

    asyncio.run(main())


def test_any_failure_of_the_file_feed_reaches_its_reader(tmp_path: Path) -> None:
    """A failure of the stdin file feed other than a read error (here its
    reader refusing data) is handed to the reader too, never lost in the
    feeding task (stdio Rule 2)."""

    class _Refusing(asyncio.StreamReader):
        def feed_data(self, data: bytes) -> None:
            raise LookupError("the reader refused it")

    async def main() -> None:
        path = tmp_path / "input"
        path.write_bytes(b"a line\n")
        fd = os.open(path, os.O_RDONLY)
        try:
            reader = _Refusing()
            async with asyncio.timeout(PATIENCE_S):
                await _FileFeed(reader, fd).run()
                with pytest.raises(LookupError, match="refused"):
                    await reader.read(1)
        finally:
            os.close(fd)

    asyncio.run(main())


# -- the runner ----------------------------------------------------------------


class _Stubborn(Tool[msgspec.Struct]):
    """Ignores its cancellation, then fails once told to."""

    id = "stubborn"
    args_type = msgspec.Struct

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.fail = asyncio.Event()

    async def run(self, ctx: ToolContext, args: msgspec.Struct) -> Any:
        self.started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        await self.fail.wait()
        raise RuntimeError("failed once left running")


def _reported(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: seen.append(context))
    return seen


def test_a_tool_left_running_that_fails_is_reported() -> None:
    """A tool abandoned after ``stop_wait`` that fails later has its failure
    handed to the event loop's exception handler, not dropped."""

    async def main() -> None:
        seen = _reported(asyncio.get_running_loop())
        tool = _Stubborn()
        ctx = ToolContext("c1")

        async def cancel_once_started() -> None:
            await tool.started.wait()
            ctx.cancel()

        async with asyncio.timeout(PATIENCE_S):
            canceller = asyncio.create_task(cancel_once_started())
            async with run_tool(tool, b"{}", ctx=ctx, stop_wait=0.01) as run:
                events = [event async for event in run]
            await canceller
            assert getattr(events[-1], "kind", None) == "cancelled"
            # The one task left: the tool's, abandoned (looked up by no name).
            (task,) = asyncio.all_tasks() - {asyncio.current_task()}
            tool.fail.set()
            await asyncio.wait({task})
        assert [type(c["exception"]) for c in seen] == [RuntimeError]
        assert "had given up on it" in seen[0]["message"]

    asyncio.run(main())


class _FailsAfterItsResult(Tool[msgspec.Struct]):
    """Yields its result, then raises."""

    id = "after"
    args_type = msgspec.Struct

    async def execute(self, ctx: ToolContext, args: msgspec.Struct) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value=1)
        raise RuntimeError("after the result")


def test_a_failure_after_the_terminal_is_reported() -> None:
    """What a tool raises after its terminal changes nothing for the call but
    reaches the event loop's exception handler."""

    async def main() -> None:
        seen = _reported(asyncio.get_running_loop())
        async with asyncio.timeout(PATIENCE_S):
            events = [
                e async for e in run_tool(_FailsAfterItsResult(), b"{}", ctx=ToolContext("c"))
            ]
        assert isinstance(events[-1], ToolResult)
        assert [type(c["exception"]) for c in seen] == [RuntimeError]
        assert "after its terminal" in seen[0]["message"]

    asyncio.run(main())
