"""The kigi tool runtime: stream tool output as capped, UTF-8-complete deltas,
and reassemble it knowing exactly what was lost."""

from ._chunk import Chunk, stream_chunk
from ._streamer import DeltaStreamer
from ._tail import MIN_TAIL_CAPACITY, TailBuffer, TailStats

__all__: tuple[str, ...] = (
    "MIN_TAIL_CAPACITY",
    "Chunk",
    "DeltaStreamer",
    "TailBuffer",
    "TailStats",
    "stream_chunk",
)
