"""Connecting a server to this process's standard streams: pipes, sockets and
terminals natively through the event loop, regular files with blocking I/O.

Rule 1. Input is read only as fast as it is taken: a regular file is read (in
        a thread) while the reader holds at most twice its limit, as the event
        loop pauses a pipe, so a server whose replies cannot be written (its
        stdout not read) stops reading a file of requests too, instead of
        loading all of it.
Rule 2. A regular file that cannot be read fails the reader with the error
        (``StreamReader.set_exception``), as does any other failure of the
        feeding task: whoever reads it (the server, which then stops its
        calls and raises it) learns of it; it is never lost in that task,
        which the reader it feeds owns (it ends at the file's end, or with
        the process; the reader is handed to the caller, so no block of code
        holds it).
Rule 3. Any input a user can give is served: a pipe, a socket, a terminal, a
        regular file, and a device the event loop cannot watch (``/dev/null``,
        which epoll refuses) read as a file is; the same for the output.
Rule 4. The wire is the fenced pair of descriptors (``_fence``) once the
        process is fenced: :func:`serve_stdio` fences first, so what the tools
        print goes to stderr, not onto the wire.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import stat
from collections.abc import Iterable
from typing import Any, Final

from .._call._sink import Sink
from .._tools._tool import Tool
from ._fence import fence_stdio, stdio_wire
from ._server import Server, ServerStats

__all__ = ("serve_stdio",)

#: Bytes read from a stdin that the event loop cannot watch (a regular file) at
#: a time, in a thread: the reader then splits them into lines as from a pipe.
FILE_READ_BYTES: Final = 64 * 1024


class _FileSink:
    """Blocking writes to a regular file (asyncio pipes refuse files)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        return None


class _FileFeed:
    """Feeds a ``StreamReader`` from a regular file, pausing as the reader asks
    (Rule 1): it is the reader's transport, for ``pause_reading`` and
    ``resume_reading`` alone."""

    def __init__(self, reader: asyncio.StreamReader, fd: int) -> None:
        self._reader = reader
        self._fd = fd
        self._reading = asyncio.Event()
        self._reading.set()
        # What the event loop's pipe transport is to a reader: the reader
        # pauses it past twice its limit and resumes it at its limit.
        reader.set_transport(self)  # type: ignore[arg-type]

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    async def run(self) -> None:
        reader = self._reader
        try:
            while True:
                await self._reading.wait()
                chunk = await asyncio.to_thread(os.read, self._fd, FILE_READ_BYTES)
                if not chunk:
                    break
                reader.feed_data(chunk)
        except Exception as exc:  # Rule 2: the reader's reader learns of it, whatever it is
            reader.set_exception(exc)
            return
        reader.feed_eof()


def _is_watchable(fd: int, events: int) -> bool:
    """Whether the event loop can watch ``fd`` for ``events``: a pipe, a
    socket or a terminal, and not a device the selector refuses (``/dev/null``
    under epoll, which asyncio would only report from a callback, leaving the
    reader waiting forever)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, events)
        except OSError:
            return False
    return True


class _WireOutput(asyncio.streams.FlowControlMixin):
    """The output pipe's protocol: flow control (a ``drain`` waits while the
    pipe is full and fails once it is gone), and ``lost`` set when the peer
    closed its end or a write failed."""

    def __init__(self, lost: asyncio.Future[None] | None) -> None:
        super().__init__()
        self._lost = lost

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)


async def open_stdio(
    *, limit: int = 2**16, lost: asyncio.Future[None] | None = None
) -> tuple[asyncio.StreamReader, Sink]:
    """The wire (this process's stdin and stdout, or their fenced copies:
    Rule 4) as an asyncio reader (buffering ``limit`` bytes) and a writer
    (pipes, sockets and terminals natively; regular files and devices the loop
    cannot watch with blocking I/O: Rule 3). ``lost`` is set when the output
    goes away (its reader closed its end; the loop sees it on a pipe or a
    socket).

    Raises:
        OSError: stdin or stdout is closed.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    stdin_fd, stdout_fd = stdio_wire()
    if _is_watchable(stdin_fd, selectors.EVENT_READ):
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin_fd, "rb", closefd=False)
        )
    else:  # a regular file, or a device the loop cannot watch (Rule 3)
        feed = _FileFeed(reader, stdin_fd)
        # Not in a scope: the feed lasts as long as the reader it feeds, which
        # is handed to the caller; its one failure goes to the reader (Rule 2).
        _background.add(task := loop.create_task(feed.run(), name="kigi stdin file feed"))
        task.add_done_callback(_background.discard)
    sink: Sink
    if _is_watchable(stdout_fd, selectors.EVENT_WRITE):
        transport, protocol = await loop.connect_write_pipe(
            lambda: _WireOutput(lost), os.fdopen(stdout_fd, "wb", closefd=False)
        )
        sink = asyncio.StreamWriter(transport, protocol, None, loop)
    else:  # a regular file, or a device the loop cannot watch (Rule 3)
        sink = _FileSink(stdout_fd)
    return reader, sink


# The tasks feeding a regular-file stdin: held here so none is collected mid-read.
_background: set[asyncio.Task[None]] = set()


async def serve_stdio(tools: Iterable[Tool[Any]], **options: Any) -> ServerStats:
    """Serve ``tools`` over this process's stdin and stdout until end of input;
    ``options`` are :class:`Server`'s keyword arguments. Returns its counters.

    The process is fenced first (:func:`fence_stdio`): from then on what any
    code prints to stdout goes to stderr and descriptor 0 reads ``/dev/null``,
    for the life of the process. Call :func:`fence_stdio` before importing the
    tools for what they print at import to be fenced too.

    Raises:
        ValueError: two tools share an id, or a bound is below 1 (see :class:`Server`).
        OSError: stdin or stdout is closed or cannot be watched.
    """
    server = Server(tools, **options)
    fence_stdio()
    reader, sink = await open_stdio()
    await server.serve(reader, sink)
    return server.statistics()
