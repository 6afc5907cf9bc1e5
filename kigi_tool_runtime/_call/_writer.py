"""``LineOutput``: the output of a server that batches lines (the stdio server,
MCP over stdio): their one writer loop, and their one final flush. It awaits
only its sink and what its server hands it, so an asyncio server and an anyio
one share it.

Invariants:

Rule 1. :meth:`LineOutput.run` is the writer loop: it asks the server for a
        batch (``gather``, which waits until there is something to write, and
        says when all is written), writes it and drains it before it asks
        again (:meth:`LineOutput.send`), so at most one batch is pending and
        bytes leave in the order they were gathered. An output that fails
        (``ConnectionError``, ``OSError``) ends the loop, broken (nothing more
        is written), and ``run`` says so.
Rule 2. Its :class:`StallWatch` hears of each send (started, done) and of every
        change seen in the transport's buffered bytes (a move of the output),
        so :meth:`LineOutput.stalled` is true exactly when a send is pending and
        no byte of it has left for ``stall_s`` (the stdio server's Rule 3), or
        the output broke (:meth:`LineOutput.broke`).
Rule 3. :meth:`LineOutput.final_flush` waits for the server's writer while the
        output moves, for at most ``FINAL_FLUSH_S`` from the time it is given,
        looking at least every ``WRITER_STALL_S`` (``_flush``'s rules); it says
        whether the writer finished, so the server abandons what is left when
        it did not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._flush import FinalFlush
from ._queue import StallWatch
from ._serving import WRITER_STALL_S
from ._sink import Sink

# Plumbing for the servers, not exported.
__all__: tuple[str, ...] = ()


class LineOutput:
    """One server's output (see the module's rules); ``clock``: the event
    loop's time."""

    __slots__ = ("_buffer_size", "_clock", "_last_buffered", "_sink", "watch")

    def __init__(
        self, sink: Sink, clock: Callable[[], float], *, stall_s: float = WRITER_STALL_S
    ) -> None:
        self._sink = sink
        self._clock = clock
        self.watch = StallWatch(stall_s)
        transport: Any = getattr(sink, "transport", None)
        self._buffer_size: Callable[[], int] | None = getattr(
            transport, "get_write_buffer_size", None
        )
        self._last_buffered: int | None = None

    @property
    def broken(self) -> bool:
        """The output broke, or was abandoned: nothing more is written."""
        return self.watch.broken

    def broke(self) -> None:
        """Nothing more is written (the output failed, or is abandoned)."""
        self.watch.broke()

    async def run(self, gather: Callable[[], Awaitable[bytes | bytearray | None]]) -> bool:
        """Write each batch ``gather`` makes until it returns ``None`` (Rule 1);
        returns False when the output failed first (it is then broken)."""
        send = self.send
        try:
            while (batch := await gather()) is not None:
                if batch:
                    await send(batch)
        except (ConnectionError, OSError):
            self.broke()
            return False
        return True

    async def send(self, batch: bytes | bytearray) -> None:
        """Write ``batch`` and wait until the sink took it (Rule 1).

        Raises:
            ConnectionError, OSError: the output failed (the server calls
                :meth:`broke` and stops writing).
        """
        watch = self.watch
        watch.sending(self._clock())
        self._sink.write(batch)
        await self._sink.drain()
        watch.sent()

    def stalled(self, now: float) -> bool:
        """Rule 2's verdict at ``now``. A slow reader that keeps taking bytes,
        however few, is not stalled."""
        self._poll(now)
        return self.watch.stalled(now)

    def recheck_in(self, now: float) -> float:
        """Seconds after which :meth:`stalled` could turn true."""
        self._poll(now)
        return self.watch.recheck_in(now)

    def _poll(self, now: float) -> None:
        """A change in the transport's buffered bytes is a move of the output."""
        size = self._buffer_size
        if size is None:
            return
        buffered = int(size())
        if buffered != self._last_buffered:
            self._last_buffered = buffered
            self.watch.moved(now)

    async def final_flush(
        self,
        started: float,
        done: Callable[[], bool],
        wait: Callable[[float], Awaitable[Any]],
    ) -> bool:
        """Wait for the writer (``done``: it finished; ``wait(s)``: wait for it
        at most ``s`` seconds) as Rule 3 says, the budget counted from
        ``started``. Returns whether it finished; when not, the server stops
        it and abandons what is left."""
        flush = FinalFlush(started)
        clock = self._clock
        while not done():
            now = clock()
            delay = flush.wait_for(now, self.stalled(now))
            if delay is None:
                return False
            await wait(delay)
        return True
