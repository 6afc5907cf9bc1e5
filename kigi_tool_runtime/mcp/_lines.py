"""``serve_lines_mcp``: MCP served as JSON lines over a reader and a writer,
bridged to the SDK's server through its anyio memory streams. This module is
all anyio (the SDK's framework); the asyncio stdio plumbing that opens the
process's own stdin and stdout is ``_transports``'s.

Invariants:

Rule 1. One JSON-RPC message per line. A line that is not JSON (or is
        nested too deeply to parse) gets a ``-32700`` error, one that is JSON but
        not a JSON-RPC message (or nested deeper than the SDK reads, or a
        request whose ``id`` is ``null``) ``-32600``
        (its ``id`` echoed when it can be read, else ``null``), a line longer
        than the line limit ``-32600`` without ever being held whole; the
        server keeps serving. (The SDK's own stdio transport drops such lines
        unanswered.) A malformed *response* is dropped: nobody waits for it.
Rule 2. Messages are written in the order the server hands them over,
        batched into as few writes as the pipe allows, each batch drained
        before the next (the writer loop the stdio server runs too,
        ``_call/_writer``'s ``LineOutput``); a write to a closed output stops serving, which
        cancels every call (their tools stopped) before returning.
Rule 3. End of input first lets the requests still in flight that are not
        calls (a ``ping``, a ``tools/list`` sent just before the end) be
        answered (``_inflight``), then cancels every call in flight and returns
        once their tools have stopped and what is left is written: while the
        output moves, for at most ``FINAL_FLUSH_S`` from the end of input in
        all: the final flush the kigi server makes (``_call/_writer`` Rule 3),
        which gives up once a pending write has let no byte out for
        ``WRITER_STALL_S``.
Rule 4. A response that follows notifications of its call is written
        only once the host has read them (``_hold``), bounded by
        ``RESPONSE_HOLD_S``, so a client that defers notifications but not
        responses (the official TypeScript SDK) never finds its call's
        progress handler gone. Each call's response is held on its own: what
        comes behind it is written meanwhile (the one exception to Rule 2's
        order), so calls that end together wait for one read of the host.
Rule 5. A request that reuses the id of a request still open (``_inflight``)
        is refused with ``-32600``, its id echoed, as over HTTP (``_exchange``
        Rule 1), and never reaches the server; the first request runs on.
Rule 6. A stop ends serving as a cancellation (and an end of Rules 2 or 3
        as a return), even while requests are on their way into the SDK's
        server: the SDK's relay of its input (``mcp.server.runner``, 2.x) and
        the read loop here can find the server's streams already closed by
        that same stop, and those broken-stream errors are the stop's, not a
        failure. Any other error stays an error.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
from mcp.shared.dispatcher import as_request_id
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from kigi_tool_protocol._limits import MAX_FRAME_BYTES_CEILING

from .._call._serving import FINAL_FLUSH_S
from .._call._writer import LineOutput
from .._lines import read_lines
from .._wire._split import OversizedLine
from ._exchange import Refusal, RequestHead, read_head, reused_id_refusal
from ._hold import ResponseHold
from ._inflight import InFlight, correlated
from ._server import McpToolServer
from ._unread import buffered, unread_probe

if TYPE_CHECKING:
    from asyncio import StreamReader

__all__ = ()

#: Messages that may wait for the writer. A sender gets on as soon as its
#: message is queued (order is kept: the queue is first in, first out, and a
#: call's response is queued after its last notification), so the writer can
#: gather a burst into one write; past this a sender waits, and a host that
#: stops reading is noticed as a stalled send. 64 progress notifications are
#: about 2 MiB.
WRITE_QUEUE: Final = 64

#: Bytes of encoded messages gathered into one write (Rule 2): a pipe buffer's
#: worth several times over, so a flood costs few system calls, while one drain
#: never waits on more than this.
WRITE_BATCH_BYTES: Final = 256 * 1024


def classify_line(line: bytes | OversizedLine) -> JSONRPCMessage | JSONRPCError | None:
    """What one input line is (Rule 1): a message to serve, an error to answer
    with, or ``None`` (a blank line, or a malformed response)."""
    if isinstance(line, OversizedLine):
        return JSONRPCError(
            jsonrpc="2.0",
            id=None,
            error=ErrorData(
                code=INVALID_REQUEST,
                message=f"Invalid request: a line of {line.size} bytes exceeds the limit of"
                f" {line.limit} bytes; it was discarded unread",
            ),
        )
    if not line.strip():
        return None
    too_deep = False
    try:
        message: JSONRPCMessage = jsonrpc_message_adapter.validate_json(line, by_name=False)
        if isinstance(message, JSONRPCNotification):
            # The SDK reads a request with "id": null as a notification and
            # drops it; answer it instead (``_exchange`` Rule 2).
            refusal = read_head(line)
            if isinstance(refusal, Refusal):
                return JSONRPCError.model_validate_json(refusal.body)
        return message
    except ValidationError as exc:
        too_deep = any("recursion limit" in error["msg"] for error in exc.errors())
    try:
        value = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return JSONRPCError(
            jsonrpc="2.0",
            id=None,
            error=ErrorData(code=PARSE_ERROR, message=f"Parse error: {detail}"),
        )
    request_id = None
    if isinstance(value, dict):
        if ("result" in value or "error" in value) and "method" not in value:
            return None
        request_id = as_request_id(value.get("id"))
    message_text = (
        'Invalid request: not a JSON-RPC 2.0 message (a request needs "jsonrpc":'
        ' "2.0", an integer or string "id", a string "method" and object "params")'
    )
    if too_deep:
        message_text = "Invalid request: the message is nested too deeply to be read"
    return JSONRPCError(
        jsonrpc="2.0", id=request_id, error=ErrorData(code=INVALID_REQUEST, message=message_text)
    )


_encoder: Final = msgspec.json.Encoder()


def _encode(message: SessionMessage) -> bytes:
    """One message as a JSON line. A notification (nearly every line of a
    stream) is plain data already, so msgspec writes it, in the SDK's key order;
    anything else goes through the SDK's own model."""
    inner = message.message
    if isinstance(inner, JSONRPCNotification) and inner.params is not None:
        return (
            _encoder.encode(
                {"jsonrpc": inner.jsonrpc, "method": inner.method, "params": inner.params}
            )
            + b"\n"
        )
    return inner.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


async def serve_lines_mcp(
    server: McpToolServer,
    reader: StreamReader,
    sink: Any,
    *,
    max_line_bytes: int = MAX_FRAME_BYTES_CEILING,
    hold_responses: bool = True,
) -> None:
    """Serve MCP as JSON lines read from ``reader`` and written to ``sink`` (a
    writer with ``write`` and ``drain``) until end of input (Rule 3) or until
    the output breaks (Rule 2). ``hold_responses=False`` turns Rule 4 off (to
    measure what it costs)."""
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](WRITE_QUEUE)
    replies = write_send.clone()
    sdk_server = server.server

    writer_done = anyio.Event()
    output = LineOutput(sink, anyio.current_time)

    async def wait_for_writer(seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await writer_done.wait()

    inflight = InFlight()
    refused: set[int] = set()  # the reused-id refusals on their way (Rule 5)
    answered = anyio.Event()
    end_of_input: list[float] = []  # when input ended (Rule 3's deadline starts)

    async def read_loop() -> None:
        nonlocal answered
        async with read_send, replies:
            async for line in read_lines(reader, max_line_bytes):
                item = classify_line(line)
                if isinstance(item, JSONRPCError):
                    await replies.send(SessionMessage(item))
                elif item is not None:
                    refusal = _forwarded(inflight, item)
                    if refusal is not None:
                        # Rule 5: answered here; it closes nothing.
                        message = SessionMessage(refusal)
                        refused.add(id(message))
                        await replies.send(message)
                    else:
                        await read_send.send(SessionMessage(item))
            # Rule 3: what is in flight and can be answered is, before the
            # server sees the end (which cancels the rest).
            end_of_input.append(anyio.current_time())
            with anyio.move_on_after(FINAL_FLUSH_S):
                while inflight.awaited and not writer_done.is_set():
                    answered = anyio.Event()
                    await answered.wait()

    def take(message: SessionMessage) -> bytes:
        """``message`` encoded, noted as written (Rules 3, 4)."""
        inner = message.message
        line = _encode(message)
        hold.wrote(len(line), call=_call_of(message), is_notification=_is_notification(message))
        if id(message) in refused:
            refused.discard(id(message))
        elif isinstance(inner, JSONRPCResponse | JSONRPCError) and inner.id is not None:
            inflight.answered(inner.id)
            answered.set()
        return line

    probe = unread_probe(sink) if hold_responses else None
    hold: ResponseHold[SessionMessage] = ResponseHold(enabled=probe is not None)
    closed = False  # the server handed over its last message

    def unread(batched: int) -> int | None:
        """Bytes written that the host has not read, ``batched`` of them not
        yet handed to the sink (``None``: the probe failed)."""
        left = probe() if probe is not None else None
        return None if left is None else batched + (buffered(sink) or 0) + left

    def released(batched: int) -> bytes:
        """The held responses that may go now, encoded (Rule 4)."""
        going = hold.release(unread(batched), anyio.current_time())
        return b"".join(take(message) for message in going)

    def offered(message: SessionMessage) -> bool:
        """Whether ``message`` is a response that is held (Rule 4); the
        look that follows releases it at once when the host has read its
        call's notifications by then."""
        call = _call_of(message)
        if call is None or not _is_response(message):
            return False
        return hold.hold(message, call, anyio.current_time())

    async def next_message() -> SessionMessage | None:
        """The next message to write, or ``None`` when a look at the held
        responses is due first or the server is done (``closed``)."""
        nonlocal closed
        try:
            if not hold.holding:
                return await write_recv.receive()
            with contextlib.suppress(anyio.WouldBlock):
                return write_recv.receive_nowait()
            delay = hold.next_look(anyio.current_time())
            if delay <= 0:
                await anyio.sleep(0)
                return None
            with anyio.move_on_after(delay):
                return await write_recv.receive()
            return None
        except anyio.EndOfStream:
            closed = True
            return None

    released_last = False  # the batch just written was released responses

    async def gather() -> bytes | bytearray | None:
        """The next batch for the shared writer loop (``LineOutput.run``): the
        held responses that may go now, else the messages waiting, up to
        :data:`WRITE_BATCH_BYTES`; ``None`` once the server is done and nothing
        is held."""
        nonlocal closed, released_last
        while True:
            if not released_last and hold.holding and (ready := released(0)):
                released_last = True
                return ready
            released_last = False
            if closed:
                if not hold.holding:
                    return None
                await anyio.sleep(hold.next_look(anyio.current_time()))
                continue
            pending = await next_message()
            batch = bytearray()
            while pending is not None:
                if not offered(pending):
                    batch += take(pending)
                if hold.holding:
                    batch += released(len(batch))
                pending = None
                if len(batch) >= WRITE_BATCH_BYTES:
                    break
                try:
                    pending = write_recv.receive_nowait()
                except anyio.WouldBlock:
                    break
                except anyio.EndOfStream:
                    closed = True
                    break
            if batch:
                return batch

    ended_here = False  # serving ended by Rules 2 or 3, not stopped from outside

    def end_here(scope: anyio.CancelScope) -> None:
        nonlocal ended_here
        ended_here = True
        scope.cancel()

    async def write_loop(scope: anyio.CancelScope) -> None:
        try:
            async with write_recv:
                if not await output.run(gather):
                    end_here(scope)  # Rule 2: nobody reads; stop serving (calls are cancelled)
        finally:
            writer_done.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_loop, tg.cancel_scope)
            tg.start_soon(read_loop)
            await sdk_server.run(read_recv, write_send, sdk_server.create_initialization_options())
            # Rule 3: the last replies are written while the output moves, for
            # at most FINAL_FLUSH_S from the end of input; a host that stopped
            # reading cannot keep us (the final flush of ``_call/_writer``).
            started = end_of_input[0] if end_of_input else anyio.current_time()
            await output.final_flush(started, writer_done.is_set, wait_for_writer)
            end_here(tg.cancel_scope)
    except BaseExceptionGroup as group:
        _, rest = group.split((anyio.BrokenResourceError, anyio.get_cancelled_exc_class()))
        if rest is not None:
            raise
        # Rule 6: only streams the stop itself closed. Serving ended here
        # (Rules 2, 3), or else it was stopped from outside.
        if not ended_here:
            raise anyio.get_cancelled_exc_class() from None


def _forwarded(inflight: InFlight, message: JSONRPCMessage) -> JSONRPCError | None:
    """Note a message on its way to the server (Rule 3), or the refusal to
    answer it with instead, when it reuses the id of an open request (Rule 5)."""
    if isinstance(message, JSONRPCRequest):
        if not inflight.forwarded(message.id, message.method):
            head = RequestHead(str(message.id), message.id, message.method)
            return JSONRPCError.model_validate_json(reused_id_refusal(head).body)
    elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
        params = message.params or {}
        request_id = as_request_id(params.get("requestId"))
        if request_id is not None:
            inflight.cancelled(request_id)
    return None


def _call_of(message: SessionMessage) -> tuple[str, object] | None:
    """The request a message belongs to (a response's id, a notification's
    related request), as ids correlate (``_inflight``), or ``None``."""
    inner = message.message
    if isinstance(inner, JSONRPCResponse | JSONRPCError):
        request_id = inner.id
    else:
        request_id = getattr(message.metadata, "related_request_id", None)
    if request_id is None:
        return None
    key = correlated(request_id)
    return (type(key).__name__, key)


def _is_response(message: SessionMessage) -> bool:
    return isinstance(message.message, JSONRPCResponse | JSONRPCError)


def _is_notification(message: SessionMessage) -> bool:
    return isinstance(message.message, JSONRPCNotification)
