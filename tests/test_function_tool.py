"""Tests for ``@tool`` and ``Output`` in process (``run_tool`` through the
testing kit): schemas from hints, strict decoding, results, errors, a plain
``def`` in a thread, ``out.run`` of real children, cancel, and the class-tool
helper ``stream_output``."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from function_tools import count, fails, sleeper, split_child, threaded, typed
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import group_running, until_group_gone

from kigi_tool_protocol import IdentifierError, StreamingSpec, ToolCapabilities
from kigi_tool_runtime import (
    CallEnd,
    CommandNotStarted,
    CommandResult,
    Output,
    Tool,
    ToolContext,
    ToolError,
    ToolErrorKind,
    ToolEvent,
    ToolResult,
    run_tool,
    stream_output,
    tool,
)
from kigi_tool_runtime._call._served import check_arguments
from kigi_tool_runtime._tools._function import FunctionTool
from kigi_tool_runtime.testing import (
    Collected,
    check_stream,
    collect_async,
    fuzz_streaming_tool,
    python_writer_argv,
)
from kigi_tool_runtime.testing._strategies import tiny_caps

PY = sys.executable
#: Every wait in these tests is bounded by this, far above what any needs.
PATIENCE_S = 60.0


def call(subject: Tool[Any], args: Any, **kw: Any) -> Collected:
    async def main() -> Collected:
        async with asyncio.timeout(PATIENCE_S):
            return await collect_async(subject, args, **kw)

    return asyncio.run(main())


# -- what the decorator makes ----------------------------------------------------------


def test_the_decorated_function_is_a_streaming_tool() -> None:
    """@tool gives a Tool instance: its id the function's name, its description
    the docstring, a stream of its own, cancel supported."""
    assert isinstance(count, Tool)
    assert isinstance(count, FunctionTool)
    assert count.id == "count"
    assert count.description == "Count from 1 to `to`, a line each."
    assert count.capabilities.streaming is not None
    assert count.capabilities.supports_cancel
    assert split_child.id == "split-child"  # name= overrides
    assert split_child.capabilities.streaming is not None
    assert split_child.capabilities.streaming.max_delta_bytes == 2


def test_the_schema_comes_from_the_type_hints() -> None:
    """Every supported hint maps to its JSON Schema: required arguments are the
    ones without a default; Meta descriptions and bounds are kept."""
    schema = typed.input_schema()
    (name,) = schema["$defs"].keys() - {"Point"}
    body = schema["$defs"][name]
    assert body["required"] == ["name", "size"]
    assert body["additionalProperties"] is False
    props = body["properties"]
    assert props["name"] == {"type": "string"}
    assert props["size"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert props["flag"] == {"type": "boolean", "default": False}
    assert props["mode"] == {"enum": ["fast", "slow"], "default": "fast"}
    assert props["nothing"] == {"type": "null", "default": None}
    assert {"$ref": "#/$defs/Point"} in props["point"]["anyOf"]
    to = count.input_schema()["$defs"]["CountArgs"]["properties"]["to"]
    assert to == {"type": "integer", "minimum": 0, "description": "The last number.", "default": 3}


def test_arguments_decode_strictly_to_the_function() -> None:
    """Decoded arguments reach the function as its keyword arguments."""
    got = call(
        typed,
        {"name": "n", "size": 2, "tags": ["a"], "meta": {"k": 1}, "point": {"x": 1, "y": 2}},
    )
    assert got.result == {
        "name": "n",
        "size": 2,
        "ratio": 0.5,
        "flag": False,
        "tags": ["a"],
        "meta": {"k": 1},
        "mode": "fast",
        "point": [1, 2],
        "nothing": None,
    }


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"size": 1}, "`name`"),
        ({"name": "n", "size": "1"}, "$.size"),
        ({"name": "n", "size": 1, "mode": "warp"}, "$.mode"),
        ({"name": "n", "size": 1, "extra": 1}, "`extra`"),
        ({"name": "n", "size": 1, "point": {"x": 1}}, "`y`"),
        ({"name": "n", "size": 1.5}, "$.size"),
    ],
)
def test_bad_arguments_are_a_clear_error_naming_the_argument(
    args: dict[str, Any], named: str
) -> None:
    """A missing, mistyped, out-of-range or unknown argument fails the call as
    invalid_params, and the message names it."""
    got = call(typed, args)
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.INVALID_PARAMS
    assert named in got.terminal.message
    assert got.frames == ()
    with pytest.raises(ToolError, match=named.replace("$", r"\$")):
        check_arguments(typed, args)


def test_a_bound_in_the_hint_is_enforced() -> None:
    """msgspec.Meta bounds hold: ``to`` below 0 is refused, naming it."""
    got = call(count, {"to": -1})
    assert isinstance(got.terminal, ToolError)
    assert "$.to" in got.terminal.message


def _first_not_output(x: int) -> None: ...


async def _no_hint(out: Output, x) -> None:  # type: ignore[no-untyped-def]
    ...


async def _var_args(out: Output, *rest: int) -> None: ...


async def _undecodable(out: Output, when: threading.Lock) -> None: ...


@pytest.mark.parametrize(
    ("fn", "kw", "problem"),
    [
        (_first_not_output, {}, "first parameter must be annotated Output"),
        (_no_hint, {}, "argument 'x' has no type hint"),
        (_var_args, {}, r"\*rest"),
        (_undecodable, {}, "cannot be decoded strictly"),
        (count.fn, {"tail_bytes": 10, "max_delta_bytes": 64}, "below one frame"),
    ],
)
def test_a_function_that_cannot_be_a_tool_fails_at_decoration(
    fn: Any, kw: dict[str, Any], problem: str
) -> None:
    """Every way a function cannot be a tool is an error when it is decorated,
    naming the function and the problem."""
    with pytest.raises((TypeError, ValueError), match=problem) as caught:
        tool(**kw)(fn)
    assert fn.__name__ in str(caught.value)


def test_a_bad_tool_id_fails_at_decoration() -> None:
    """The tool-id rules apply to the function's name and to name=."""

    async def ok(out: Output) -> None: ...

    with pytest.raises(IdentifierError, match="tool id"):
        tool(name="two words")(ok)
    with pytest.raises(IdentifierError, match="tool id"):
        tool(name="a:b:c")(ok)

    async def naïve(out: Output) -> None: ...

    with pytest.raises(IdentifierError, match="naïve"):
        tool(naïve)


# -- results and errors ----------------------------------------------------------------


def test_the_return_value_is_the_result_and_the_output_streams() -> None:
    """What the function writes streams as frames; what it returns is the
    result's value; the model's text is the output's excerpt, then the value."""
    got = call(count, {"to": 3})
    assert got.text == "1\n2\n3\n"
    assert got.result == 3
    assert isinstance(got.terminal, ToolResult)
    assert got.terminal.output == "1\n2\n3\n"
    end = CallEnd.of("c", "count", got.terminal, None, frames=len(got.frames))
    assert end.text == "1\n2\n3\n3"


def test_a_function_returning_none_gives_the_model_its_output() -> None:
    """A None result adds nothing to the model's text: it reads the output."""

    @tool
    async def say(out: Output, word: str) -> None:
        out.write(word)

    got = call(say, {"word": "hé"})
    assert got.result is None
    assert isinstance(got.terminal, ToolResult)
    assert CallEnd.of("c", "say", got.terminal, None, frames=1).text == "hé"


def test_a_long_output_gives_the_model_head_marker_and_tail() -> None:
    """An output past the excerpt's limit reaches the model as its head, the
    omission marker and its tail; the stream itself is whole."""

    @tool
    async def flood(out: Output) -> None:
        for n in range(20000):
            out.write(f"line {n:05}\n")

    got = call(flood, {})
    assert got.text == "".join(f"line {n:05}\n" for n in range(20000))
    assert isinstance(got.terminal, ToolResult)
    text = got.terminal.output
    assert text is not None
    assert text.startswith("line 00000\n")
    assert text.endswith("line 19999\n")
    assert "bytes of output omitted" in text


def test_a_tool_error_fails_the_call_with_its_kind() -> None:
    """Raising ToolError fails the call with that kind, after the output."""
    got = call(fails, {"how": "tool_error"})
    assert got.text == "about to fail\n"
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.FORBIDDEN
    assert got.terminal.message == "no such thing"


def test_any_other_exception_is_an_internal_error_with_its_message() -> None:
    """Any other exception fails the call as internal_error, saying its type
    and message (never a traceback)."""
    got = call(fails, {"how": "value_error"})
    assert got.text == "about to fail\n"
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.INTERNAL_ERROR
    assert got.terminal.message == "ValueError: the value was wrong"


def test_a_plain_def_runs_in_a_worker_thread_and_writes_from_it() -> None:
    """A plain def runs off the event loop's thread; its writes stream."""
    got = call(threaded, {"lines": 3})
    assert got.text == "line 0\nline 1\nline 2\n"
    assert got.result["thread"] != got.result["main"]


def test_writes_from_many_threads_all_arrive() -> None:
    """Output.write is safe from several threads at once: every line arrives
    whole, none lost, whatever the interleaving."""

    @tool
    def many(out: Output, threads: int, lines: int) -> None:
        def work(k: int) -> None:
            for n in range(lines):
                out.write(f"t{k} {n}\n")

        workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    got = call(many, {"threads": 4, "lines": 2000})
    lines = got.text.splitlines()
    assert sorted(lines) == sorted(f"t{k} {n}" for k in range(4) for n in range(2000))


def test_without_progress_the_result_still_has_the_output() -> None:
    """A caller that wants no progress gets no frame, and the result's output."""
    got = call(count, {"to": 2}, wants_progress=False)
    assert got.frames == ()
    assert isinstance(got.terminal, ToolResult)
    assert got.terminal.output == "1\n2\n"


def test_a_written_line_is_visible_before_the_function_goes_on() -> None:
    """A line written and then waited on reaches the consumer while the
    function still runs (it waits for the consumer to have seen it): output is
    live, not held until the end or a tick nobody triggers."""
    seen = asyncio.Event()

    @tool
    async def waits(out: Output) -> str:
        for n in range(3):
            seen.clear()
            out.write(f"line {n}\n")
            await seen.wait()
        return "done"

    async def on_frame(item: Any) -> None:
        seen.set()

    got = call(waits, {}, on_frame=on_frame)
    assert got.text == "line 0\nline 1\nline 2\n"
    assert got.result == "done"


# -- out.run: real children -------------------------------------------------------------


def test_run_streams_a_child_and_returns_its_status() -> None:
    """out.run streams stdout and stderr in arrival order and returns the exit."""

    @tool
    async def both(out: Output) -> CommandResult:
        out.write("before\n")
        script = "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True)"
        ended = await out.run([PY, "-c", script])
        out.write("after\n")
        return ended

    got = call(both, {})
    assert got.text == "before\nout\nerr\nafter\n"
    value = got.result
    assert isinstance(value, CommandResult)
    assert (value.exit_code, value.signal, value.timed_out) == (0, None, False)


def test_run_takes_a_shell_string_cwd_and_env(tmp_path: Path) -> None:
    """A string runs through the shell, in ``cwd``, with ``env`` added."""

    @tool
    async def shell(out: Output, where: str) -> int | None:
        ended = await out.run('echo "$PWD $KIGI_X"; exit 3', cwd=where, env={"KIGI_X": "y"})
        return ended.exit_code

    got = call(shell, {"where": str(tmp_path)})
    assert got.text == f"{tmp_path} y\n"
    assert got.result == 3


def test_run_deadline_stops_the_group_and_says_timed_out() -> None:
    """timeout= stops the whole group; the result says timed_out."""

    @tool
    async def slow(out: Output) -> CommandResult:
        return await out.run(
            [PY, "-c", "import time; print('up', flush=True); time.sleep(60)"], timeout=0.5
        )

    got = call(slow, {})
    value = got.result
    assert isinstance(value, CommandResult)
    assert value.timed_out
    assert value.signal == "SIGTERM"
    assert got.text == "up\n"


def test_a_command_that_cannot_start_fails_the_call_as_execution() -> None:
    """A missing program is CommandNotStarted, an execution error."""

    @tool
    async def missing(out: Output) -> None:
        await out.run(["/nonexistent/program"])

    got = call(missing, {})
    assert isinstance(got.terminal, ToolError)
    assert got.terminal.kind is ToolErrorKind.EXECUTION
    assert "cannot start" in got.terminal.message
    assert issubclass(CommandNotStarted, ToolError)


def test_run_refuses_an_empty_command_and_a_bad_timeout() -> None:
    """An empty command or a non-positive timeout is refused at the call."""
    for command, timeout, problem in (
        ([], None, "empty"),
        ("", None, "empty"),
        (["true"], 0, "timeout"),
    ):

        @tool
        async def bad(out: Output) -> None:
            await out.run(command, timeout=timeout)  # noqa: B023

        got = call(bad, {})
        assert isinstance(got.terminal, ToolError)
        assert problem in got.terminal.message


def test_cancel_mid_run_stops_the_whole_group(tmp_path: Path) -> None:
    """Cancelling the call while out.run waits stops the command's group (a
    grandchild too) before the call ends cancelled."""
    pid_file = tmp_path / "pid"

    async def main() -> tuple[ToolError | ToolResult, int]:
        ctx = ToolContext("c1")
        events: list[ToolEvent] = []
        async with asyncio.timeout(PATIENCE_S):
            async with run_tool(sleeper, {"pid_file": str(pid_file)}, ctx=ctx) as run:
                async for event in run:
                    events.append(event)
                    if len(events) == 1:
                        ctx.cancel()
            pid = int(pid_file.read_text())
            await until_group_gone(pid)
        terminal = events[-1]
        assert isinstance(terminal, ToolError | ToolResult)
        return terminal, pid

    terminal, pid = asyncio.run(main())
    assert isinstance(terminal, ToolError)
    assert terminal.kind is ToolErrorKind.CANCELLED
    assert not group_running(pid)  # zombies left to init run nothing


@settings(max_examples=25, deadline=None)
@given(data=st.data(), cap=tiny_caps())
def test_split_characters_through_run_arrive_whole_at_tiny_caps(
    data: st.DataObject, cap: int | None
) -> None:
    """A real child writing 2-, 3- and 4-byte characters cut anywhere across
    its writes: at caps 0-4 the frames are capped, whole-character, and the
    text is the source exactly."""
    text = data.draw(st.text(alphabet="aé€😀\n", min_size=1, max_size=40))
    source = text.encode()
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(source) - 1, 1)), max_size=8)))
    parts = [source[a:b].hex() for a, b in zip([0, *cuts], [*cuts, len(source)], strict=True)]
    subject = tool(name="split", max_delta_bytes=cap)(split_child.fn)
    got = call(subject, {"parts": [p for p in parts if p]})
    checked = check_stream(got.frames, source, cap=cap, lossless=True)
    assert checked.text == text


# -- the testing kit takes function tools -------------------------------------------------


async def _write_steps(out: Output, steps: list[str | None]) -> None:
    """Write each step's bytes (hex), yielding to the loop on a tick (None)."""
    for step in steps:
        if step is None:
            await asyncio.sleep(0)
        else:
            out.write(bytes.fromhex(step))


def _writer(cap: int | None) -> FunctionTool:
    return tool(name="writer", max_delta_bytes=cap)(_write_steps)


test_function_tool_writes_fuzzed_at_tiny_caps = fuzz_streaming_tool(
    _writer,
    lambda source, steps: {"steps": [None if s is None else s.hex() for s in steps]},
    max_examples=60,
)


async def _run_argv(out: Output, argv: list[str]) -> None:
    """Run ``argv`` (a writer child)."""
    await out.run(argv)


test_function_tool_children_fuzzed_at_tiny_caps = fuzz_streaming_tool(
    lambda cap: tool(name="child", max_delta_bytes=cap)(_run_argv),
    lambda source, steps: {"argv": python_writer_argv(steps)},
    max_examples=15,
)


# -- a class tool through the same Output and pacer ---------------------------------------


class GrepArgs(msgspec.Struct, frozen=True):
    words: list[str]


SPEC = StreamingSpec(subkind="grep_chunk", max_delta_bytes=3)


class Echo(Tool[GrepArgs]):
    id = "echo-words"
    args_type = GrepArgs
    capabilities = ToolCapabilities(streaming=SPEC)

    async def execute(self, ctx: ToolContext, args: GrepArgs) -> AsyncIterator[ToolEvent]:
        async def work(out: Output) -> int:
            for word in args.words:
                out.write(word + "\n")
            return len(args.words)

        async for event in stream_output(ctx, SPEC, work):
            yield event


def test_a_class_tool_streams_through_the_same_output() -> None:
    """A class tool's execute() gets an Output from stream_output and yields
    its paced, capped frames and the result of its body."""
    got = call(Echo(), {"words": ["héllo", "wörld"]})
    assert got.text == "héllo\nwörld\n"
    assert got.result == 2
    check_stream(got.frames, "héllo\nwörld\n".encode(), cap=3, subkind="grep_chunk")


def test_writing_after_the_call_ended_is_refused() -> None:
    """An Output kept past its call refuses writes (a thread left behind stops)."""
    kept: list[Output] = []

    @tool
    async def keep(out: Output) -> None:
        kept.append(out)

    call(keep, {})
    with pytest.raises(RuntimeError, match="has ended"):
        kept[0].write("late")


def test_write_takes_text_and_bytes_only() -> None:
    """A value that is neither text nor bytes is a TypeError naming its type;
    a surrogate-escaped byte goes back to that byte."""

    @tool
    async def odd(out: Output) -> None:
        out.write(b"\xff".decode("utf-8", "surrogateescape"))
        with pytest.raises(TypeError, match="int"):
            out.write(5)  # type: ignore[arg-type]

    got = call(odd, {})
    assert got.text == "\ufffd"
    assert isinstance(got.terminal, ToolResult)
