"""``Worker``: run kigi tools for calls taken from a JetStream work queue.

Invariants:

Rule 1. Workers compete for each tool: every worker serving a tool pulls
        from that tool's one durable consumer (explicit acks; ``_protocol``
        Rule 8), and no other worker does, so a call goes only to a worker
        that has its tool. While it has a free slot a worker has a pull
        waiting on every one of its tools at once (however many more tools
        than slots it has, a call of any of them is taken as it comes); a
        call that arrives when the slots have filled meanwhile is given back
        at once (``nak``: the queue hands it to another worker, or to this one
        once a slot frees), so at most ``max_in_flight`` calls run on one
        worker. It answers on each of its tools' ``serves`` subjects while it
        runs.
Rule 2. A call is started at most once. Before running it, the worker writes
        the call's claim to the claims stream, accepted only while the call
        has none there (``_protocol`` Rule 6: the frames stream's limits
        never discard it), then its copy among the call's frames (also once
        only, so a claim written there alone stops it too). A call message
        delivered again after its worker died before claiming it is simply
        run; one delivered again after it was claimed (its worker died
        mid-call) is not run again: it ends with a ``connection_lost`` error
        that says so, unless an end is already there; one whose call has a
        done record (its worker died between the end and the ack) is acked.
Rule 3. While a call runs, its worker tells the queue it is still working
        (``in_progress``) and publishes a heartbeat, every ``heartbeat``
        seconds, saying how long the call has run and been silent (so a silent
        call is seen alive at that interval, never longer). A worker that stops
        doing both is presumed dead: callers end the call after their lease,
        and the queue redelivers it after its ack wait (Rule 2).
Rule 4. Frames are the stdio wire's bytes: each progress item becomes the
        ``tool_call_progress`` line ``serve`` would write (``seq`` 0, 1, 2, ...).
        The lines queued while the previous message was unacknowledged go
        out as one message (a batch of whole lines) with ``Nats-Msg-Id``
        ``<call>:<seq of its first line>``, and each message is acknowledged
        before the next is sent, so order is kept, a retry is stored once,
        and a slow or absent server slows the tool (which keeps its own
        bounded tail). The end is the
        JSON-RPC response line; it is written only if the call has none yet,
        then the call's done record (``_protocol`` Rule 6), and the call
        message is acked after both.
Rule 5. A cancel message for a running call cancels it (it ends ``cancelled``);
        one written before the worker claimed the call ends it at once.
        Stopping the worker cancels its calls, which end with the server's
        cancel message, and acks them. :meth:`Worker.run` returns at most
        ``stop_bound`` seconds (:data:`STOP_BOUND_S` by default) after
        :meth:`Worker.stop`, however slowly the server takes what is published:
        the ends still being written then are given up (counted in
        ``WorkerStats.ends_unwritten``; their calls are left to the callers'
        leases and to Rule 2 on redelivery).
Rule 6. Nothing is published that the server would refuse for its size: a
        progress frame or a result larger than the server's ``max_payload``
        ends the call with a ``frame_too_large`` error saying both sizes.
Rule 7. A queue message that is not a call it can decode is never delivered
        again; when it names a call id anyway (``_protocol`` Rule 7) that call
        ends with an ``invalid_params`` error saying why, so no caller waits
        for it.
Rule 8. Setting up (the JetStream streams, the tools' consumers) is retried for
        :data:`SETUP_RETRY_S` seconds while the server answers with a
        transient error (away, starting, another worker creating the same
        stream or consumer at the same moment); past that the error is raised.
Rule 9. Every task of a worker (its heartbeat, one pull per tool, one task per
        call) lives in one scope that :meth:`Worker.run` owns: none outlives
        ``run``, and none fails unheard. The server's errors are handled where
        they happen (retried, or the call left to redelivery); any other
        failure of a task stops the worker at once, as :meth:`Worker.stop`
        does (its calls end and are acked as Rule 5 says), and is raised from
        ``run`` in an exception group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, Header

from kigi_tool_protocol import (
    DecodeError,
    PartialResultPayload,
    ToolCallProgressFrame,
    encode_progress_line,
)
from kigi_tool_protocol._tool_error import ConnectionLostWire, InvalidParamsWire

from .._call._feed import QueueFeed, produce
from .._call._frame_check import encoded_body
from .._call._outcome import CallEnd
from .._call._queue import CallQueue, QueuePolicy, StallWatch, Taken
from .._call._serving import FINAL_FLUSH_S, SERVER_CANCEL_MESSAGE, WRITER_STALL_S
from .._otel import TRACEPARENT, carrier_of
from .._scope import TaskScope
from .._tools._errors import ToolError
from .._tools._runner import STOP_WAIT_S, run_tool
from .._tools._tool import Tool, ToolContext, ToolResult
from .._wire._rpc_lines import end_line
from .._wire._rpc_lines import wire_error_line as _wire_error_line
from ._jetstream import (
    RETRYABLE,
    WRONG_LAST_SEQUENCE,
    JetStreamLimits,
    ensure_jetstream,
    publish_retrying,
)
from ._protocol import (
    DEFAULT_PREFIX,
    FRAMES_HEADER,
    TOTALS_HEADER,
    Claim,
    Done,
    Heartbeat,
    Subjects,
    call_id_of,
    check_tool_id,
    decide_start,
    decode_claim,
    decode_done,
    decode_submit,
    encode_claim,
    encode_done,
    encode_heartbeat,
    request_digest,
    route,
)

__all__ = ("Worker",)

#: Seconds :meth:`Worker.run` may take to return after :meth:`Worker.stop`
#: (Rule 5): its tools' stop wait, then the final flush's bound for writing
#: their ends (the bounds every server keeps, ``_call/_serving``).
STOP_BOUND_S: Final = STOP_WAIT_S + FINAL_FLUSH_S

#: Calls one worker runs at once by default: a few, so one host's commands do
#: not starve each other; raise it on hosts with more cores.
DEFAULT_MAX_IN_FLIGHT: Final = 4

#: Seconds between a running call's heartbeats (and its ``in_progress`` to the
#: queue). Callers allow several missed ones (their lease) before giving up.
HEARTBEAT_S: Final = 1.0

#: Seconds the queue waits for a taken call's ack (or ``in_progress``) before it
#: redelivers it to another worker. Many heartbeats long, so a busy worker is
#: not taken for dead; a dead one's call moves on within it.
ACK_WAIT_S: Final = 30.0

#: Most bytes of progress lines one message carries. The lines queued while the
#: last message was on its way go out together (the stdio wire's bytes, one
#: line after another), so a fast tool costs one round trip per batch, not per
#: frame; well under the server's default 1 MiB message limit.
BATCH_BYTES: Final = 256 * 1024

#: Encoded progress one call may have queued for its publisher. Past it the
#: tool waits (the shell tool keeps reading its child into its bounded tail and
#: reports what it skipped as a gap), so a slow server costs bounded memory:
#: this, plus the batch on its way (the call's queue's ``QueuePolicy.wait``).
CALL_QUEUE_BYTES: Final = 1024 * 1024

#: Seconds a worker retries setting up its JetStream streams and consumer through
#: transient errors (Rule 8) before :meth:`Worker.run` raises.
SETUP_RETRY_S: Final = 10.0

#: Seconds one pull waits for calls when the queue is empty.
FETCH_WAIT_S: Final = 1.0


_error_decoder: Final = msgspec.json.Decoder(dict[str, Any])


def _error_code(line: bytes) -> str | None:
    """The error code of an end line (``None`` for a result, or a line that
    does not say): what the done record tells a follower that lost the end."""
    try:
        response = _error_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    error = response.get("error")
    if not isinstance(error, dict):
        return None
    data = error.get("data")
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) else "error"


class WorkerStats(NamedTuple):
    """Counters of a :class:`Worker`: calls it ran, calls in flight, frames
    published, calls it refused to run again (Rule 2), queue messages that were
    not calls, the most calls it ever had in flight at once (Rule 1), and the
    calls whose end was given up when the worker stopped (Rule 5)."""

    calls_run: int
    calls_in_flight: int
    frames_published: int
    calls_not_rerun: int
    messages_rejected: int
    peak_in_flight: int
    ends_unwritten: int = 0


# Bytes of a message's limit kept for its headers (message id, frame counts,
# totals) when a body is checked against the server's max_payload.
_HEADER_ROOM: Final = 4096


async def _publish_progress(
    feed: QueueFeed[bytes, Any], js: Any, subject: str, call_id: str
) -> None:
    """Publish one call's progress lines from ``feed`` until its reply (Rule 4):
    what has queued up goes out as one message (whole lines, up to
    :data:`BATCH_BYTES`) with ``Nats-Msg-Id`` ``<call>:<seq of its first
    line>``, and each is acknowledged before the next is sent.

    Raises:
        nats.errors.Error, TimeoutError, OSError: a message was not stored; the
            queue is given up first, so the tool never waits on it again.
    """
    held: Taken[bytes] | None = None  # taken, but past the last batch's bytes
    while True:
        first = held if held is not None else await feed.get()
        held = None
        if not isinstance(first, Taken):
            return  # the reply: every line is out
        # The queue never drops (it waits), so a line's seq at take is the one
        # it was encoded with (the frames counted as they were queued).
        assert first.dropped_count is None, "the worker's call queue never drops"
        batch = [first.item]
        size = len(first.item)
        while (more := feed.take()) is not None:
            if size + len(more.item) > BATCH_BYTES:
                held = more
                break
            batch.append(more.item)
            size += len(more.item)
        try:
            await publish_retrying(
                js, subject, b"".join(batch), {Header.MSG_ID: f"{call_id}:{first.seq}"}
            )
        except (nats.errors.Error, TimeoutError, OSError):
            feed.give_up()
            raise


def _trace_of(msg: Msg, params: Any) -> dict[str, str] | None:
    """The trace context a call came with: its message's ``traceparent`` and
    ``tracestate`` headers, else its params' ``trace_context``."""
    found = carrier_of(msg.headers)
    if not found and params.trace_context is not None:
        found = {TRACEPARENT: params.trace_context}
    return found or None


@dataclass
class _Running:
    ctx: ToolContext
    msg: Msg
    claim: Claim
    # The call's queue once it runs: its frames are numbered there (and only there).
    queue: CallQueue[bytes, ToolResult | ToolError] | None = None
    totals: dict[str, tuple[int, int]] = field(default_factory=dict)
    started: float = 0.0  # loop time the call started
    last_output: float | None = None  # loop time of its last frame
    # The trace context the call came with (its span's parent), if any.
    trace: dict[str, str] | None = None

    @property
    def frames(self) -> int:
        """Frames the call has queued so far (its queue never drops)."""
        return 0 if self.queue is None else self.queue.next_seq


class Worker:
    """Run ``tools`` for calls from the JetStream work queue under ``prefix``.

    Make it with a connected ``nats`` client; :meth:`run` serves until
    :meth:`stop`. ``max_in_flight`` bounds the calls it runs at once (Rule 1),
    ``heartbeat`` and ``ack_wait`` are Rule 3's intervals (the queue's ack
    wait is the one of the worker that created the shared consumer); the
    JetStream streams are created if missing, and brought to ``limits`` when
    given.

    Raises:
        ValueError: two tools share an id, a tool id cannot name a NATS
            consumer (``_protocol.check_tool_id``), a bound is below 1, or
            ``heartbeat`` is not well below ``ack_wait``.
    """

    def __init__(
        self,
        connection: NatsConnection,
        tools: Iterable[Tool[Any]],
        *,
        prefix: str = DEFAULT_PREFIX,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        heartbeat: float = HEARTBEAT_S,
        ack_wait: float = ACK_WAIT_S,
        limits: JetStreamLimits | None = None,
        worker_id: str | None = None,
        stop_bound: float = STOP_BOUND_S,
    ) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            check_tool_id(tool.id)
            if tool.id in self._tools:
                raise ValueError(f"two tools share the id {tool.id!r}")
            self._tools[tool.id] = tool
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        if not 0 < heartbeat * 3 <= ack_wait:
            raise ValueError(
                f"heartbeat ({heartbeat} s) must be positive and at most a third of"
                f" ack_wait ({ack_wait} s)"
            )
        self._nc = connection
        self._js = connection.jetstream()
        self.subjects = Subjects(prefix)
        self._max_in_flight = max_in_flight
        self._heartbeat = heartbeat
        self._ack_wait = ack_wait
        self._limits = limits
        if not stop_bound > 0:
            raise ValueError(f"stop_bound must be positive, got {stop_bound}")
        self._stop_bound = stop_bound
        self._stopped_at: float | None = None
        self._unwritten = 0
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        self._running: dict[str, _Running] = {}
        # The calls running (their tasks are the scope's: Rule 9).
        self._tasks: set[asyncio.Task[None]] = set()
        self._scope: TaskScope | None = None  # while run() runs
        self._stopping = asyncio.Event()
        # A slot is taken when a call arrives and held until its task ends;
        # `_freed` wakes the pulls waiting for one (Rule 1).
        self._free_slots = max_in_flight
        self._freed = asyncio.Event()
        self._calls_run = 0
        self._frames = 0
        self._not_rerun = 0
        self._rejected = 0
        self._peak = 0

    def statistics(self) -> WorkerStats:
        """The worker's counters (see :class:`WorkerStats`)."""
        return WorkerStats(
            self._calls_run,
            len(self._tasks),
            self._frames,
            self._not_rerun,
            self._rejected,
            self._peak,
            self._unwritten,
        )

    def stop(self) -> None:
        """Stop taking calls and cancel those running; :meth:`run` returns once
        their ends are published, or ``stop_bound`` seconds from now (Rule 5)."""
        if self._stopped_at is None:
            self._stopped_at = asyncio.get_running_loop().time()
        self._stopping.set()
        self._freed.set()
        for running in self._running.values():
            running.ctx.cancel(SERVER_CANCEL_MESSAGE)  # Rule 5: said so the first time

    async def run(self) -> WorkerStats:
        """Serve calls until :meth:`stop`. Returns the counters.

        Raises:
            nats.js.errors.APIError: the JetStream streams or the consumer
                cannot be set up.
            ExceptionGroup: a task of the worker failed (its heartbeat, a pull
                or a call); the worker stopped first (Rule 9).
        """
        pulls = await self._set_up()
        nc = self._nc
        listening = [await nc.subscribe(self.subjects.cancels, cb=self._on_cancel)]
        for tool_id in self._tools:
            listening.append(
                await nc.subscribe(
                    self.subjects.serves(tool_id), queue="workers", cb=self._on_serves
                )
            )
        try:
            # Rule 9: the heartbeat, the pulls and the calls in one scope,
            # whose end raises their failures. Not a TaskGroup: a failure must
            # stop the worker as stop() does (the calls end and are acked,
            # Rule 5), not cancel every call where it stands.
            async with TaskScope() as tasks:
                self._scope = tasks
                self._watch(tasks.start(self._beat_loop(), name="kigi worker heartbeat"))
                pullers = [
                    self._watch(tasks.start(self._pull_loop(pull), name=f"kigi worker pull {t}"))
                    for t, pull in pulls.items()
                ]
                try:
                    await self._stopping.wait()
                finally:
                    self.stop()
                    # A pull under way ends within its wait; what it brings is given back.
                    _, late = await asyncio.wait(pullers, timeout=FETCH_WAIT_S + 1.0)
                    for puller in late:
                        puller.cancel()
                    if late:
                        await asyncio.wait(late)
                    await self._finish_calls()
                    # The heartbeat is cancelled, and awaited, as the scope ends.
        finally:
            self._scope = None
            for sub in (*listening, *pulls.values()):
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        return self.statistics()

    def _watch(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        """Stop the worker at once when ``task`` fails (Rule 9); the scope
        raises the failure from :meth:`run`."""

        def failed(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                self.stop()

        task.add_done_callback(failed)
        return task

    async def _pull_loop(self, pull: Any) -> None:
        """Take one tool's calls, one at a time, while a slot is free (Rule 1)."""
        while not self._stopping.is_set():
            while self._free_slots == 0 and not self._stopping.is_set():
                self._freed.clear()
                await self._freed.wait()
            if self._stopping.is_set():
                return
            try:
                msgs = await pull.fetch(1, timeout=FETCH_WAIT_S)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except (nats.errors.Error, OSError):
                # The server is away (restarting): the durable consumer
                # outlives it; pull again once it is back.
                await asyncio.sleep(0.2)
                continue
            for msg in msgs:
                if self._free_slots == 0 or self._stopping.is_set():
                    # Another tool's call took the last slot meanwhile.
                    with contextlib.suppress(nats.errors.Error):
                        await msg.nak()
                    continue
                self._free_slots -= 1
                self._start(msg)  # the slot is the call's until it ends

    async def _on_serves(self, msg: Msg) -> None:
        """Answer "who serves this tool?" (``_protocol`` Rule 8)."""
        with contextlib.suppress(nats.errors.Error):
            await msg.respond(json.dumps({"worker": self.worker_id}).encode())

    async def _finish_calls(self) -> None:
        """Wait for the calls' ends, until the stop bound (Rule 5)."""
        tasks = set(self._tasks)
        if not tasks:
            return
        assert self._stopped_at is not None
        left = self._stopped_at + self._stop_bound - asyncio.get_running_loop().time()
        _, late = await asyncio.wait(tasks, timeout=max(left, 0.0))
        for task in late:
            task.cancel()
        self._unwritten += len(late)
        if late:
            # Their failures, if any, the scope raises from run (Rule 9).
            await asyncio.wait(late)

    async def _set_up(self) -> dict[str, Any]:
        """The JetStream streams and a pull subscription to each tool's consumer
        (Rules 1, 8)."""
        subjects = self.subjects
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETUP_RETRY_S
        pulls: dict[str, Any] = {}
        while True:
            try:
                await ensure_jetstream(self._js, subjects, self._limits)
                for tool_id in self._tools:
                    if tool_id in pulls:
                        continue
                    config = ConsumerConfig(
                        durable_name=subjects.tool_consumer(tool_id),
                        ack_policy=AckPolicy.EXPLICIT,
                        ack_wait=self._ack_wait,
                        max_ack_pending=-1,
                        filter_subject=subjects.call_queue(tool_id),
                    )
                    pulls[tool_id] = await self._js.pull_subscribe(
                        subjects.call_queue(tool_id),
                        durable=subjects.tool_consumer(tool_id),
                        stream=subjects.calls_jetstream,
                        config=config,
                    )
                return pulls
            except (*RETRYABLE, nats.js.errors.BadRequestError, nats.errors.NoServersError):
                # BadRequest: another worker made the same stream or consumer
                # in between; the next try finds it.
                if loop.time() >= deadline or self._stopping.is_set():
                    raise
                await asyncio.sleep(0.2)

    def _start(self, msg: Msg) -> None:
        assert self._scope is not None, "calls are taken only while run() runs"
        task = self._watch(self._scope.start(self._handle(msg), name="kigi worker call"))
        self._tasks.add(task)
        self._peak = max(self._peak, len(self._tasks))

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            self._free_slots += 1
            self._freed.set()

        task.add_done_callback(done)

    # -- one call ------------------------------------------------------------------

    async def _handle(self, msg: Msg) -> None:
        try:
            params, session_id = decode_submit(msg.data)
        except DecodeError as exc:
            # Not a call it can run: never redeliver it; answer the call it
            # names, if it names one (Rule 7).
            self._rejected += 1
            call_id = call_id_of(msg.data)
            if call_id is not None and call_id not in self._running:
                detail = f"the call message cannot be read: {exc}"
                wire = InvalidParamsWire(message=detail)
                line = _wire_error_line(call_id, None, detail, wire)
                with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                    await self._finish(call_id, line, 0, {})
            with contextlib.suppress(nats.errors.Error):
                await msg.term()
            return
        call_id = params.tool_call_id
        if call_id in self._running:
            return  # a redelivery while it runs here: the running call's ack settles it
        delivery = msg.metadata.num_delivered or 1
        claim = Claim(worker=self.worker_id, delivery=delivery, request=request_digest(params))
        ctx = ToolContext(call_id)
        running = _Running(
            ctx,
            msg,
            claim,
            started=asyncio.get_running_loop().time(),
            trace=_trace_of(msg, params),
        )
        self._running[call_id] = running
        try:
            await self._serve(running, params, session_id, msg.subject)
        except (nats.errors.Error, TimeoutError, OSError):
            # The server stayed away past the publish retries: leave the call
            # message unacked; the queue redelivers it and Rule 2 decides.
            pass
        finally:
            del self._running[call_id]

    async def _serve(
        self, running: _Running, params: Any, session_id: str | None, queue_subject: str
    ) -> None:
        call_id = running.ctx.call_id
        tool_id = params.tool_id
        subjects = self.subjects
        claim = encode_claim(running.claim)
        # Rule 2: the claim that counts, then its copy among the frames (a
        # claim found there alone, from a worker that wrote only that, stops
        # the call as well).
        for subject in (subjects.claim(call_id), subjects.frame(call_id, "claim")):
            try:
                await publish_retrying(
                    self._js, subject, claim, {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}
                )
            except nats.js.errors.APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                done = await self._done_found(call_id)
                if (
                    decide_start(claim_written=False, done_found=done, cancel_stored=False)
                    == "ended"
                ):
                    # It ended; its worker stopped before acking it (Rule 2).
                    self._not_rerun += 1
                    with contextlib.suppress(nats.errors.Error):
                        await running.msg.ack_sync(timeout=5.0)
                    return
                await self._not_again(running, tool_id, session_id)
                return
        final: bytes
        refusal = route(subjects, queue_subject, tool_id, self._tools, self.worker_id)
        if refusal is not None:
            error = ToolError(refusal.code, refusal.message)
            final = self._error_line(call_id, session_id, error, tool_id)
            await self._end(running, final)
            return
        tool = self._tools[tool_id]
        cancelled = await self._cancelled_before(call_id)
        if decide_start(claim_written=True, done_found=False, cancel_stored=cancelled) != "run":
            error = ToolError("cancelled", f"call {call_id!r} was cancelled before it started")
            final = self._error_line(call_id, session_id, error, tool.id)
            await self._end(running, final)
            return
        self._calls_run += 1
        end = await self._run(tool, params, running, session_id)
        await self._end(running, self._final_line(end, session_id))

    def _final_line(self, end: CallEnd, session_id: str | None) -> bytes:
        """The end line of the call's one end (``_call/_outcome`` Rule 4); a
        result the server would refuse (Rule 6), or one that cannot be
        encoded, ends the call with the error saying so."""
        call_id = end.call_id
        try:
            final = end_line(call_id, session_id, end)
        except Exception as exc:  # encoding a result failed: still answer the call
            error = ToolError("internal_error", f"the worker failed to answer: {exc}")
            return end_line(call_id, session_id, end.failed(error))
        limit = self._payload_limit()
        if end.ok and len(final) > limit:
            error = ToolError.frame_too_large(
                len(final),
                limit,
                f"the call's result is {len(final)} bytes as JSON; the NATS server takes"
                f" messages of at most {limit} bytes (its max_payload, less room for headers)",
            )
            return end_line(call_id, session_id, end.failed(error))
        return final

    def _payload_limit(self) -> int:
        """The largest message body the server takes, less room for headers."""
        return max(self._nc.max_payload - _HEADER_ROOM, 1)

    async def _run(
        self, tool: Tool[Any], params: Any, running: _Running, session_id: str | None
    ) -> CallEnd:
        ctx = running.ctx
        call_id = ctx.call_id
        queue: CallQueue[bytes, ToolResult | ToolError] = CallQueue(
            QueuePolicy.wait(CALL_QUEUE_BYTES)
        )
        running.queue = queue
        # The policy never drops: the stall verdict only paces a waiting put.
        feed = QueueFeed(queue, StallWatch(WRITER_STALL_S))
        loop = asyncio.get_running_loop()

        def line_of(frame: ToolCallProgressFrame[Any]) -> tuple[bytes, int]:
            # The seq the queue takes it with (it never drops): the call's one
            # number of the frame, in its line and its message's id.
            line = encode_progress_line(
                call_id,
                frame.kind,
                encoded_body(frame),
                seq=queue.next_seq,
                session_id=session_id,
            )
            limit = self._payload_limit()
            if len(line) > limit:
                raise ToolError.frame_too_large(
                    len(line),
                    limit,
                    f"a progress frame of {len(line)} bytes exceeds the NATS"
                    f" server's max_payload ({limit} bytes, less room for headers)",
                )
            if isinstance(frame.body, PartialResultPayload):
                _, count = running.totals.get(frame.kind, (0, 0))
                running.totals[frame.kind] = (frame.body.total_bytes, count + 1)
            running.last_output = loop.time()
            self._frames += 1
            return line, len(line)

        terminal: ToolResult | ToolError
        try:
            # The publisher lives as long as the call: its failure stops the
            # tool (the group cancels produce) and is raised from here.
            async with asyncio.TaskGroup() as scope:
                subject = self.subjects.frame(call_id, "progress")
                scope.create_task(
                    _publish_progress(feed, self._js, subject, call_id),
                    name=f"kigi publisher {call_id}",
                )
                run = run_tool(
                    tool, bytes(params.arguments), ctx=ctx, timeout_ms=params.deadline_ms
                )
                terminal = await produce(run, feed, line_of, trace=running.trace)
                feed.finish(terminal)
        except* (nats.errors.Error, TimeoutError, OSError) as failed:
            raise failed.exceptions[0] from None
        # The call's one end (``_call/_outcome`` Rule 4).
        return CallEnd.of(call_id, tool.id, terminal, None, frames=queue.next_seq)

    async def _end(self, running: _Running, line: bytes) -> None:
        await self._finish(running.ctx.call_id, line, running.frames, running.totals)
        with contextlib.suppress(nats.errors.Error):
            await running.msg.ack_sync(timeout=5.0)

    async def _finish(
        self, call_id: str, line: bytes, frames: int, totals: dict[str, tuple[int, int]]
    ) -> None:
        """Write the call's end (unless it has one) and then its done record."""
        subjects = self.subjects
        headers = {
            Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0",
            FRAMES_HEADER: str(frames),
            TOTALS_HEADER: json.dumps(totals, separators=(",", ":")),
        }
        end_seq: int | None = None
        error: str | None = _error_code(line)
        try:
            ack = await publish_retrying(self._js, subjects.frame(call_id, "end"), line, headers)
            end_seq = ack.seq
        except nats.js.errors.APIError as exc:
            # Already ended: a caller's lease verdict got there first (Rule 2).
            if exc.err_code != WRONG_LAST_SEQUENCE:
                raise
            with contextlib.suppress(nats.js.errors.NotFoundError):
                there = await self._js.get_last_msg(
                    subjects.frames_jetstream, subjects.frame(call_id, "end")
                )
                end_seq = there.seq
                error = _error_code(there.data or b"")
        done = Done(
            worker=self.worker_id, frames=frames, totals=dict(totals), end_seq=end_seq, error=error
        )
        with contextlib.suppress(nats.js.errors.APIError):  # one is there already
            await publish_retrying(
                self._js,
                subjects.done(call_id),
                encode_done(done),
                {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
            )

    async def _not_again(self, running: _Running, tool_id: str, session_id: str | None) -> None:
        """Rule 2: the call was claimed before this delivery; do not run it again."""
        call_id = running.ctx.call_id
        js = self._js
        subjects = self.subjects
        earlier: Claim | None = None
        for jetstream, subject in (
            (subjects.claims_jetstream, subjects.claim(call_id)),
            (subjects.frames_jetstream, subjects.frame(call_id, "claim")),
        ):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                got = await js.get_last_msg(jetstream, subject)
                found = decode_claim(got.data or b"")
                if found is not None and found != running.claim:
                    earlier = found  # not the one this delivery just wrote
                    break
        frames = 0
        with contextlib.suppress(nats.js.errors.NotFoundError, msgspec.DecodeError, ValueError):
            last = await js.get_last_msg(
                subjects.frames_jetstream, subjects.frame(call_id, "progress")
            )
            frames = int(json.loads(last.data or b"{}").get("seq", -1)) + 1
        who = "another worker" if earlier is None else f"worker {earlier.worker!r}"
        message = (
            f"call {call_id!r} was started by {who}, which stopped before finishing it;"
            f" it was not run again (its output got to {frames} frame(s))"
        )
        self._not_rerun += 1
        wire = ConnectionLostWire(tool_id=tool_id or "unknown")
        line = _wire_error_line(call_id, session_id, message, wire)
        await self._end(running, line)

    async def _done_found(self, call_id: str) -> bool:
        """Whether the call has a done record (``_protocol`` Rule 6)."""
        subjects = self.subjects
        try:
            got = await self._js.get_last_msg(subjects.claims_jetstream, subjects.done(call_id))
        except nats.js.errors.NotFoundError:
            return False
        return decode_done(got.data or b"") is not None

    async def _cancelled_before(self, call_id: str) -> bool:
        subjects = self.subjects
        try:
            await self._js.get_last_msg(
                subjects.frames_jetstream, subjects.frame(call_id, "cancel")
            )
        except nats.js.errors.NotFoundError:
            return False
        return True

    @staticmethod
    def _error_line(call_id: str, session_id: str | None, error: ToolError, tool_id: str) -> bytes:
        """The end line of a call refused before it ran (its one end all the same)."""
        return end_line(call_id, session_id, CallEnd.of(call_id, tool_id, error, None, frames=0))

    # -- cancellation and heartbeats -------------------------------------------------

    async def _on_cancel(self, msg: Msg) -> None:
        parsed = self.subjects.parse(msg.subject)
        if parsed is None:
            return
        running = self._running.get(parsed[0])
        if running is not None:
            running.ctx.cancel()

    async def _beat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat)
            for call_id, running in list(self._running.items()):
                now = asyncio.get_running_loop().time()
                quiet = running.started if running.last_output is None else running.last_output
                beat = encode_heartbeat(
                    Heartbeat(
                        worker=self.worker_id,
                        frames=running.frames,
                        elapsed_s=round(now - running.started, 3),
                        silent_s=round(now - quiet, 3),
                    )
                )
                with contextlib.suppress(nats.errors.Error, OSError):
                    await running.msg.in_progress()
                    await self._nc.publish(self.subjects.heartbeat(call_id), beat)
