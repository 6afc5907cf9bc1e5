"""Hypothesis strategies for the consumer side: real producer runs and the
JSON-lines frame logs they make, whole or damaged.

A producer run drives the real streaming core (``TailBuffer`` and
``stream_chunk``, drained on every tick as ``DeltaStreamer.drain`` does) over a
source and a write/tick schedule from :mod:`._strategies`, and records, for
every frame, how many source bytes were truly lost just before it. Frame logs
encode runs as ``tool_call_progress`` notification lines with a connection
``seq``; damaged logs break them the ways a transport or a hostile peer can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hypothesis import strategies as st

from kigi_tool_protocol import (
    PartialResultPayload,
    StreamingSpec,
    encode_progress_line,
)

from .._producer._chunk import stream_chunk
from .._producer._tail import TailBuffer
from ._strategies import byte_sources, caps, schedules, tail_sizes, utf8_text_sources

__all__ = ("damaged_frame_logs", "frame_logs")

#: The ways :func:`damaged_frame_logs` breaks a log.
DAMAGES: Final = (
    "duplicate",
    "drop",
    "swap",
    "garbage",
    "cut",
    "invalid_utf8",
    "unknown_field",
    "regress",
    "other_method",
    "dropped_count",
    "unknown_call",
)


@dataclass(frozen=True)
class ProducerRun:
    """One source streamed through the real core.

    ``frames`` are the payloads in order; ``losses[i]`` is how many source bytes
    were lost just before frame ``i`` (0 for a frame that is not a gap; ``None``
    when the source is not valid UTF-8, where the wire cannot say); ``cap`` the
    spec's ``max_delta_bytes`` it was streamed with.
    """

    tool_call_id: str
    subkind: str
    source: bytes
    capacity: int
    frames: tuple[PartialResultPayload, ...]
    losses: tuple[int | None, ...]
    cap: int | None = None

    @property
    def lost(self) -> bool:
        """Whether any frame reported a gap."""
        return any(frame.gap for frame in self.frames)


def _run(
    source: bytes, steps: list[bytes | None], spec: StreamingSpec, capacity: int
) -> tuple[list[PartialResultPayload], list[int | None]]:
    valid = True
    try:
        source.decode("utf-8")
    except UnicodeDecodeError:
        valid = False
    buffer = TailBuffer(capacity)
    frames: list[PartialResultPayload] = []
    losses: list[int | None] = []
    cursor = 0

    def drain(final: bool) -> None:
        nonlocal cursor
        while True:
            before = cursor
            progress, cursor = stream_chunk(
                spec, buffer.tail(), buffer.total, cursor, buffer.truncated, final=final
            )
            if progress is None:
                return
            payload = progress.payload
            assert isinstance(payload, PartialResultPayload)
            frames.append(payload)
            if not payload.gap:
                losses.append(0)
            elif valid:
                losses.append(cursor - before - len(payload.delta.encode()))
            else:
                losses.append(None)

    for step in steps:
        if step is None:
            drain(False)
        else:
            buffer.write(step)
    drain(True)
    return frames, losses


@st.composite
def producer_runs(
    draw: st.DrawFn,
    sources: st.SearchStrategy[bytes] | None = None,
    *,
    tool_call_id: str = "call-0",
    subkind: str = "bash_output_chunk",
) -> ProducerRun:
    """A source (valid UTF-8 or arbitrary bytes unless ``sources`` is given), a
    cap, a tail size and a schedule, streamed through the real core."""
    source = draw(
        sources if sources is not None else st.one_of(utf8_text_sources(), byte_sources())
    )
    spec = StreamingSpec(subkind=subkind, max_delta_bytes=draw(caps()))
    capacity = draw(st.one_of(tail_sizes(), st.integers(4, 64)))
    steps = draw(schedules(source))
    frames, losses = _run(source, steps, spec, capacity)
    return ProducerRun(
        tool_call_id, subkind, source, capacity, tuple(frames), tuple(losses), spec.max_delta_bytes
    )


def progress_line(
    tool_call_id: str,
    kind: str,
    body: object,
    seq: int | None = None,
    *,
    dropped_count: int | None = None,
) -> bytes:
    """One ``tool_call_progress`` notification as a JSON line (no newline): the
    protocol's :func:`encode_progress_line` with ``newline=False``."""
    return encode_progress_line(
        tool_call_id, kind, body, seq=seq, dropped_count=dropped_count, newline=False
    )


@dataclass(frozen=True)
class FrameLog:
    """The lines of a log and the producer runs interleaved in it."""

    runs: tuple[ProducerRun, ...]
    lines: tuple[bytes, ...]


@st.composite
def frame_logs(draw: st.DrawFn, *, max_calls: int = 3, with_seq: bool = True) -> FrameLog:
    """A connection's log: up to ``max_calls`` producer runs (each its own call
    and subkind), their frames interleaved in any order that keeps each run's
    own order, with ``seq`` counting from any start when ``with_seq``."""
    count = draw(st.integers(1, max_calls))
    runs = [
        draw(producer_runs(tool_call_id=f"call-{index}", subkind=f"chunk_{index % 2}"))
        for index in range(count)
    ]
    queues = [list(run.frames) for run in runs]
    order: list[int] = []
    remaining = [len(queue) for queue in queues]
    live = [index for index, left in enumerate(remaining) if left]
    # One strategy per set of runs with frames left, not one per frame: a run
    # can have thousands of frames, and building a strategy costs far more than
    # drawing from it (shrinking replays this loop for every attempt). Once one
    # run is left its frames come in order and draw nothing, as a one-element
    # ``sampled_from`` would not.
    while len(live) > 1:
        picks = st.sampled_from(live)
        while all(remaining[index] for index in live):
            pick = draw(picks)
            order.append(pick)
            remaining[pick] -= 1
        live = [index for index in live if remaining[index]]
    for index in live:
        order.extend([index] * remaining[index])
    seq = draw(st.integers(0, 2**40)) if with_seq else None
    positions = [0] * count
    lines: list[bytes] = []
    for pick in order:
        run = runs[pick]
        payload = queues[pick][positions[pick]]
        positions[pick] += 1
        lines.append(progress_line(run.tool_call_id, run.subkind, payload, seq))
        if seq is not None:
            seq += 1
    return FrameLog(tuple(runs), tuple(lines))


@st.composite
def damaged_frame_logs(draw: st.DrawFn) -> tuple[list[bytes], str]:
    """A frame log broken one way from :data:`DAMAGES` (or two), and the name
    of the first damage done. A damage that needs lines the log lacks (a swap
    in a one-line log, a cut in an empty one) is done as ``other_method``, and
    named so."""
    lines = list(draw(frame_logs()).lines)
    damages = draw(st.lists(st.sampled_from(DAMAGES), min_size=1, max_size=2))
    done: list[str] = []
    for damage in damages:
        done.append(damage)
        at = draw(st.integers(0, max(len(lines) - 1, 0)))
        line = lines[at] if lines else b"{}"
        if damage == "duplicate" and lines:
            lines.insert(at, line)
        elif damage == "drop" and lines:
            del lines[at]
        elif damage == "swap" and len(lines) > 1:
            at = min(at, len(lines) - 2)
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
        elif damage == "garbage":
            lines.insert(at, draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b" "))
        elif damage == "cut" and lines:
            lines[at] = line[: draw(st.integers(1, max(len(line) - 1, 1)))]
        elif damage == "invalid_utf8" and lines:
            cut = draw(st.integers(0, len(line)))
            lines[at] = line[:cut] + b"\xff" + line[cut:]
        elif damage == "unknown_field":
            lines.insert(
                at, progress_line("call-0", "chunk_0", {"delta": "x", "total_bytes": 1, "x": 1})
            )
        elif damage == "regress":
            lines.insert(at, progress_line("call-0", "chunk_0", {"delta": "", "total_bytes": 0}))
        elif damage == "dropped_count":
            body = {"delta": "d", "total_bytes": 2**40}
            lines.insert(at, progress_line("call-0", "chunk_0", body, dropped_count=2))
        elif damage == "unknown_call":
            body = {"delta": "u", "total_bytes": 1, "truncated": True}
            lines.insert(at, progress_line("stranger", "chunk_0", body))
        else:
            done[-1] = "other_method"
            lines.insert(at, b'{"jsonrpc":"2.0","method":"ping","params":null}')
    return lines, done[0]
