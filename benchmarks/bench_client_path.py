"""The stdio client's own CPU per delivered MB, the server's left out: a
recorded ``kigi-stream serve`` output replayed through the client in process.

    python benchmarks/bench_client_path.py [--quick] [--mb N] [--rounds N] [--profile] [--check]

First one flood call (``benchmarks/_flood.py``, ``N`` MB) runs through a real
``serve`` child, and every line it writes is recorded. Then the recording is
replayed ``--rounds`` times through the path ``Client.spawn`` sets up: 1 MiB
chunks into its ``LineReader``, the client's read loop
(``ClientProtocol.receive_line``, the call's ``CallBuffer.put`` and
``Reassembler``), the call iterated as ``_timing.client_flood`` does. No pipe,
no server: what is left is the client's work alone, replayed identically each
round, so the figures vary less than ``bench_transport.py``'s (whose client
also pays the pipe's reads).

Prints the CPU per delivered MB of the whole path (least and median), then the
parts of it that grow with the bytes, each timed alone over the same lines:
the codec decoding them, the fold measuring each delta's UTF-8 size
(``str.encode``) and the fold whole (``Reassembler.appended``); what the whole
path costs beyond them is per-line Python and the event loop. ``--profile``
prints the cProfile top of one more replay.

The goal is issue 19's "transport at most twice the in-process CPU per MB"
halved: the client spends at most what the shell tool alone spends in process
(``bench_transport.in_process``, the median of three runs in the same process).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _flood import flood_command
from _goals import Goals
from _timing import MB, flood_parser, flood_plan
from bench_transport import in_process_costs

from kigi_tool_protocol import (
    JsonRpcNotification,
    JsonRpcRequest,
    ToolCallParams,
    ToolCallResult,
    json_codec,
)
from kigi_tool_protocol._methods import METHOD_TOOL_CALL
from kigi_tool_protocol._progress_line import decode_progress_line
from kigi_tool_runtime import Client
from kigi_tool_runtime._lines import LineReader

CALL_ID = "bench-call"
SESSION_ID = "bench-session"
#: Bytes handed to the reader at a time: the widened pipe's size.
CHUNK_BYTES = 1024 * 1024


def record(size: int) -> bytes:
    """Every line a ``serve`` child writes for one flood call of ``size`` bytes."""
    params: ToolCallParams[Any] = ToolCallParams(
        tool_call_id=CALL_ID, tool_id="bash", arguments={"command": flood_command(size)}
    )
    request: JsonRpcRequest[Any] = JsonRpcRequest(
        id=1, session_id=SESSION_ID, method=METHOD_TOOL_CALL, params=params
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write(json_codec.encode(request) + b"\n")
    server.stdin.flush()
    lines: list[bytes] = []
    for line in server.stdout:  # up to the call's response (its "id")
        lines.append(line)
        if b'"method"' not in line[:120]:
            break
    server.stdin.close()  # the server's input ends: it exits
    server.wait()
    return b"".join(lines)


class _Sink:
    """A writer that takes the call's request and goes nowhere."""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


async def replay(recorded: bytes) -> int:
    """Feed ``recorded`` through a client's path once; the text bytes its call's
    reassembler counted."""
    reader = LineReader(len(recorded) + 1)
    reader.connection_made(asyncio.BaseTransport())
    client = Client(reader, _Sink(), session_id=SESSION_ID)
    call = client.call("bash", {}, tool_call_id=CALL_ID)

    async def feed() -> None:
        for at in range(0, len(recorded), CHUNK_BYTES):
            reader.data_received(recorded[at : at + CHUNK_BYTES])
            await asyncio.sleep(0)  # the client reads between chunks, as from a pipe
        reader.eof_received()

    async def take() -> None:
        async for item in call:
            if isinstance(item, ToolCallResult):
                break

    await asyncio.gather(feed(), take())
    await client.aclose()
    state = call.reassembler.stream(CALL_ID, "bash_output_chunk")
    assert state is not None
    return state.text_bytes


def _least(work: Callable[[], object], rounds: int) -> float:
    """The least CPU seconds ``work`` took over ``rounds`` runs."""
    least = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        least = min(least, time.process_time() - started)
    return least


def parts(recorded: bytes, rounds: int) -> list[tuple[str, float]]:
    """The CPU seconds (least of ``rounds``) of each byte-proportional part."""
    from kigi_tool_runtime import Reassembler

    lines = recorded.splitlines()
    # Every line but the last (the call's response) is a progress line.
    progress = [m for m in map(decode_progress_line, lines) if isinstance(m, JsonRpcNotification)]
    frames = [m.params for m in progress]
    seqs = [m.seq for m in progress]
    deltas = [frame.body.delta for frame in frames]

    def decode() -> None:
        for line in lines:
            decode_progress_line(line)

    def sizes() -> None:
        for delta in deltas:
            len(delta.encode("utf-8", "surrogatepass"))

    def fold() -> None:
        reassembler = Reassembler(known_calls=[CALL_ID], keep_text=False)
        for frame, seq in zip(frames, seqs, strict=True):
            reassembler.appended(frame, seq)

    return [
        ("decoding the lines (decode_progress_line)", _least(decode, rounds)),
        ("  the fold's delta sizes (str.encode)", _least(sizes, rounds)),
        ("the fold (Reassembler.appended)", _least(fold, rounds)),
    ]


async def main() -> int:
    parser = flood_parser(__doc__, "a 20 MB flood, five replays")
    parser.add_argument("--rounds", type=int, help="replays of the recording")
    parser.add_argument("--profile", action="store_true", help="print a cProfile top")
    args = parser.parse_args()
    size, rounds = flood_plan(args, mb=100, rounds=9, quick_mb=20, quick_rounds=5)
    rounds = args.rounds or rounds
    recorded = record(size)
    cpu = []
    delivered = 0
    for _ in range(rounds):
        started = time.process_time()
        delivered = await replay(recorded)
        cpu.append(time.process_time() - started)
    baseline, _ = await in_process_costs(size)
    per_mb = [seconds / (delivered / MB) * 1000 for seconds in cpu]
    print(
        f"{size // MB} MB flood through serve, {len(recorded) / MB:.1f} MB of lines recorded,"
        f" {delivered / MB:.1f} MB of text delivered; {rounds} replay(s)"
    )
    print(
        f"client path CPU per delivered MB: least {min(per_mb):.3f} ms,"
        f" median {statistics.median(per_mb):.3f} ms"
        f" (the shell tool in process, median of 3: {baseline:.3f} ms)"
    )
    for name, seconds in parts(recorded, rounds):
        print(f"  {name:44s} {seconds / (delivered / MB) * 1000:.3f} ms/MB")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        await replay(recorded)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    goals = Goals()
    goals.record(
        "client path CPU per MB as a share of the shell tool's in process",
        statistics.median(per_mb) / baseline,
        1.0,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
