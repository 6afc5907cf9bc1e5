"""The least CPU a ``serve`` -> pipe -> client transport of this wire can spend
per delivered MB, against the shell tool in process, in the same run.

    python benchmarks/bench_transport_floor.py [--quick] [--mb N] [--rounds N] [--check]

``bench_transport.py`` measures the whole transport. This script asks what is
left when everything that is not a pass over the bytes is taken away: no event
loop, no queue, no per-frame bookkeeping, no copy into a transport's buffer.
It first runs the shell tool in process over the flood (``_flood.py``), as
``bench_transport.in_process`` does, and keeps its frames (the real deltas, cut
at the real 16 KiB cap). Then it times, each alone over those frames and the
least of ``--rounds`` runs, only the passes the wire itself requires:

- the server encoding each body as JSON (``_call/_frame_check.encoded_body``,
  on fresh copies of the deltas: msgspec caches a string's UTF-8 in the string,
  so a second encode of the same object is not what a server pays);
- the server assembling the lines, 1 MiB batches (``append_progress_lines``);
- the lines written into a real pipe (widened as ``Client.spawn`` widens it)
  and read out of it, 256 KiB a read, each piece the pipe holds written then
  read in this process (the two copies and their system calls, without the
  wake-ups of a reader on another core, whose cost swings with the machine's
  load);
- the client splitting them into lines (``LineSplitter``, 256 KiB at a time)
  and decoding each (``decode_progress_line``);
- the client's fold (``Reassembler.appended``) less the in-process consumer's
  own pass over the same deltas (``len(delta.encode())``), which the fold
  replaces.

The floor is the in-process CPU plus those passes; the goal of issue 19's item
4 (transport CPU at most twice in-process) cannot be met by a transport whose
floor is already past it. Split by side (the server: the tool, less the
in-process consumer's pass, then encode, assemble, write; the client: read,
split, decode, fold), the floor also bounds the rate: each side is one
process, so the transport goes no faster than its busier side, and its rate is
at most ``in-process wall time / max(server, client)`` of the in-process rate
(the flooding child, which takes a share of the two cores too, left out, so
the bound is generous).

The in-process figure carries each call's fixed costs (starting the flooding
child): on a short flood they weigh more, and the ratio looks better than on a
long one. ``--quick`` (20 MB) is for a quick look; the figures to compare are
those of the default 100 MB.

Beside the floor, in the same run, the real transport: ``--rounds`` flood
calls through ``kigi-stream serve`` and the ``Client`` (``bench_transport``'s
path), each one's CPU per delivered MB (the server's and this process's, the
flooding child left out), the least of them held against the floor. Issue
35's goal: at most 1.3 times the floor (``--check`` exits 1 past it). Both are
CPU time, not wall time, so a machine busy with other work slows them without
adding much to them; not nothing, though (shared caches and cores, more
wake-ups), and the floor's passes, each the least of many short runs, feel it
less than a whole call does: on a loaded machine the ratio reads high, so the
least call is the figure, and a ratio is only compared with one of the same
run.

Two ways round the JSON passes are timed beside them, on the same deltas: a
server that kept each delta's UTF-8 bytes and escaped them itself (bytes
``replace`` and ``translate``, no string built) instead of encoding the string;
and a client that took the delta undecoded (``msgspec.Raw``, which still checks
its escapes) and unescaped it with ``codecs.escape_decode``, its UTF-8 size
then free, instead of decoding a string and measuring it (``str.encode``).
Neither is in the transport: they are printed so that a run shows whether
they would be worth it. Figures vary with the machine's load: compare those
of one run only.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec
from _flood import flood_command
from _goals import Goals
from _timing import MB, client_flood, flood_parser, flood_plan
from bench_transport import cpu_seconds, in_process_costs

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec
from kigi_tool_protocol._progress_line import append_progress_lines, decode_progress_line
from kigi_tool_runtime import (
    Client,
    Reassembler,
    ShellArgs,
    ShellTool,
    ToolContext,
    run_tool,
)
from kigi_tool_runtime._call._frame_check import encoded_body
from kigi_tool_runtime._process import widen_pipe
from kigi_tool_runtime._transport._server import WRITE_BATCH_BYTES
from kigi_tool_runtime._wire._split import LineSplitter

CALL_ID = "floor-call"
KIND = "bash_output_chunk"
#: What one call hands the stdio server's writer in one turn.
BATCH_BYTES = WRITE_BATCH_BYTES
#: What one read of the client's pipe takes (asyncio's pipe transport's).
READ_BYTES = 256 * 1024
#: The goals (``bench_transport``'s): the transport's CPU per MB at most this
#: many times in-process, and its rate at least this share of in-process.
GOAL_RATIO = 2.0
GOAL_SHARE = 0.8
#: The goal of issue 35's item 6: the real transport's CPU per delivered MB at
#: most this many times the floor's, both measured in the same run.
GOAL_OVER_FLOOR = 1.3


async def tool_frames(size: int) -> list[PartialResultPayload]:
    """The payloads of one in-process flood of ``size`` bytes, in order."""
    payloads: list[PartialResultPayload] = []
    run = run_tool(ShellTool(), ShellArgs(command=flood_command(size)), ctx=ToolContext("floor"))
    async with run:
        async for event in run:
            payload = getattr(event, "payload", None)
            if isinstance(payload, PartialResultPayload):
                payloads.append(payload)
    return payloads


Step = Callable[[Any], Any]


def per_item(items: list[Any], prepare: Step, work: Step) -> list[float]:
    """Seconds ``work`` took on each of ``items``, each timed alone right after
    ``prepare`` made its input (not counted), so the input is as hot in the
    cache as it is in a transport, where the step before has just written it;
    and each result let go before the next, so memory is reused, not grown."""
    clock = time.perf_counter
    spent = []
    for item in items:
        ready = prepare(item)
        started = clock()
        work(ready)
        spent.append(clock() - started)
    return spent


def least_of(runs: list[list[float]]) -> float:
    """The sum over the items of each item's least time in ``runs``: a step
    this short that the machine interrupted once is timed right in another run,
    so what is left is the step's own cost (a lower bound, as a floor must be)."""
    return float(sum(min(times) for times in zip(*runs, strict=True)))


def least(rounds: int, items: list[Any], prepare: Step, work: Step) -> float:
    """:func:`least_of` ``rounds`` runs of :func:`per_item`."""
    return least_of([per_item(items, prepare, work) for _ in range(rounds)])


def frame_of(payload: PartialResultPayload) -> ToolCallProgressFrame[Any]:
    return ToolCallProgressFrame(tool_call_id=CALL_ID, kind=KIND, body=payload)


def fresh(payload: PartialResultPayload) -> ToolCallProgressFrame[Any]:
    """A frame of ``payload`` whose delta is a new string object, just written:
    msgspec caches a string's UTF-8 in the string, so a second encode of the
    same object is not what a server pays."""
    delta = (payload.delta + "\0")[:-1]
    return frame_of(
        PartialResultPayload(
            delta=delta,
            total_bytes=payload.total_bytes,
            truncated=payload.truncated,
            gap=payload.gap,
        )
    )


def batches_of(bodies: list[Any]) -> list[list[tuple[str, Any, int, None]]]:
    """The bodies as the frames of writer turns of about ``BATCH_BYTES``."""
    batches: list[list[tuple[str, Any, int, None]]] = [[]]
    size = 0
    for seq, body in enumerate(bodies):
        batches[-1].append((KIND, body, seq, None))
        size += len(body)
        if size >= BATCH_BYTES:
            batches.append([])
            size = 0
    return batches


def assemble(frames: list[tuple[str, Any, int, None]]) -> bytearray:
    batch = bytearray()
    append_progress_lines(batch, CALL_ID, frames)
    return batch


def pipe_cpu(batches: list[bytearray]) -> tuple[float, float]:
    """CPU seconds of writing ``batches`` into a widened pipe and of reading
    them out of it, ``READ_BYTES`` a read, both in this process: each piece
    the pipe holds is written whole, then read out, before the next. No reader
    waits on another core to be woken, so what is timed is the least the pipe
    costs (its two copies and their system calls): a writer and a reader on
    two cores cost more the more often each wakes the other, which depends on
    what else the machine runs."""
    read_fd, write_fd = os.pipe()
    try:
        widen_pipe(read_fd)
        room = fcntl.fcntl(read_fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))
        clock = time.process_time
        written = read = 0.0
        for batch in batches:
            view = memoryview(batch)
            while view:
                started = clock()
                sent = os.write(write_fd, view[:room])
                written += clock() - started
                view = view[sent:]
                started = clock()
                while sent:
                    sent -= len(os.read(read_fd, READ_BYTES))
                read += clock() - started
        return written, read
    finally:
        os.close(read_fd)
        os.close(write_fd)


def consume(delta: str) -> None:
    """The in-process consumer's pass over a delta (``bench_transport``'s)."""
    len(delta.encode())


#: Control bytes JSON escapes as ``\\u00XX`` (all but tab, newline and return)
#: mapped to 0, every other byte to 1: a translated delta holds a 0 only when
#: the delta holds one of them.
_CONTROLS = bytes(0 if c < 0x20 and c not in b"\t\n\r" else 1 for c in range(256))
_ESCAPES = ((b"\\", b"\\\\"), (b'"', b'\\"'), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t"))


def escape_utf8(data: bytes) -> bytes | None:
    """The JSON string of UTF-8 ``data`` as msgspec writes it, escaped from the
    bytes; ``None`` when a control byte needs ``\\u00XX`` (left to msgspec)."""
    if b"\0" in data.translate(_CONTROLS):
        return None
    for raw, escaped in _ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return b'"' + data + b'"'


# Built, not declared, so no annotation is left to resolve (the tests load this
# script without making it a module of sys.modules).
_RawDelta = msgspec.defstruct("_RawDelta", [("delta", msgspec.Raw)])
_raw_delta = msgspec.json.Decoder(_RawDelta).decode
#: A ``\\u`` or ``\\/`` escape, which ``codecs.escape_decode`` does not know.
_OTHER_ESCAPE = re.compile(rb"\\[u/]")


def unescape_utf8(body: bytes) -> tuple[str, int] | None:
    """The delta of ``body`` and its UTF-8 size, unescaped from its bytes;
    ``None`` when it holds an escape left to msgspec."""
    decoded: Any = _raw_delta(body)
    raw = bytes(decoded.delta)
    if _OTHER_ESCAPE.search(raw):
        return None
    data = codecs.escape_decode(raw[1:-1])[0]
    return data.decode(), len(data)


def run_seconds(pid: int) -> float:
    """CPU seconds of process ``pid``'s threads (not its children), to the
    nanosecond (``/proc/<pid>/task/*/schedstat``); a thread that has ended is
    no longer counted, so this is taken across a call whose threads outlive it
    (the server's). Where that is not there, ``bench_transport``'s clock-tick
    figure (10 ms steps, coarse for a short call) instead."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return cpu_seconds(pid)
    total = 0
    for task in tasks:
        # A thread that ended meanwhile is left out.
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as stat:
            total += int(stat.read().split()[0])
    return total / 1e9


async def transport_costs(size: int, rounds: int) -> list[tuple[float, float]]:
    """The server's and the client's CPU milliseconds per delivered MB in each
    of ``rounds`` calls flooding ``size`` bytes through the real transport
    (``kigi-stream serve`` in a child, its stdout pipe, the ``Client`` and the
    call's ``Reassembler``, as ``bench_transport`` runs them; the client is
    this process), the flooding child not counted. CPU time, not wall: other
    processes on the machine slow a call down without adding to its CPU,
    though they still cost it some (caches, a shared core, more wake-ups), so
    the least call is the figure to hold against the floor."""
    costs = []
    command = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
    async with await Client.spawn(command) as client:
        await client.list_tools()  # the server is up before the clock starts
        assert client.process is not None
        pid = client.process.pid
        for _ in range(rounds):
            started, server = time.process_time(), run_seconds(pid)
            _, state = await client_flood(client, size)
            client_cpu, server_cpu = time.process_time() - started, run_seconds(pid) - server
            per_mb = 1000 / (state.text_bytes / MB)
            costs.append((server_cpu * per_mb, client_cpu * per_mb))
    return costs


def decode_and_measure(body: bytes) -> int:
    """What the client does today for the same: decode, then measure."""
    return len(json_codec.decode(body, PartialResultPayload).delta.encode())


async def main() -> int:
    parser = flood_parser(__doc__, "a 20 MB flood, five rounds")
    parser.add_argument("--rounds", type=int, help="runs of each pass (the least counts)")
    args = parser.parse_args()
    size, rounds = flood_plan(args, mb=100, rounds=7, quick_mb=20, quick_rounds=5)
    rounds = args.rounds or rounds
    baseline, baseline_wall = await in_process_costs(size)
    transport = await transport_costs(size, rounds)
    payloads = await tool_frames(size)
    text_mb = sum(len(p.delta.encode()) for p in payloads) / MB
    bodies = [encoded_body(frame_of(p)) for p in payloads]
    turns = batches_of(bodies)
    batches = [assemble(frames) for frames in turns]
    data = b"".join(batches)
    chunks = [data[at : at + READ_BYTES] for at in range(0, len(data), READ_BYTES)]
    lines = data.splitlines()
    splitter = LineSplitter(len(data) + 1)
    same = lambda item: item  # noqa: E731

    def fold() -> list[float]:
        # As a stdio Call builds its reassembler (keep_text=False by default).
        reassembler = Reassembler(known_calls=[CALL_ID], keep_text=False)
        appended = reassembler.appended
        return per_item(lines, decode_progress_line, lambda m: appended(m.params, m.seq))

    def delta_of(line: bytes) -> str:
        message: Any = decode_progress_line(line)
        delta: str = message.params.body.delta
        return delta

    pipe = [pipe_cpu(batches) for _ in range(rounds)]
    consumer = least(rounds, lines, delta_of, consume)
    # Each pass with the side that pays it: the server runs the tool (the
    # in-process figure less its consumer's pass), the client the fold.
    passes = [
        ("server", "body JSON encode", least(rounds, payloads, fresh, encoded_body)),
        ("server", "line assembly", least(rounds, turns, same, assemble)),
        ("server", "pipe write", min(write for write, _ in pipe)),
        ("client", "pipe read", min(read for _, read in pipe)),
        ("client", "line split", least(rounds, chunks, same, splitter.feed)),
        ("client", "line decode", least(rounds, lines, same, decode_progress_line)),
        # Noise can make the difference negative: it is at least nothing.
        (
            "client",
            "fold, less the consumer's pass",
            max(0.0, least_of([fold() for _ in range(rounds)]) - consumer),
        ),
    ]
    print(
        f"{size // MB} MB flood, {len(payloads)} frames, {text_mb:.1f} MB of text;"
        f" each pass the least of {rounds}"
    )
    print(
        f"  {'shell tool in process (median of 3)':44s} {baseline:6.3f} ms/MB"
        f" ({baseline_wall:.3f} ms/MB of wall time)"
    )
    consumer_ms = consumer / text_mb * 1000
    side = {"server": baseline - consumer_ms, "client": consumer_ms}
    for who, name, seconds in passes:
        per_mb = seconds / text_mb * 1000
        side[who] += per_mb
        print(f"  + {who + ': ' + name:42s} {per_mb:6.3f} ms/MB")
    floor = side["server"] + side["client"]
    ratio = floor / baseline
    print(f"  = {'the floor':42s} {floor:6.3f} ms/MB, {ratio:.2f}x in-process")
    # Each side is one process, so the transport spends at least its busier
    # side's CPU per MB in wall time (more, once the flooding child shares the
    # two cores): its rate is at most this share of the in-process run's.
    ceiling = baseline_wall / max(side["server"], side["client"])
    print(
        f"    (server {side['server']:.3f} ms/MB, client {side['client']:.3f} ms/MB: the"
        f" transport's rate at most {ceiling:.0%} of in-process on two cores)"
    )
    server, client = min(transport, key=sum)
    real = server + client
    over_floor = real / floor
    print(
        f"  {'the real transport, least of ' + str(rounds) + ' calls':44s} {real:6.3f} ms/MB,"
        f" {over_floor:.2f}x the floor"
    )
    print(
        f"    (server {server:.3f} ms/MB, client {client:.3f} ms/MB, the flood not counted;"
        f" the median call {statistics.median(map(sum, transport)):.3f} ms/MB)"
    )
    utf8 = [p.delta.encode() for p in payloads]
    body_bytes = [bytes(body) for body in bodies]
    for payload, data, body in zip(payloads, utf8, body_bytes, strict=True):
        # Each way gives what it replaces, byte for byte, for every delta
        # timed (none left to msgspec, which would time less work).
        assert escape_utf8(data) == json_codec.encode(payload.delta)
        assert unescape_utf8(body) == (payload.delta, len(data))
    print("ways round the JSON passes (not in the transport), beside what they replace:")
    for name, seconds in (
        ("server: body JSON encode (again)", least(rounds, payloads, fresh, encoded_body)),
        ("server: escape the delta's UTF-8 bytes", least(rounds, utf8, bytes, escape_utf8)),
        (
            "client: decode the body, measure the delta",
            least(rounds, body_bytes, bytes, decode_and_measure),
        ),
        ("client: unescape the delta's bytes", least(rounds, body_bytes, bytes, unescape_utf8)),
    ):
        print(f"    {name:42s} {seconds / text_mb * 1000:6.3f} ms/MB")
    goals = Goals()
    goals.record(
        "the transport's floor as a multiple of in-process CPU", ratio, GOAL_RATIO, at_most=True
    )
    goals.record("the transport's rate ceiling as a share of in-process", ceiling, GOAL_SHARE)
    goals.record(
        "the real transport's CPU per delivered MB as a multiple of the floor",
        over_floor,
        GOAL_OVER_FLOOR,
        at_most=True,
    )
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
