"""OpenTelemetry spans of calls: the sans-IO trace (what a host was handed,
what its queue dropped), one ``execute_tool`` span per call with the GenAI and
``kigi.output.`` attributes, the caller's span as the parent across a real
``serve`` child and a real NATS worker, and nothing imported without the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk", reason="the test extra brings opentelemetry-sdk")

from bounded import run_within
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_export import Gappy

from kigi_tool_protocol import StreamingSpec, ToolCallResult, progress_to_frame
from kigi_tool_runtime import (
    Client,
    OutputStream,
    Reassembler,
    ServedCall,
    ShellTool,
    ToolContext,
    ToolError,
    ToolResult,
)
from kigi_tool_runtime._call._feed import QueueFeed, produce
from kigi_tool_runtime._call._queue import CallQueue, QueuePolicy, StallWatch
from kigi_tool_runtime._call._trace import CallTrace, end_attributes, gap_events
from kigi_tool_runtime._tools._runner import run_tool

EXPORT = Path(__file__).with_name("otel_export.py")
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """This process's spans (one SDK provider for the whole run, set once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


# -- the sans-IO trace -----------------------------------------------------------------


def _frames(sizes: list[int]) -> list[Any]:
    spec = StreamingSpec(subkind="t_chunk", max_delta_bytes=16)
    stream = OutputStream(spec, capacity=64)
    frames = []
    for size in sizes:
        stream.write(b"a" * size)
        frames.extend(progress_to_frame("c", p) for p in stream.drain())
    frames.extend(progress_to_frame("c", p) for p in stream.finish())
    return frames


@settings(max_examples=200)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    schedule=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=30, max_size=30),
)
def test_the_trace_counts_what_the_queue_handed_on_and_dropped(
    sizes: list[int], schedule: list[tuple[int, bool]]
) -> None:
    """Whatever the takes and drops of a call's queue, the trace folds exactly
    the frames the host took (then the rest, at the end) and counts the
    dropped ones: its reports equal a fold of the frames the host got."""
    frames = _frames(sizes)
    queue: CallQueue[Any, None] = CallQueue(QueuePolicy.drop_oldest_when_stalled(3))
    traced = CallTrace("c")
    host = Reassembler(known_calls=["c"], keep_text=False)
    for n, frame in enumerate(frames):
        takes, stalled = schedule[n % len(schedule)]
        for _ in range(takes):  # the host takes while the producer waits
            taken = queue.take()
            if taken is not None:
                host.appended(taken.item, taken.seq)
        if not queue.offer(frame, 1):
            if stalled:  # the host stalled: the oldest are dropped
                assert queue.offer(frame, 1, stalled=True)
            else:  # the producer waits for a take
                taken = queue.take()
                assert taken is not None
                host.appended(taken.item, taken.seq)
                assert queue.offer(frame, 1)
        traced.offered(frame)
        traced.queue_moved(len(queue), queue.dropped)
    traced.flush()
    while (taken := queue.take()) is not None:
        host.appended(taken.item, taken.seq)
    assert traced.frames_dropped == queue.dropped
    assert traced.reports() == host.reports(ended=True)


def test_end_attributes_say_every_loss() -> None:
    """A gap makes the call incomplete, counts its bytes (exact here) and
    gives one event with its range; a failure sets error.type."""
    traced = CallTrace("c")
    for frame in _frames([8, 200, 3]):
        traced.delivered(frame)
    reports = traced.reports()
    attributes = end_attributes(ToolResult(value=None), reports)
    assert attributes["kigi.output.complete"] is False
    assert attributes["kigi.output.gaps"] == 1
    assert attributes["kigi.output.bytes_produced"] == 211
    lost = attributes["kigi.output.bytes_lost"]
    assert attributes["kigi.output.bytes_delivered"] + lost == 211
    assert "error.type" not in attributes
    failed = end_attributes(ToolError("timeout", "too slow"), reports)
    assert failed["error.type"] == "timeout"
    (event,) = gap_events(reports)
    assert event["kigi.gap.bytes_lost"] == lost
    assert event["kigi.gap.stream"] == "t_chunk"


# -- spans in process ------------------------------------------------------------------


def test_a_served_call_is_one_span_under_the_current_one(spans: InMemorySpanExporter) -> None:
    """An in-process host's call (ServedCall) is one ``execute_tool`` span, a
    child of the span current where it runs, with the GenAI attributes and
    the gap said as an attribute and an event."""

    async def main() -> None:
        with trace.get_tracer("test").start_as_current_span("agent turn"):
            async with ServedCall(Gappy(), {}, call_id="g1") as call:
                end = await call.run()
        assert end.ok

    run_within(main(), 30)
    by_name = {span.name: span for span in spans.get_finished_spans()}
    turn, call = by_name["agent turn"], by_name["execute_tool gappy"]
    assert call.parent is not None
    assert call.parent.span_id == turn.context.span_id
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "gappy"
    assert attributes["gen_ai.tool.call.id"] == "g1"
    assert attributes["kigi.output.gaps"] == 1
    assert attributes["kigi.output.complete"] is False
    assert attributes["kigi.output.bytes_produced"] == 112
    assert attributes["kigi.output.bytes_lost"] == 96
    assert [event.name for event in call.events] == ["kigi.gap"]


def test_a_failed_call_says_its_error_type(spans: InMemorySpanExporter) -> None:
    """A call that fails ends its span with status ERROR and error.type."""

    async def main() -> None:
        async with ServedCall(ShellTool(), {"command": "exit 3"}, call_id="f1") as call:
            await call.run()
        async with ServedCall(ShellTool(), {"nope": 1}, call_id="f2") as call:
            await call.run()

    run_within(main(), 30)
    by_id = {dict(s.attributes or {})["gen_ai.tool.call.id"]: s for s in spans.get_finished_spans()}
    bad = by_id["f2"]
    assert dict(bad.attributes or {})["error.type"] == "invalid_params"
    assert bad.status.status_code is trace.StatusCode.ERROR
    assert dict(by_id["f1"].attributes or {})["kigi.output.complete"] is True


def test_a_call_left_early_ends_its_one_span_cancelled(spans: InMemorySpanExporter) -> None:
    """The call's one loop (``_call/_run_loop`` Rule 3): a call left before its
    end, iterated plainly or with heartbeats, ends its one span ``cancelled``;
    a call a queued host stops (a frame it cannot send) ends it with that
    error, not ``cancelled``."""

    async def main() -> None:
        async with ServedCall(Gappy(), {}, call_id="plain") as call:
            async for _ in call:
                break
        async with ServedCall(Gappy(), {}, call_id="beating", heartbeat_s=30.0) as call:
            async for _ in call.events():
                break

        def refuse(frame: Any) -> tuple[Any, int]:
            raise ToolError.frame_too_large(99, 10)

        feed: QueueFeed[Any, Any] = QueueFeed(CallQueue(QueuePolicy.wait(4)), StallWatch(1.0))
        run = run_tool(Gappy(), {}, ctx=ToolContext("queued"))
        terminal = await produce(run, feed, refuse)
        assert isinstance(terminal, ToolError)
        assert terminal.kind.value == "frame_too_large"

    run_within(main(), 30)
    ended = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    by_id = {attributes["gen_ai.tool.call.id"]: attributes for attributes in ended}
    assert len(ended) == len(by_id) == 3  # one span a call
    assert by_id["plain"]["error.type"] == "cancelled"
    assert by_id["beating"]["error.type"] == "cancelled"
    assert by_id["queued"]["error.type"] == "frame_too_large"


def test_without_the_extra_nothing_is_imported() -> None:
    """With OpenTelemetry not importable, a call runs and no opentelemetry
    module is loaded."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import asyncio\n"
        "from kigi_tool_runtime import ServedCall, ShellTool\n"
        "async def main():\n"
        "    async with ServedCall(ShellTool(), {'command': 'echo hi'}, call_id='n') as call:\n"
        "        end = await call.run()\n"
        "    assert end.ok, end.text\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    assert out.stdout.strip() == b"[]"


# -- across processes --------------------------------------------------------------------


def _read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_callers_span_is_the_parent_of_a_serve_childs(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A call over the stdio wire carries the caller's traceparent in the
    request's ``trace_context``: the ``serve`` child's span is its child, in
    the same trace, with the call's figures."""
    out = tmp_path / "spans.jsonl"
    serve = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--tools", f"{EXPORT}:TOOLS"]
    env = dict(os.environ, KIGI_TEST_SPANS=str(out))

    async def main() -> str:
        with trace.get_tracer("test").start_as_current_span("agent turn") as turn:
            async with await Client.spawn(serve, env=env) as client:
                call = client.call("bash", {"command": "printf hello"})
                assert isinstance(await call.result(), ToolCallResult)
                gappy = client.call("gappy", {})
                await gappy.result()
        return f"{turn.get_span_context().span_id:016x}"

    parent = run_within(main(), 60)
    trace_id = f"{spans.get_finished_spans()[-1].context.trace_id:032x}"
    by_name = {span["name"]: span for span in _read_spans(out)}
    bash = by_name["execute_tool bash"]
    assert bash["parent_span_id"] == parent
    assert bash["trace_id"] == trace_id
    assert bash["attributes"]["kigi.output.bytes_produced"] == 5
    assert bash["attributes"]["kigi.output.bytes_delivered"] == 5
    assert bash["attributes"]["kigi.output.complete"] is True
    gap = by_name["execute_tool gappy"]
    assert gap["parent_span_id"] == parent
    assert gap["attributes"]["kigi.output.gaps"] == 1
    assert [event["name"] for event in gap["events"]] == ["kigi.gap"]


def test_the_callers_span_is_the_parent_of_a_nats_workers(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A call over NATS carries the caller's trace context in its message's
    headers: a ``serve --nats`` worker's span is the caller's span's child."""
    pytest.importorskip("nats")
    from nats_server import NatsServer, server_binary

    from kigi_tool_runtime.nats import NatsClient, connect

    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary")
    server = NatsServer(binary, tmp_path / "js", tmp_path / "nats.log")
    server.start()
    out = tmp_path / "spans.jsonl"
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats", server.url),
            *("--tools", f"{EXPORT}:TOOLS", "--nats-prefix", "ko"),
        ],
        env=dict(os.environ, KIGI_TEST_SPANS=str(out)),
        stderr=subprocess.DEVNULL,
    )

    async def main() -> str:
        client = NatsClient(await connect(server.url), prefix="ko", owns_connection=True)
        async with client:
            with trace.get_tracer("test").start_as_current_span("agent turn") as turn:
                call = await client.call("bash", {"command": "printf hello"})
                assert isinstance(await call.result(), ToolCallResult)
        return f"{turn.get_span_context().span_id:016x}"

    try:
        parent = run_within(main(), 60)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        server.stop()
    (bash,) = (span for span in _read_spans(out) if span["name"] == "execute_tool bash")
    assert bash["parent_span_id"] == parent
    assert bash["attributes"]["gen_ai.tool.name"] == "bash"
    assert bash["attributes"]["kigi.output.bytes_delivered"] == 5


def test_mcp_meta_traceparent_parents_the_call_span(spans: InMemorySpanExporter) -> None:
    """An MCP ``tools/call`` whose ``_meta`` holds ``traceparent`` and
    ``tracestate`` (as VS Code sends them) is traced as that span's child."""
    pytest.importorskip("mcp")
    from mcp import Client as McpClient

    from kigi_tool_runtime.mcp import McpToolServer

    server = McpToolServer([ShellTool()])
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    meta = {
        "traceparent": f"00-{trace_id}-{parent}-01",
        "tracestate": "vendor=1",
        "progressToken": "p1",
    }

    async def main() -> None:
        async with McpClient(server.server) as client:
            result = await client.call_tool("bash", {"command": "printf hi"}, meta=meta)
            assert not result.is_error

    run_within(main(), 30)
    (call,) = (s for s in spans.get_finished_spans() if s.name == "execute_tool bash")
    assert f"{call.context.trace_id:032x}" == trace_id
    assert call.parent is not None
    assert f"{call.parent.span_id:016x}" == parent
    assert call.context.trace_state.get("vendor") == "1"
    assert dict(call.attributes or {})["kigi.output.bytes_delivered"] == 2
