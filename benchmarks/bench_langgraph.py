"""Streamed text through LangGraph's ``tools`` channel against the in-process
``OutputStream``, in the same run.

    python benchmarks/bench_langgraph.py [--quick] [--mb N] [--cap N] [--check]

Baseline: the in-process ``OutputStream`` (bytes written in 64 KiB blocks and
drained into capped frames, no process, no event loop), then the served-call
core alone (``ServedCall`` running the shell tool, each frame taken as it comes).
LangGraph: the same command as a tool call of a real graph (a fake chat model,
a ``ToolNode`` with ``as_langchain_tool(ShellTool())``), streamed with
``stream_mode="tools"`` (sync ``stream`` and async ``astream``), each
``tool-output-delta`` folded by a ``ToolEventFolder`` as it arrives. The child
writes ``N`` MB of text as fast as it can; a consumer slower than the child
loses the middle (reported as gaps, never hidden), so the figures are
delivered text per second, deltas per second, and the share of the bytes
delivered. Rates swing with the load on a shared machine: compare figures
from the same run only. It ends with which goals were met (the fold saw every
frame the tool sent, and its loss report is the artifact's); ``--check``
exits 1 on a miss.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from _flood import flood_command
from _goals import Goals
from _timing import MB, flood_parser, flood_plan
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from kigi_tool_protocol import StreamingSpec
from kigi_tool_runtime import OutputStream, ServedCall, ShellTool
from kigi_tool_runtime._tools._shell import DEFAULT_TAIL_CAPACITY
from kigi_tool_runtime.langchain import ToolEventFolder, as_langchain_tool

BLOCK = 64 * 1024


class Round:
    """One call: seconds, delivered text bytes, deltas; and whether the fold
    saw every frame the tool sent with the tool's own loss report."""

    def __init__(self, seconds: float, delivered: int, deltas: int, faithful: bool = True) -> None:
        self.seconds, self.delivered, self.deltas, self.faithful = (
            seconds,
            delivered,
            deltas,
            faithful,
        )


def output_stream(size: int, cap: int) -> Round:
    line = b"the quick brown fox jumps over the lazy dog 0123456789 " + "é€\n".encode()
    block = (line * (BLOCK // len(line) + 1))[:BLOCK]
    spec = StreamingSpec(subkind="bash_output_chunk", max_delta_bytes=cap)
    stream = OutputStream(spec, capacity=DEFAULT_TAIL_CAPACITY)
    frames = 0
    started = time.perf_counter()
    left = size
    while left > 0:
        piece = block[: min(left, BLOCK)]
        stream.write(piece)
        left -= len(piece)
        frames += len(stream.drain())
    frames += len(stream.finish())
    return Round(time.perf_counter() - started, size, frames)


async def served_call(size: int, cap: int) -> Round:
    started = time.perf_counter()
    deltas = 0
    delivered = 0
    async with ServedCall(
        ShellTool(max_delta_bytes=cap), {"command": flood_command(size)}, call_id="bench"
    ) as call:
        async for delta in call:
            deltas += 1
            delivered += len(delta.delta.encode())
    return Round(time.perf_counter() - started, delivered, deltas)


def _graph(cap: int, size: int) -> Any:
    bash = as_langchain_tool(ShellTool(max_delta_bytes=cap))
    turn = AIMessage(
        "", tool_calls=[{"id": "bench-0", "name": "bash", "args": {"command": flood_command(size)}}]
    )
    model = GenericFakeChatModel(messages=iter([turn, AIMessage("done")]), disable_streaming=True)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([bash]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()
    graph.stream_eager = True  # tools events live while the node runs
    return graph


def _round(folder: ToolEventFolder, seconds: float) -> Round:
    call = folder.call("bench-0")
    assert call is not None
    assert call.finished, call
    assert call.error is None, call.error
    report = call.report()
    assert report is not None
    message = call.output
    assert isinstance(message, ToolMessage)
    loss = message.artifact["loss"]
    faithful = (
        loss["frames"] == report.frames
        and loss["delivered_bytes"] == report.text_bytes
        and loss["lost_bytes"]["max"] == report.lost_bytes
    )
    return Round(seconds, report.text_bytes, report.frames, faithful)


def langgraph_sync(size: int, cap: int) -> Round:
    graph = _graph(cap, size)
    folder = ToolEventFolder(keep_text=False)
    started = time.perf_counter()
    for event in graph.stream({"messages": [HumanMessage("go")]}, stream_mode="tools"):
        folder.absorb(event)
    return _round(folder, time.perf_counter() - started)


async def langgraph_async(size: int, cap: int) -> Round:
    graph = _graph(cap, size)
    folder = ToolEventFolder(keep_text=False)
    started = time.perf_counter()
    async for event in graph.astream({"messages": [HumanMessage("go")]}, stream_mode="tools"):
        folder.absorb(event)
    return _round(folder, time.perf_counter() - started)


def _line(name: str, rounds: list[Round], size: int) -> str:
    rates = [r.delivered / r.seconds / MB for r in rounds]
    deltas = [r.deltas / r.seconds for r in rounds]
    delivered = sum(r.delivered for r in rounds) / (size * len(rounds))
    return (
        f"{name:40s} median {statistics.median(rates):8.1f} MB/s"
        f" {statistics.median(deltas):9.0f} deltas/s  delivered {delivered:4.0%}"
    )


def _rate(rounds: list[Round]) -> float:
    return statistics.median(r.delivered / r.seconds for r in rounds)


def main() -> int:
    parser = flood_parser(__doc__, "two short rounds")
    parser.add_argument("--cap", type=int, default=16 * 1024, help="max delta bytes")
    args = parser.parse_args()
    size, rounds = flood_plan(args, mb=50, rounds=4, quick_mb=10, quick_rounds=2)
    print(f"{size // MB} MB of text per round, cap {args.cap} B, {rounds} round(s), median rates")
    base = [output_stream(size, args.cap) for _ in range(rounds)]
    core: list[Round] = []
    sync: list[Round] = []
    async_: list[Round] = []
    for _ in range(rounds):
        core.append(asyncio.run(served_call(size, args.cap)))
        sync.append(langgraph_sync(size, args.cap))
        async_.append(asyncio.run(langgraph_async(size, args.cap)))
    print(_line("OutputStream in process (baseline)", base, size))
    print(_line("ServedCall, shell tool (no LangGraph)", core, size))
    print(_line("LangGraph tools channel, sync stream", sync, size))
    print(_line("LangGraph tools channel, async astream", async_, size))
    for name, of in (("sync", sync), ("async", async_)):
        print(
            f"LangGraph {name} / ServedCall: {_rate(of) / _rate(core):.0%};"
            f" / OutputStream: {_rate(of) / _rate(base):.1%} (median MB/s)"
        )
    goals = Goals()
    graph_rounds = sync + async_
    goals.record(
        "LangGraph rounds whose fold missed a frame or disagreed with the artifact",
        sum(not r.faithful for r in graph_rounds),
        0,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
