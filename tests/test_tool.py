"""Tests for the tool interface: ``Tool``, ``ToolContext``, ``ToolResult``."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from kigi_tool_protocol import (
    IdentifierError,
    ToolCallResult,
    json_codec,
)
from kigi_tool_runtime import Tool, ToolContext, ToolEvent, ToolResult


class Args(msgspec.Struct):
    path: str
    limit: int = 10


class Reader(Tool[Args]):
    """Reads nothing; returns its arguments."""

    id = "Kigi:read_file"
    description = "Read a file."
    args_type = Args

    async def run(self, ctx: ToolContext, args: Args) -> Any:
        return {"path": args.path}


class Streamer(Tool[Args]):
    id = "stream_it"
    args_type = Args

    async def execute(self, ctx: ToolContext, args: Args) -> AsyncIterator[ToolEvent]:
        yield ToolResult(value=None)


# -- Tool ----------------------------------------------------------------------------


def test_a_tool_declares_its_input_schema_from_its_struct() -> None:
    """The input schema is ``msgspec.json.schema`` of ``args_type``."""
    schema = Reader().input_schema()
    assert schema == msgspec.json.schema(Args)
    assert schema["$defs"]["Args"]["required"] == ["path"]


def test_a_tool_says_whether_it_streams() -> None:
    """``streams()`` is true for ``execute`` tools and false for ``run`` tools."""
    assert Streamer.streams()
    assert not Reader.streams()


@pytest.mark.parametrize("bad", ["a:b:c", ":a", "a.b", "a b", "fooébar", ""])
def test_a_tool_with_an_invalid_id_is_refused_at_definition(bad: str) -> None:
    """A tool id outside the ToolId grammar fails when the class is defined."""
    with pytest.raises(IdentifierError, match="tool id"):

        class Bad(Reader):
            id = bad


def test_a_tool_without_execute_or_run_is_refused_at_definition() -> None:
    """A concrete tool must implement ``execute`` or ``run``."""
    with pytest.raises(TypeError, match="must implement execute\\(\\) or run\\(\\)"):

        class Lazy(Tool[Args]):
            id = "lazy"
            args_type = Args


def test_a_tool_whose_input_is_not_a_struct_is_refused_at_definition() -> None:
    """``args_type`` must be a msgspec Struct (its schema is the input schema)."""
    with pytest.raises(TypeError, match="args_type must be a msgspec Struct"):

        class Loose(Tool[Any]):
            id = "loose"
            args_type = dict

            def run(self, ctx: ToolContext, args: Any) -> Any:
                return None


def test_a_base_class_without_an_id_is_not_checked() -> None:
    """An intermediate base class (no ``id`` of its own) is not validated."""

    class Base(Tool[Args]):
        description = "inherited"

    assert Base.description == "inherited"


# -- ToolContext ---------------------------------------------------------------------


def test_a_context_needs_a_call_id() -> None:
    """An empty call id is refused."""
    with pytest.raises(IdentifierError, match="tool call id must not be empty"):
        ToolContext("")


def test_cancel_is_idempotent_and_runs_callbacks_once() -> None:
    """``cancel()`` sets ``cancelled`` and runs each callback exactly once."""
    ctx = ToolContext("c1", wants_progress=False)
    calls: list[str] = []
    ctx.on_cancel(lambda: calls.append("a"))
    unregister = ctx.on_cancel(lambda: calls.append("b"))
    unregister()
    assert not ctx.cancelled
    ctx.cancel()
    ctx.cancel()
    assert ctx.cancelled
    assert calls == ["a"]
    assert not ctx.wants_progress
    assert "cancelled=True" in repr(ctx)


def test_a_callback_registered_after_cancel_runs_at_once() -> None:
    """Registering on a cancelled context calls the callback immediately."""
    ctx = ToolContext("c1")
    ctx.cancel()
    calls: list[int] = []
    ctx.on_cancel(lambda: calls.append(1))()
    assert calls == [1]


def test_cancel_from_many_threads_runs_callbacks_once() -> None:
    """Concurrent ``cancel()`` calls from threads run each callback once."""
    ctx = ToolContext("c1")
    calls: list[int] = []
    ctx.on_cancel(lambda: calls.append(1))
    threads = [threading.Thread(target=ctx.cancel) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [1]


# -- ToolResult ----------------------------------------------------------------------


class Outcome(msgspec.Struct):
    code: int
    text: str


def test_a_json_result_goes_on_the_wire_as_json_output() -> None:
    """A JSON result (Structs included) becomes ``{"kind":"json","value":...}``."""
    wire = ToolResult(value=Outcome(code=0, text="é")).to_wire("call-1")
    assert isinstance(wire, ToolCallResult)
    assert json_codec.encode(wire) == (
        b'{"tool_call_id":"call-1","output":{"kind":"json","value":{"code":0,"text":"\xc3\xa9"}}}'
    )


def test_a_text_result_goes_on_the_wire_as_text_output() -> None:
    """``ToolResult.text`` becomes ``{"kind":"text","value":...}``."""
    wire = ToolResult.text("done").to_wire("call-1")
    assert json_codec.encode(wire) == (
        b'{"tool_call_id":"call-1","output":{"kind":"text","value":"done"}}'
    )


def test_a_result_refuses_bad_kinds_and_call_ids() -> None:
    """Only ``json`` and ``text`` kinds; a text result needs a str; the call id must
    not be empty."""
    with pytest.raises(ValueError, match="must be 'json' or 'text', not 'mcp'"):
        ToolResult(value=[], kind="mcp")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a str value, not int"):
        ToolResult(value=3, kind="text")
    with pytest.raises(IdentifierError):
        ToolResult(value=1).to_wire("")


def test_a_tool_without_an_id_cannot_be_instantiated() -> None:
    """Instantiating a tool class that sets no ``id`` is a TypeError that says so,
    before any call could fail on it (and leave a coroutine never awaited)."""

    class Nameless(Tool[Args]):
        args_type = Args

        async def run(self, ctx: ToolContext, args: Args) -> Any:
            return None

    with pytest.raises(
        TypeError, match=r"^Nameless cannot be instantiated: a tool class must set `id`"
    ):
        Nameless()
    assert Reader().id  # a tool with an id is unaffected
