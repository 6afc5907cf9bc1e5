"""``Client``: call tools on a server that speaks JSON lines of JSON-RPC 2.0.

Invariants:

Rule 1. A call is ``CallProgress* (ToolCallResult | ToolError)``: iterating a
        :class:`Call` yields progress, then its ``ToolCallResult`` last; a failed
        call raises :class:`RemoteToolError` (a ``ToolError``) instead. Every
        progress frame is absorbed by the call's own :class:`Reassembler` as it
        arrives, so ``call.reassembler`` is the whole view of what the server
        sent, whether or not the consumer has taken every item yet.
Rule 2. A request never hangs: a server that closes its output (exits,
        crashes, is killed) fails every pending call and request with
        ``connection_lost``, and one made after that (or after ``aclose``)
        fails at once. A call with a ``timeout`` fails with ``timeout`` at most
        the client's ``timeout_grace`` (default :data:`TIMEOUT_GRACE_S`) after
        it, and ``list_tools(timeout=...)`` at it, whatever the server does
        (one that stopped reading included).
Rule 3. Memory is bounded: each call buffers at most
        ``call_buffer_frames`` (default :data:`CALL_BUFFER_FRAMES`) progress
        items its consumer has not taken, in a ``CallBuffer``
        (``_call/_buffer.py``). Past that the oldest untaken item is dropped,
        and the drop is a loss told three ways (its Rules 3, 4): counted
        (``Call.frames_dropped``); marked where it happened, as a gap the next
        item of its stream renders before its own text (``appended.gap``,
        inferred, the dropped items' bytes); and in the call's loss report, a
        ``dropped_frames`` anomaly of the stream, so the report is not
        ``complete``. The reassembler's figures (and its text, with
        ``keep_text``) hold the dropped items all the same. A call keeps its
        text only when asked (``Client.call(keep_text=True)``), and at most
        :data:`MAX_CALL_TEXT_BYTES` of it; otherwise its reassembler keeps
        figures and losses, and each item's ``appended`` carries its delta.
        The client never stops reading for one slow consumer, so a consumer
        that waits on one call while another floods cannot deadlock; the
        terminal is never dropped.
Rule 4. Leaving a call early (``aclose()``, or leaving ``async with call:``
        before it ended) sends the hook ``Cancel`` notification for it and
        discards its later frames; ``cancel()`` sends it and goes on to the
        server's ``cancelled`` reply. Either waits at most ``timeout_grace``
        seconds for the notification to reach a server that is not reading
        its input.
        (A bare ``break`` out of ``async for`` cannot be seen: use
        ``async with``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import IO, Any, Final, NamedTuple, Protocol, Self

from kigi_tool_protocol import ToolCallResult
from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING
from kigi_tool_protocol._methods import METHOD_TOOLS_LIST

from .._call._buffer import CallBuffer
from .._call._caller import TIMEOUT_GRACE_S, CallHandle, CallProgress, CallTerms, RemoteToolError
from .._call._limits import CALL_BUFFER_FRAMES, MAX_CALL_TEXT_BYTES
from .._closing import AsyncClosing
from .._consumer._reassembler import Reassembler
from .._lines import LineReader, read_line_batches
from .._otel import TRACEPARENT, current_carrier
from .._process import group_alive, spawn_in_group, stop_group, widen_pipe
from .._tools._runner import STOP_WAIT_S
from ._rpc_client import (
    CallEnded,
    ClientEvent,
    ClientProtocol,
    ProgressReceived,
    ProgressRefused,
    check_bounds,
    check_timeout,
    check_timeout_grace,
    deadline_ms_of,
    request_timed_out,
)

__all__ = ("Call", "CallProgress", "Client", "RemoteToolError")


#: Seconds :meth:`Client.aclose` waits for a server process to exit after its
#: input closed (it cancels its calls first) before sending its process group
#: SIGTERM.
CLOSE_WAIT_S: Final = 15.0

#: Seconds :meth:`Client.aclose` gives a server process (and its process group)
#: to exit after SIGTERM before SIGKILL. A kigi server answers SIGTERM by
#: cancelling its calls and waiting up to the runner's ``STOP_WAIT_S`` for their
#: tools to stop (the shell tool's process-group SIGTERM, grace and drain), then
#: writing their replies; the margin covers that and its exit on a loaded
#: machine. A SIGKILL any sooner would leave the commands it runs orphaned.
CLOSE_GRACE_S: Final = STOP_WAIT_S + 2.0


class ClientStats(NamedTuple):
    """Counters of a :class:`Client`: lines read, lines it could not use
    (undecodable, oversized, for no call it knows), calls made."""

    lines: int
    lines_unused: int
    calls: int


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...


class _CallLink:
    """What a :class:`Call` may ask of the connection it runs on: its item bound,
    flushing what was sent, and giving the call up (sending its cancel)."""

    __slots__ = (
        "abandon",
        "buffer_frames",
        "cancel",
        "flush",
        "flush_notice",
        "flushed",
        "timeout_grace",
    )

    def __init__(
        self,
        buffer_frames: int,
        flushed: Callable[[], bool],
        flush: Callable[[], Awaitable[None]],
        flush_notice: Callable[[], Awaitable[None]],
        cancel: Callable[[Call], None],
        abandon: Callable[[Call], None],
        timeout_grace: float,
    ) -> None:
        self.buffer_frames = buffer_frames
        #: Seconds past a call's ``timeout`` it waits for the server's reply.
        self.timeout_grace = timeout_grace
        #: Whether ``flush`` has nothing to do (it would return at once).
        self.flushed = flushed
        #: Flush what was sent.
        self.flush = flush
        #: Flush a notification, waiting a bounded time for a server not reading.
        self.flush_notice = flush_notice
        #: Send the call's cancel notification.
        self.cancel = cancel
        #: Stop waiting for the call and send its cancel, if it was still pending.
        self.abandon = abandon


class Call(CallHandle):
    """One tool call in progress. Iterate it (``async for``) for
    :class:`CallProgress` items and, last, the ``ToolCallResult``; or
    ``await call.result()`` for the result alone.

    Raises (while iterating):
        RemoteToolError: the call failed (server error, ``connection_lost``,
            ``timeout``, ``cancelled``).
    """

    def __init__(
        self,
        link: _CallLink,
        request_id: int,
        tool_call_id: str,
        tool_id: str,
        timeout: float | None,
        keep_text: bool = False,
    ) -> None:
        self._link = link
        self.request_id = request_id
        self.tool_call_id = tool_call_id
        self.tool_id = tool_id
        self.reassembler = Reassembler(
            known_calls=[tool_call_id],
            keep_text=keep_text,
            max_text_bytes=MAX_CALL_TEXT_BYTES if keep_text else None,
        )
        self.outcome: ToolCallResult | RemoteToolError | None = None
        self._terms = CallTerms(
            tool_id,
            tool_call_id,
            timeout,
            asyncio.get_running_loop().time(),
            "the server did not answer in time",
            grace=link.timeout_grace,
        )
        self._buffer = CallBuffer(self.reassembler, link.buffer_frames)
        self._getter: asyncio.Future[None] | None = None
        self._finished = False  # the consumer has seen the end

    @property
    def frames_dropped(self) -> int:
        """Frames dropped because the consumer fell behind (Rule 3)."""
        return self._buffer.frames_dropped

    def __repr__(self) -> str:
        return f"Call(tool_id={self.tool_id!r}, tool_call_id={self.tool_call_id!r})"

    # -- fed by the client's reader -----------------------------------------------

    def _wake(self) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _end(self, outcome: ToolCallResult | RemoteToolError) -> bool:
        if not self._buffer.end():
            return False
        self.outcome = outcome
        self._wake()
        return True

    # -- what the handle's decisions do here (see CallHandle) ---------------------

    _settle = _end

    def _has_ended(self) -> bool:
        return self._buffer.ended

    def _give_up(self) -> None:
        self._link.abandon(self)

    async def _ask_cancel(self) -> None:
        self._link.cancel(self)
        await self._link.flush_notice()

    async def _abandoned(self) -> None:
        await self._link.flush_notice()

    # -- the consumer --------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[CallProgress | ToolCallResult]:
        return self

    async def __anext__(self) -> CallProgress | ToolCallResult:
        if self._finished:
            raise StopAsyncIteration
        # Most items find nothing to flush: then the flush, which would return
        # without waiting (so its deadline could never fire), is skipped, and
        # an item held is returned at once (the hot path: no loop looked up).
        if not self._link.flushed():
            loop = asyncio.get_running_loop()
            try:
                # A server that stopped reading its input blocks the flush: the
                # call's deadline bounds that wait too (Rule 2).
                async with asyncio.timeout(self._remaining(loop)):
                    await self._link.flush()
            except TimeoutError:
                self._time_out(loop.time())
        buffer = self._buffer
        while (progress := buffer.take()) is None and not buffer.ended:
            loop = asyncio.get_running_loop()
            self._getter = loop.create_future()
            remaining = self._remaining(loop)
            try:
                if remaining is not None and remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    await self._getter
            except TimeoutError:
                self._time_out(loop.time())
            finally:
                self._getter = None
        if progress is not None:
            return progress
        self._finished = True
        outcome = self.outcome
        assert outcome is not None
        if isinstance(outcome, RemoteToolError):
            raise outcome
        return outcome

    def _remaining(self, loop: asyncio.AbstractEventLoop) -> float | None:
        return self._terms.remaining(loop.time())


class Client(AsyncClosing):
    """A connection to one tool server. Make it with :meth:`spawn` (start a server
    process) or :meth:`connect` (wrap streams); use it as an async context manager.

    ``reader`` is a ``StreamReader`` or a :class:`LineReader` protocol (which
    brings its own line limit). ``max_frame_bytes`` bounds a line read from the
    server (longer ones are skipped unread and counted); ``session_id`` is sent
    on every message;
    ``call_buffer_frames`` bounds each call's untaken items (Rule 3).
    ``timeout_grace`` (seconds, default :data:`TIMEOUT_GRACE_S`) is how long
    the client waits on the server past a bound of its own: for a call's
    ``timeout`` reply past its timeout (Rule 2), and for a cancel to reach a
    server that is not reading its input (Rule 4).
    ``process``, the server the client stops when it closes, must lead its own
    process group, as :meth:`spawn` starts it.

    The client reads the server's output in a task of its own, which
    :meth:`spawn` and :meth:`connect` start; a client constructed directly
    starts it on first use (``async with``, :meth:`call`, :meth:`list_tools`,
    :meth:`aclose`), so constructing one starts nothing. :meth:`aclose` ends
    that task; if it failed (a bug: a broken connection is not a failure), its
    error fails every pending call (``connection_lost``, naming it) and is
    raised from :meth:`aclose`.

    Raises:
        ValueError: ``max_frame_bytes`` or ``call_buffer_frames`` is below 1,
            ``timeout_grace`` is not positive and finite, or ``process`` does
            not lead its own process group.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader | LineReader,
        writer: _Writer,
        *,
        process: asyncio.subprocess.Process | None = None,
        session_id: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES_CEILING,
        call_buffer_frames: int = CALL_BUFFER_FRAMES,
        timeout_grace: float = TIMEOUT_GRACE_S,
    ) -> None:
        check_bounds(max_frame_bytes, call_buffer_frames)
        check_timeout_grace(timeout_grace)
        if process is not None:
            _check_leads_group(process)
        self._reader = reader
        self._writer = writer
        self.process = process
        self.session_id = session_id or f"sess_{uuid.uuid4().hex}"
        self._max_frame_bytes = max_frame_bytes
        self._protocol = ClientProtocol(self.session_id, max_frame_bytes=max_frame_bytes)
        self._link = _CallLink(
            call_buffer_frames,
            self._flushed,
            self._flush,
            self._flush_notice,
            self._send_cancel,
            self._abandon,
            timeout_grace,
        )
        self._calls: dict[str, Call] = {}  # the pending calls' handles
        self._requests: dict[int, asyncio.Future[Any]] = {}  # requests other than calls
        self._closed = False
        self._unflushed = False
        self._pipe: asyncio.BaseTransport | None = None  # the read end made by spawn()
        self._read_task: asyncio.Task[None] | None = None  # see _reading

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        stderr: int | IO[Any] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        session_id: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES_CEILING,
        call_buffer_frames: int = CALL_BUFFER_FRAMES,
        timeout_grace: float = TIMEOUT_GRACE_S,
    ) -> Client:
        """Start ``argv`` (any program that serves the protocol on its stdin and
        stdout) and connect to it. ``stderr`` is inherited unless given.

        The server runs in a session and process group of its own, so that
        :meth:`aclose` can stop it together with everything it started in its
        group. So a terminal's Ctrl-C (SIGINT, sent to the terminal's
        foreground group), Ctrl-Z and hang-up reach this process, not the
        server: close the client on them (``async with``, which ``asyncio.run``
        unwinds on Ctrl-C) and the server is stopped. A client process that
        dies without closing closes the server's input by dying; a kigi server
        then cancels its calls (stopping their commands) and exits by itself.

        Raises:
            ValueError: a bound is below 1, or ``timeout_grace`` is not
                positive and finite (nothing is started).
            OSError: the program could not be started.
        """
        check_bounds(max_frame_bytes, call_buffer_frames)
        check_timeout_grace(timeout_grace)
        # The server's stdout is a pipe made here, so it can be widened first.
        read_fd, write_fd = os.pipe()
        widen_pipe(read_fd)
        try:
            process = await spawn_in_group(
                *argv,
                # Not held: a client that dies closes the server's input, and a
                # kigi server then stops its calls and exits by itself.
                held=False,
                stdin=asyncio.subprocess.PIPE,
                stdout=write_fd,
                stderr=stderr,
                env=env,
                cwd=cwd,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the child holds the only write end now
        assert process.stdin is not None
        pipe: IO[bytes] | None = None
        try:
            reader = LineReader(max_frame_bytes)
            pipe = open(read_fd, "rb", buffering=0)  # noqa: SIM115 (the transport closes it)
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_read_pipe(lambda: reader, pipe)
        except BaseException:
            # Sent nothing yet, the server runs no command that a SIGKILL could
            # orphan: no grace. Its group must not outlive a failed spawn.
            process.stdin.close()
            if pipe is None:
                os.close(read_fd)
            else:
                pipe.close()
            await stop_group(process, 0.0)
            raise
        client = cls(
            reader,
            process.stdin,
            process=process,
            session_id=session_id,
            max_frame_bytes=max_frame_bytes,
            call_buffer_frames=call_buffer_frames,
            timeout_grace=timeout_grace,
        )
        client._pipe = transport
        client._reading()
        return client

    @classmethod
    async def connect(
        cls,
        reader: asyncio.StreamReader,
        writer: _Writer,
        *,
        session_id: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES_CEILING,
        call_buffer_frames: int = CALL_BUFFER_FRAMES,
        timeout_grace: float = TIMEOUT_GRACE_S,
    ) -> Client:
        """Wrap an already-open connection (``writer`` needs ``write``, ``drain``
        and ``close``).

        Raises:
            ValueError: ``max_frame_bytes`` or ``call_buffer_frames`` is below
                1, or ``timeout_grace`` is not positive and finite.
        """
        client = cls(
            reader,
            writer,
            session_id=session_id,
            max_frame_bytes=max_frame_bytes,
            call_buffer_frames=call_buffer_frames,
            timeout_grace=timeout_grace,
        )
        client._reading()
        return client

    def statistics(self) -> ClientStats:
        """The client's counters (see :class:`ClientStats`)."""
        protocol = self._protocol
        return ClientStats(protocol.lines, protocol.lines_unused, protocol.calls_made)

    async def __aenter__(self) -> Self:
        self._reading()
        return self

    # -- calls -------------------------------------------------------------------

    def call(
        self,
        tool_id: str,
        arguments: Any,
        *,
        timeout: float | None = None,
        tool_call_id: str | None = None,
        keep_text: bool = False,
    ) -> Call:
        """Start a call of ``tool_id`` with ``arguments`` (any JSON-able value or
        msgspec Struct). ``timeout`` (seconds) is sent as ``deadline_ms`` and
        enforced here too (Rule 2). Iterate the returned :class:`Call`.
        ``keep_text``: the call's reassembler keeps the text (at most
        :data:`MAX_CALL_TEXT_BYTES` per stream; Rule 3).

        Raises:
            ValueError: ``tool_call_id`` is already in use on this connection, or
                ``timeout`` is not positive or longer than ``deadline_ms``
                carries (``math.inf`` included; ``None`` is no timeout).
            WireError: ``arguments`` hold a value JSON cannot carry (nothing is
                sent and the call id stays free).
        """
        check_timeout(timeout)
        call_id = tool_call_id or str(uuid.uuid4())
        request_id, line = self._protocol.start_call(
            tool_id,
            arguments,
            tool_call_id=call_id,
            deadline_ms=deadline_ms_of(timeout),
            # The caller's span is the server's call span's parent (no-op without OTel).
            trace_context=current_carrier().get(TRACEPARENT),
        )
        call = Call(self._link, request_id, call_id, tool_id, timeout, keep_text)
        self._reading()
        if self._protocol.lost is not None:
            call._end(self._connection_lost(tool_id))
            return call
        self._calls[call_id] = call
        self._send(line)
        return call

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The server's tools (``tools.list``): id, description, input schema and
        capabilities of each. ``timeout`` (seconds) bounds the wait for the
        answer, sending included (Rule 2).

        Raises:
            ValueError: ``timeout`` is not positive, or infinite or past what
                ``deadline_ms`` carries.
            RemoteToolError: the server answered with an error; ``connection_lost``
                (at once when the connection is already gone or closed);
                ``timeout``, no answer within ``timeout``.
        """
        self._reading()
        return self._protocol.tools_listed(await self._request(METHOD_TOOLS_LIST, {}, timeout))

    async def aclose(self, *, wait: float = CLOSE_WAIT_S, grace: float = CLOSE_GRACE_S) -> None:
        """Close the connection: end the server's input (it cancels what is in
        flight), wait for its output to end, and, for a spawned server, for it to
        exit. A spawned server still running after ``wait`` seconds (default
        :data:`CLOSE_WAIT_S`) has its process group sent SIGTERM, so it can stop
        the commands it runs, and SIGKILL if any of it is still running
        ``grace`` seconds later (default :data:`CLOSE_GRACE_S`). Processes left
        in the server's group after it exited are stopped the same way.

        Cancelled while waiting, it goes on to SIGTERM at once (and SIGKILL
        after ``grace``); cancelled again, to SIGKILL at once. However it ends,
        the spawned server's process group is gone when it returns or raises.
        The client's reading task has ended too.

        Raises:
            Exception: the client's reading task failed (see :class:`Client`);
                everything above was done all the same.
        """
        if self._closed:
            return
        read_task = self._reading()
        self._closed = True
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.close()
        process = self.process
        try:
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await asyncio.wait({read_task})  # never raises
                        if process is not None:
                            await process.wait()
            finally:  # timed out, cancelled or done: the group must not outlive it
                if process is not None and (process.returncode is None or group_alive(process.pid)):
                    await self._stop_server(process, grace, read_task)
        finally:
            try:
                if not read_task.done():
                    read_task.cancel()
                    await asyncio.wait({read_task})
            finally:
                if self._pipe is not None:
                    self._pipe.close()
        if not read_task.cancelled() and (failure := read_task.exception()) is not None:
            raise failure

    # -- internals ---------------------------------------------------------------

    def _reading(self) -> asyncio.Task[None]:
        """The task reading the server's output, started on first use. It is
        the client's: :meth:`aclose` ends it and raises its failure."""
        task = self._read_task
        if task is None:
            # Not in a scope: the task lives as long as the connection, which
            # is no block of code (``spawn`` returns it open); ``aclose``
            # cancels, awaits and raises it.
            task = self._read_task = asyncio.get_running_loop().create_task(
                self._read_loop(), name="kigi client reader"
            )
        return task

    async def _request(self, method: str, params: Any, timeout: float | None) -> Any:
        """Send a request and wait for its result (Rule 2: a lost connection
        fails it at once, ``timeout`` bounds the whole wait)."""
        check_timeout(timeout)
        if self._protocol.lost is not None or self._closed:
            raise self._connection_lost(method)
        loop = asyncio.get_running_loop()
        started = loop.time()
        request_id, line = self._protocol.start_request(method, params)
        future: asyncio.Future[Any] = loop.create_future()
        # Registered before it is sent: a send that finds the connection gone
        # fails it through _lose like every other pending request.
        self._requests[request_id] = future
        try:
            async with asyncio.timeout(timeout):
                self._send(line)
                await self._flush()
                return await future
        except TimeoutError:
            raise request_timed_out(method, timeout, loop.time() - started).error() from None
        finally:
            self._requests.pop(request_id, None)
            self._protocol.forget_request(request_id)

    async def _stop_server(
        self, process: asyncio.subprocess.Process, grace: float, read_task: asyncio.Task[None]
    ) -> None:
        # SIGTERM first: a SIGKILL cannot be handled, so the server could not stop
        # the process groups of the commands it runs (each its own), and they
        # would live on. The replies it writes while stopping are read within
        # the grace: its output ends when its group has gone, unless something
        # it started outside its group holds it open (then read no longer).
        await stop_group(process, grace, drained=read_task)

    def _send(self, line: bytes) -> None:
        if self._protocol.lost is not None:
            return
        try:
            self._writer.write(line)
        except (ConnectionError, OSError, RuntimeError):
            self._lose("the server's input is closed")
        self._unflushed = True

    def _flushed(self) -> bool:
        """Whether :meth:`_flush` has nothing to do."""
        return self._protocol.lost is not None or self._closed or not self._unflushed

    async def _flush(self) -> None:
        if self._flushed():
            return
        self._unflushed = False
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            self._lose("the server's input is closed")

    async def _flush_notice(self) -> None:
        # A notification (a cancel) is sent best effort: a server that stopped
        # reading its input cannot hold up leaving a call (Rule 2).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._link.timeout_grace):
                await self._flush()

    def _send_cancel(self, call: Call) -> None:
        self._send(self._protocol.cancel_line(call.tool_id, call.tool_call_id))

    def _abandon(self, call: Call) -> None:
        if self._calls.get(call.tool_call_id) is call:
            del self._calls[call.tool_call_id]
            self._protocol.forget_call(call.tool_call_id)
            self._send_cancel(call)

    def _connection_lost(self, what: str) -> RemoteToolError:
        return self._protocol.lost_failure(what).error()

    def _lose(self, why: str) -> None:
        if self._protocol.lost is not None:
            return
        if self.process is not None and self.process.returncode is not None:
            why = f"{why} (server exited with code {self.process.returncode})"
        self._act(self._protocol.connection_lost(why))

    def _act(self, events: list[ClientEvent]) -> None:
        for event in events:
            if isinstance(event, ProgressReceived):
                call = self._calls.get(event.call_id)
                # Its buffer takes the frame (Rule 3); a waiting consumer is woken.
                if (
                    call is not None
                    and call._buffer.put(event.frame, event.seq)
                    and call._getter is not None
                ):
                    call._wake()
            elif isinstance(event, ProgressRefused):
                call = self._calls.get(event.call_id)
                if call is not None:
                    call._buffer.refuse(event.size, event.limit)
            elif isinstance(event, CallEnded):
                call = self._calls.pop(event.call_id, None)
                if call is not None:
                    outcome = event.outcome
                    call._end(outcome if isinstance(outcome, ToolCallResult) else outcome.error())
            else:
                future = self._requests.get(event.request_id)
                if future is None or future.done():
                    continue
                if event.failure is not None:
                    future.set_exception(event.failure.error())
                else:
                    future.set_result(event.result)

    async def _read_loop(self) -> None:
        why = "the server closed its output"
        try:
            # Every line that has arrived at once: one step of the iterator per
            # read, not per line (each line is handled without waiting).
            batches = (
                self._reader.batches()
                if isinstance(self._reader, LineReader)
                else read_line_batches(self._reader, self._max_frame_bytes)
            )
            receive, act = self._protocol.receive_line, self._act
            async for lines in batches:
                for line in lines:
                    act(receive(line))
        except (ConnectionError, OSError) as exc:
            why = f"reading from the server failed: {exc}"
        except Exception as exc:  # a bug: told to every call, then by aclose
            why = f"the client's reader failed: {type(exc).__name__}: {exc}"
            raise
        finally:
            if self.process is not None and self.process.returncode is None:
                # Give a dying server a moment to be reaped, for a better message.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self.process.wait()
            self._lose(why)


def _check_leads_group(process: asyncio.subprocess.Process) -> None:
    """Refuse a running ``process`` that does not lead its own process group:
    stopping it signals that group."""
    try:
        pgid = os.getpgid(process.pid)
    except ProcessLookupError:  # reaped already: nothing left to stop
        return
    if process.returncode is None and pgid != process.pid:
        raise ValueError(
            f"server process {process.pid} is in process group {pgid}, not its own:"
            " start it with Client.spawn (its own session and group)"
        )
