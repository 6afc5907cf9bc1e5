"""In-memory writers for a server's or client's output in process (``write``,
``drain``, ``close``): one that keeps what was written, one that drops it."""

from __future__ import annotations

import asyncio


class KeptSink:
    """An output that takes every write at once and keeps the bytes."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes | bytearray) -> None:
        self.written += data

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def close(self) -> None:
        pass


class NullSink:
    """An output that takes every write and keeps nothing, never failing."""

    def write(self, data: bytes | bytearray) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass
