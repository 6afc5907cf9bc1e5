"""Callers and followers over JetStream: submit a call and iterate its progress
and result like the stdio :class:`~kigi_tool_runtime.Client`, or follow any
call's frames from the start or from a stream sequence.

Invariants:

Rule 1. A follower reads one call's frame subjects with an ordered consumer
        from a stream sequence (1: the start), and hands every message to a
        :class:`CallLedger`, which absorbs progress into the reassembler and
        reports what the frames JetStream stream's limits discarded (``_protocol``
        Rule 3). The
        consumer is recreated past the last sequence read after a reconnect,
        so a server restart costs no frame.
Rule 2. A follower never hangs on a dead worker. Once the call has started
        (a claim, a frame or a heartbeat seen), no heartbeat and no frame for
        ``lease`` seconds ends it: the follower first looks for an end it has
        not been delivered, then writes the call's end itself, a
        ``connection_lost`` error saying how far the output got, accepted only
        if the call has no end yet (so it is the one terminal every follower
        sees), and ends locally if even that does not come back.
Rule 2a. On opening, before a lease verdict, and whenever a lease passes with
        nothing of the call seen, a follower reads the call's records in the
        claims stream (``_protocol`` Rule 6): a done record means the call
        ended, so once what the frames stream still holds of the call has come,
        it takes the end message if that stream still has it and otherwise ends
        with the loss said (:meth:`CallLedger.end_gone`), never with a verdict
        that the worker died; a claim alone means the call started (its
        worker is silent: Rule 2); neither means the call has not started,
        and it waits. So a follower of a call whose frames were discarded,
        purged or deleted ends, at once or within a lease.
Rule 3. A call is ``(CallProgress | CallLoss)* (ToolCallResult |
        RemoteToolError)`` as with the stdio client, a :class:`CallLoss` where
        the ledger counted a loss no frame carries (``_protocol`` Rule 3);
        ``cancel()`` writes the call's cancel message, which reaches the
        worker running it (or stops it before it starts);
        ``timeout`` is sent as the deadline and enforced here too.
Rule 3a. A call goes to its tool's subject (``_protocol`` Rule 8). A caller
        first asks whether any worker serves the tool: while none does (the
        server's "no responders") it asks again, for at most
        ``serves_wait`` seconds (:data:`SERVES_WAIT_S`; a worker starting at the same moment is
        waited for); then the call is not submitted and ends with a
        ``tool_not_found`` end naming the tool. A submitted call of which
        nothing is seen for a lease is asked about again: when by then no
        worker serves its tool, the caller writes its cancel (so a worker
        that comes later does not run it) and its ``tool_not_found`` end.
        So a call no worker can run ends at once, or within a lease of its
        tool's last worker going away.
Rule 4. A follower that resumes after the call's end (at or past the sequence
        a follower that saw the end reports as its position) ends at once with
        the outcome that end carries, instead of waiting for frames that can
        never come.
Rule 5. A cancel a call writes in the background (its timeout, its handle
        closed) belongs to its :class:`NatsClient`: ``aclose`` waits for every
        one and raises the failure of any (other than the server's errors,
        which a background cancel ignores: the server may be away), so none
        outlives the client unheard; a closed client writes none.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Self

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, Header

from kigi_tool_protocol import ToolCallParams, ToolCallResult
from kigi_tool_protocol._tool_error import ConnectionLostWire

from .._call._caller import CallHandle, CallLoss, CallProgress, CallTerms, RemoteToolError
from .._closing import AsyncClosing
from .._consumer._reassembler import Reassembler
from .._otel import current_carrier
from .._tools._errors import ToolError
from .._wire._rpc_lines import wire_error_line as _wire_error_line
from ._jetstream import WRONG_LAST_SEQUENCE, JetStreamLimits, ensure_jetstream, publish_retrying
from ._protocol import (
    DEFAULT_PREFIX,
    CallLedger,
    Done,
    FollowPosition,
    Heartbeat,
    Subjects,
    check_call_id,
    check_tool_id,
    decide_unstarted,
    decode_done,
    decode_end,
    decode_heartbeat,
    encode_submit,
    request_digest,
    unserved_message,
)
from ._worker import HEARTBEAT_S

__all__ = ("NatsCall", "NatsClient")

#: Seconds without a heartbeat or a frame after which a started call's worker is
#: presumed dead (Rule 2): ten heartbeats, so a worker on a loaded host or a
#: server restart of a few seconds is not taken for a dead worker.
LEASE_S: Final = 10.0 * HEARTBEAT_S

#: Seconds a caller asks "who serves this tool?" before it ends a call that
#: no worker serves (Rule 3a): "no responders" comes back at once and is
#: asked again until then, so a worker starting beside the caller is waited
#: for; a worker too busy to answer (in 2 s) still counts as serving.
SERVES_WAIT_S: Final = 5.0

#: Seconds one question waits for a worker's answer.
_ANSWER_WAIT_S: Final = 2.0

#: Seconds between two questions while no worker serves a call's tool.
_SERVES_POLL_S: Final = 0.1

#: Seconds the ordered consumer may go without a server heartbeat before it is
#: recreated (after a server restart, a lost connection).
_IDLE_HEARTBEAT_S: Final = 1.0

#: Seconds one wait for the next frame lasts before the lease is checked.
_POLL_S: Final = 0.25

_RETRYABLE_READ: Final = (nats.errors.Error, OSError)

# Bytes of a message's limit kept for its headers when a call is checked
# against the server's max_payload.
_HEADER_ROOM: Final = 4096


# Failures of background cancels a client keeps for aclose to raise (Rule 5);
# past them it counts: one failure is a bug, a thousand say no more.
_KEPT_FAILURES: Final = 16


class Follower(AsyncClosing):
    """Follow one call's frames (Rule 1). Use as an async context manager and
    iterate it for :class:`CallProgress` items (and a :class:`CallLoss` where
    progress was lost); iteration ends with the call, whose
    outcome is then :attr:`outcome`.

    ``position`` resumes after another follower (its :attr:`position`);
    ``reassembler`` receives the records (give a fresh ``spawn()`` of the
    earlier follower's to fold only what is new). ``lease``: Rule 2;
    ``write_verdict``: whether this follower may write a lost call's end;
    ``request``: the digest of the call this follower's caller submitted, to
    refuse another call under the same id (``_protocol`` Rule 5);
    ``served``: asks whether any worker serves the call's tool (``True``,
    ``False`` when none does, ``None`` when not known), for Rule 3a.
    :attr:`worker` is the worker named by the call's claim, once seen;
    :attr:`ledger` the accounting (frames lost, ranges the frames
    JetStream stream discarded).

    Raises:
        ValueError: ``call_id`` is not a NATS subject token, or ``lease`` is
            not positive.
    """

    def __init__(
        self,
        connection: NatsConnection,
        call_id: str,
        *,
        tool_id: str = "",
        prefix: str = DEFAULT_PREFIX,
        position: FollowPosition | None = None,
        reassembler: Reassembler | None = None,
        lease: float = LEASE_S,
        write_verdict: bool = True,
        request: str | None = None,
        served: Callable[[], Awaitable[bool | None]] | None = None,
    ) -> None:
        check_call_id(call_id)
        if not lease > 0:
            raise ValueError(f"lease must be positive, got {lease}")
        self._nc = connection
        self._js = connection.jetstream()
        self.subjects = Subjects(prefix)
        self.call_id = call_id
        self.ledger = CallLedger(
            call_id, tool_id, position=position, reassembler=reassembler, request=request
        )
        self._lease = lease
        self._write_verdict = write_verdict
        self._items: deque[CallProgress | CallLoss] = deque()
        self._sub: Any = None
        self._beats: Any = None
        self._alive = 0.0
        self._started = False
        self._verdict_at: float | None = None
        self._done: Done | None = None
        self._served = served
        self.worker: str | None = None
        #: The newest heartbeat of the call's worker (``None`` before one): how
        #: long the call has run and been silent, even while it writes nothing.
        self.last_heartbeat: Heartbeat | None = None

    @property
    def reassembler(self) -> Reassembler:
        """The fold of everything this follower absorbed."""
        return self.ledger.reassembler

    @property
    def position(self) -> FollowPosition:
        """Where a follower resuming after this one starts."""
        return self.ledger.position

    @property
    def outcome(self) -> ToolCallResult | RemoteToolError | None:
        """The call's result or error, once it ended."""
        return self.ledger.outcome

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def open(self) -> None:
        """Subscribe to the call's frames and heartbeats.

        Raises:
            nats.js.errors.NotFoundError: the frames stream does not exist.
        """
        if self._sub is not None:
            return
        subjects = self.subjects
        self._alive = asyncio.get_running_loop().time()
        self._beats = await self._nc.subscribe(subjects.heartbeat(self.call_id), cb=self._on_beat)
        info = await self._js.stream_info(subjects.frames_jetstream)
        self.ledger.jetstream_starts_at(info.state.first_seq)
        with contextlib.suppress(*_RETRYABLE_READ):
            _, self._done = await self._records()  # Rule 2a
        await self._ended_before_start()
        await self._subscribe()

    async def _ended_before_start(self) -> None:
        """Rule 4: a resume past the call's end ends with that end's outcome."""
        start = self.ledger.position.jetstream_seq
        if start <= 1 or self.ledger.ended:
            return
        try:
            end = await self._js.get_last_msg(
                self.subjects.frames_jetstream, self.subjects.frame(self.call_id, "end")
            )
        except nats.js.errors.NotFoundError:
            return
        if end.seq is not None and end.seq < start:
            self.ledger.conclude(decode_end(end.data or b""))

    async def _subscribe(self) -> None:
        start = self.ledger.position.jetstream_seq
        self._sub = await self._js.subscribe(
            self.subjects.call_frames(self.call_id),
            stream=self.subjects.frames_jetstream,
            ordered_consumer=True,
            idle_heartbeat=_IDLE_HEARTBEAT_S,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            config=ConsumerConfig(opt_start_seq=start),
        )

    async def aclose(self) -> None:
        """Stop following (the call itself goes on)."""
        for sub in (self._sub, self._beats):
            if sub is not None:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        self._sub = self._beats = None

    async def _on_beat(self, msg: Msg) -> None:
        beat = decode_heartbeat(msg.data)
        if beat is not None:
            self.last_heartbeat = beat
        self._alive = asyncio.get_running_loop().time()
        self._started = True

    def __aiter__(self) -> AsyncIterator[CallProgress | CallLoss]:
        return self

    async def __anext__(self) -> CallProgress | CallLoss:
        item = await self.next_progress()
        if item is None:
            raise StopAsyncIteration
        return item

    async def next_progress(self, deadline: float | None = None) -> CallProgress | CallLoss | None:
        """The next progress item (a frame, or a loss the ledger counted), or
        ``None`` once the call has ended.

        Raises:
            TimeoutError: the loop time ``deadline`` passed first.
        """
        loop = asyncio.get_running_loop()
        while not self._items:
            if self.ledger.ended:
                return None
            if self._sub is None:
                await self.open()
            wait = _POLL_S
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
                if wait <= 0:
                    raise TimeoutError
            try:
                msg = await self._sub.next_msg(timeout=wait)
            except (TimeoutError, nats.errors.TimeoutError):
                await self._check_lease()
                continue
            except _RETRYABLE_READ:
                await asyncio.sleep(0.1)
                continue
            self._take(msg)
        return self._items.popleft()

    def _take(self, msg: Msg) -> None:
        parsed = self.subjects.parse(msg.subject)
        if parsed is None or parsed[0] != self.call_id:
            return
        self._alive = asyncio.get_running_loop().time()
        kind = parsed[1]
        if kind != "cancel":
            self._started = True
        event = self.ledger.feed(
            msg.metadata.sequence.stream, kind, msg.data, dict(msg.headers or {})
        )
        if event.claim is not None:
            self.worker = event.claim.worker
        self._items.extend(event.progress)

    async def _check_lease(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.ledger.ended:
            return
        idle = now - self._alive >= self._lease
        if self._done is None:
            if not idle:
                return
            if self._verdict_at is None:
                try:
                    claimed, self._done = await self._records()
                except _RETRYABLE_READ:
                    return  # the server is away: try again at the next poll
                if self._done is None and not self._started:
                    served = None
                    if not claimed and self._served is not None and self._write_verdict:
                        served = await self._served()
                    decision = decide_unstarted(
                        claimed=claimed, done=self._done is not None, served=served
                    )
                    if decision == "unserved":
                        with contextlib.suppress(*_RETRYABLE_READ, TimeoutError):
                            await self.end_unserved(withdraw=True)
                        self._alive = now  # its end is on its way
                        return
                    if decision == "wait":
                        self._alive = now  # not started yet: look again a lease later
                        return
                    self._started = True  # claimed, and its worker is silent
        if self._done is not None:
            with contextlib.suppress(*_RETRYABLE_READ):
                await self._ended_elsewhere(self._done, idle)
            return
        if self._verdict_at is not None:
            # The verdict was written (or refused for an end that exists) but
            # has not been delivered within another lease: end here (Rule 2).
            if now - self._verdict_at >= self._lease:
                self.ledger.conclude(self._lost_error(undelivered=True))
            return
        self._verdict_at = now
        subjects = self.subjects
        with contextlib.suppress(*_RETRYABLE_READ):
            info = await self._js.stream_info(subjects.frames_jetstream)
            self.ledger.jetstream_starts_at(info.state.first_seq)
        if not self._write_verdict:
            return
        error = self._lost_error(undelivered=False)
        line = _wire_error_line(self.call_id, None, error.message, error.wire)
        with contextlib.suppress(nats.js.errors.APIError, TimeoutError, *_RETRYABLE_READ):
            await publish_retrying(
                self._js,
                subjects.frame(self.call_id, "end"),
                line,
                {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
                retry_for=self._lease,
            )

    async def end_unserved(self, *, withdraw: bool) -> None:
        """End the call with ``tool_not_found``, as no worker serves its tool
        (Rule 3a): with ``withdraw`` (it was submitted) write its cancel first,
        so a worker that takes it later does not run it; then its end, written
        once (an end already there stands).

        Raises:
            TimeoutError: the server did not take them.
        """
        subjects = self.subjects
        tool_id = self.ledger.tool_id
        if withdraw:
            await publish_retrying(
                self._js,
                subjects.frame(self.call_id, "cancel"),
                b"{}",
                {Header.MSG_ID: f"{self.call_id}:cancel"},
                retry_for=self._lease,
            )
        message = unserved_message(tool_id, self.call_id, subjects.prefix)
        wire = ToolError("tool_not_found", message).with_tool_id(tool_id).to_wire()
        line = _wire_error_line(self.call_id, None, message, wire)
        with contextlib.suppress(nats.js.errors.APIError):  # ended already
            await publish_retrying(
                self._js,
                subjects.frame(self.call_id, "end"),
                line,
                {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
                retry_for=self._lease,
            )

    async def _records(self) -> tuple[bool, Done | None]:
        """Whether the call has a claim, and its done record, from the claims
        stream (Rule 2a)."""
        subjects = self.subjects
        claimed = False
        done: Done | None = None
        with contextlib.suppress(nats.js.errors.NotFoundError):
            got = await self._js.get_last_msg(
                subjects.claims_jetstream, subjects.done(self.call_id)
            )
            done = decode_done(got.data or b"")
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._js.get_last_msg(subjects.claims_jetstream, subjects.claim(self.call_id))
            claimed = True
        return claimed or done is not None, done

    async def _ended_elsewhere(self, done: Done, idle: bool) -> None:
        """Rule 2a: the call ended; take its end message, or say it is gone.
        Until a lease passed with nothing delivered (``idle``), what the frames
        stream still holds of the call past this follower's position is left to come
        in order."""
        subjects = self.subjects
        position = self.ledger.position.jetstream_seq
        try:
            end = await self._js.get_last_msg(
                subjects.frames_jetstream, subjects.frame(self.call_id, "end")
            )
        except nats.js.errors.NotFoundError:
            end = None
        if end is not None and end.seq is not None:
            if not idle and end.seq >= position:
                return  # it is on its way
            if end.seq >= position:
                event = self.ledger.feed(end.seq, "end", end.data or b"", dict(end.headers or {}))
                self._items.extend(event.progress)
            else:
                self.ledger.conclude(decode_end(end.data or b""))
            return
        if not idle and self.ledger.frames < done.frames:
            try:
                last = await self._js.get_last_msg(
                    subjects.frames_jetstream, subjects.frame(self.call_id, "progress")
                )
            except nats.js.errors.NotFoundError:
                last = None
            if last is not None and last.seq is not None and last.seq >= position:
                return  # frames still to come, then the loss of the end
        info = await self._js.stream_info(subjects.frames_jetstream)
        self.ledger.jetstream_starts_at(info.state.first_seq)
        if done.end_seq is not None and done.end_seq < info.state.first_seq:
            why = f"the JetStream stream's limits discarded it, at stream sequence {done.end_seq}"
        elif done.end_seq is not None:
            why = f"it was deleted or purged, from stream sequence {done.end_seq}"
        else:
            why = "deleted, purged or discarded"
        self._items.extend(self.ledger.end_gone(done, why).progress)

    def _lost_error(self, *, undelivered: bool) -> RemoteToolError:
        who = "its worker" if self.worker is None else f"worker {self.worker!r}"
        streams = self.reassembler.streams
        got = sum(state.text_bytes for state in streams.values())
        message = (
            f"{who} stopped during call {self.call_id!r} (no heartbeat for {self._lease:g} s);"
            f" the call was not run again; its output got to {self.ledger.frames} frame(s),"
            f" {got} byte(s) received"
        )
        if undelivered:
            message += "; the call's end message never arrived"
        return RemoteToolError(
            ConnectionLostWire(tool_id=self.ledger.tool_id or "unknown"), message
        )


class NatsCall(CallHandle):
    """One call submitted through JetStream. Iterate it (``async for``) for
    :class:`CallProgress` items (a :class:`CallLoss` where progress was lost)
    and, last, the ``ToolCallResult``; or ``await
    call.result()``. A failed call raises :class:`RemoteToolError`.

    ``cancel`` writes the call's cancel message and waits for the server to
    take it; ``give_up`` writes it in the background (a timeout, ``aclose``).

    Raises (while iterating):
        RemoteToolError: the call failed (the tool's error, ``cancelled``,
            ``timeout``, ``connection_lost`` when its worker died).
    """

    def __init__(
        self,
        follower: Follower,
        tool_id: str,
        timeout: float | None,
        *,
        cancel: Callable[[], Awaitable[None]],
        give_up: Callable[[], None],
    ) -> None:
        self.follower = follower
        self.tool_call_id = follower.call_id
        self.tool_id = tool_id
        self._cancel = cancel
        self._give_up_call = give_up
        self._terms = CallTerms(
            tool_id,
            self.tool_call_id,
            timeout,
            asyncio.get_running_loop().time(),
            "no end arrived in time",
        )
        self._finished = False

    def __repr__(self) -> str:
        return f"NatsCall(tool_id={self.tool_id!r}, tool_call_id={self.tool_call_id!r})"

    @property
    def reassembler(self) -> Reassembler:
        """Everything the call's frames said so far."""
        return self.follower.reassembler

    @property
    def outcome(self) -> ToolCallResult | RemoteToolError | None:
        """The result or error, once the call ended."""
        return self.follower.outcome

    @property
    def last_heartbeat(self) -> Heartbeat | None:
        """The newest heartbeat of the call's worker (``None`` before one): how
        long the call has run and been silent, even while it writes nothing."""
        return self.follower.last_heartbeat

    def __aiter__(self) -> AsyncIterator[CallProgress | CallLoss | ToolCallResult]:
        return self

    async def __anext__(self) -> CallProgress | CallLoss | ToolCallResult:
        if self._finished:
            raise StopAsyncIteration
        try:
            item = await self.follower.next_progress(self._terms.deadline)
        except TimeoutError:
            self._time_out(asyncio.get_running_loop().time())
            item = None
        if item is not None:
            return item
        self._finished = True
        await self.follower.aclose()
        outcome = self.follower.outcome
        assert outcome is not None
        if isinstance(outcome, RemoteToolError):
            raise outcome
        return outcome

    # -- what the handle's decisions do here (see CallHandle) ---------------------

    def _settle(self, outcome: ToolCallResult | RemoteToolError) -> bool:
        return self.follower.ledger.conclude(outcome)

    def _has_ended(self) -> bool:
        return self.follower.ledger.ended

    def _give_up(self) -> None:
        self._give_up_call()

    async def _ask_cancel(self) -> None:
        await self._cancel()

    async def _release(self) -> None:
        await self.follower.aclose()


class NatsClient(AsyncClosing):
    """Submit tool calls to the workers behind a NATS server, and follow calls.

    Make it with :meth:`connect` (a URL) or from a connected ``nats`` client;
    use it as an async context manager. ``lease``: see :class:`Follower`;
    ``limits``: when given, the JetStream streams are brought to them
    (otherwise existing ones keep theirs and missing ones get the defaults);
    ``serves_wait``: how long a call of a tool no worker serves waits for one
    before it ends ``tool_not_found`` (Rule 3a).

    Raises:
        ValueError: ``prefix`` is not a NATS subject token, or ``serves_wait``
            is negative.
    """

    def __init__(
        self,
        connection: NatsConnection,
        *,
        prefix: str = DEFAULT_PREFIX,
        lease: float = LEASE_S,
        limits: JetStreamLimits | None = None,
        session_id: str | None = None,
        owns_connection: bool = False,
        serves_wait: float = SERVES_WAIT_S,
    ) -> None:
        if not serves_wait >= 0:
            raise ValueError(f"serves_wait must be at least 0 seconds, got {serves_wait}")
        self._serves_wait = serves_wait
        self.subjects = Subjects(prefix)
        self.connection = connection
        self._js = connection.jetstream()
        self._lease = lease
        self._limits = limits
        self.session_id = session_id
        self._owns = owns_connection
        self._ready = False
        self._closed = False
        # The cancels being written in the background (Rule 5): the client's
        # own, awaited by aclose, which raises their failures.
        self._background: set[asyncio.Task[None]] = set()
        self._failed: list[BaseException] = []  # at most _KEPT_FAILURES
        self._more_failed = 0  # counted past them
        # The followers of submitted calls: an open one would hold the
        # connection's drain for its whole timeout.
        self._followers: weakref.WeakSet[Follower] = weakref.WeakSet()

    @classmethod
    async def connect(cls, url: str, **options: Any) -> NatsClient:
        """Connect to the NATS server at ``url``; ``options`` are the client's.

        Raises:
            OSError, nats.errors.NoServersError: the server cannot be reached.
        """
        from ._jetstream import connect

        connection = await connect(url)
        return cls(connection, owns_connection=True, **options)

    async def aclose(self) -> None:
        """Wait for cancels being written, stop following the calls it
        submitted (the calls themselves go on), and close the connection if it
        is ours.

        Raises:
            ExceptionGroup: a cancel written in the background failed with an
                error other than the server's (Rule 5).
        """
        self._closed = True
        while self._background:
            await asyncio.wait(set(self._background))
        for follower in list(self._followers):
            await follower.aclose()
        if self._owns and not self.connection.is_closed:
            await self.connection.drain()
        if self._failed:
            failed, self._failed = self._failed, []
            more, self._more_failed = self._more_failed, 0
            also = f" (and {more} more, not kept)" if more else ""
            raise BaseExceptionGroup(f"a cancel written in the background failed{also}", failed)

    async def _ensure(self) -> None:
        if not self._ready:
            await ensure_jetstream(self._js, self.subjects, self._limits)
            self._ready = True

    async def call(
        self,
        tool_id: str,
        arguments: Any,
        *,
        timeout: float | None = None,
        tool_call_id: str | None = None,
    ) -> NatsCall:
        """Submit a call of ``tool_id`` with ``arguments``; iterate the returned
        :class:`NatsCall`. ``timeout`` (seconds) is sent as ``deadline_ms`` and
        enforced here too.

        A call of a tool that no worker serves is not submitted: it ends with
        ``tool_not_found`` naming the tool (Rule 3a).

        Raises:
            ValueError: ``tool_call_id`` is not a NATS subject token,
                ``tool_id`` is not a tool id, ``timeout`` is not positive, or
                the call is larger than the server's ``max_payload``.
            WireError: ``arguments`` hold a value JSON cannot carry.
            TimeoutError: the server did not take the call.
        """
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        call_id = tool_call_id or uuid.uuid4().hex
        check_tool_id(tool_id)
        params: ToolCallParams[Any] = ToolCallParams(
            tool_call_id=check_call_id(call_id),
            tool_id=tool_id,
            arguments=arguments,
            deadline_ms=None if timeout is None else max(int(timeout * 1000), 1),
        )
        data = encode_submit(params, self.session_id)
        limit = self.connection.max_payload - _HEADER_ROOM
        if len(data) > limit:
            raise ValueError(
                f"the call is {len(data)} bytes as JSON; the NATS server takes messages of at"
                f" most {limit} bytes (its max_payload, less room for headers)"
            )
        await self._ensure()
        follower = Follower(
            self.connection,
            call_id,
            tool_id=tool_id,
            prefix=self.subjects.prefix,
            lease=self._lease,
            request=request_digest(params),
            served=functools.partial(self.served, tool_id),
        )
        await follower.open()
        try:
            if not await self._served_soon(tool_id):
                await follower.end_unserved(withdraw=False)
            else:
                # The caller's span is the worker's call span's parent (no-op without OTel).
                await publish_retrying(
                    self._js,
                    self.subjects.call_queue(tool_id),
                    data,
                    {Header.MSG_ID: call_id, **current_carrier()},
                    retry_for=self._lease,
                )
        except BaseException:
            await follower.aclose()
            raise
        self._followers.add(follower)
        return NatsCall(
            follower,
            tool_id,
            timeout,
            cancel=functools.partial(self.cancel, call_id),
            give_up=functools.partial(self.cancel_later, call_id),
        )

    async def served(self, tool_id: str) -> bool | None:
        """Whether any worker serves ``tool_id`` now (Rule 3a): ``False`` when
        the server says no one listens, ``None`` when no answer came within
        :data:`_ANSWER_WAIT_S` or the server is away.

        Raises:
            ValueError: ``tool_id`` is not a tool id.
        """
        subject = self.subjects.serves(tool_id)
        try:
            await self.connection.request(subject, b"", timeout=_ANSWER_WAIT_S)
        except nats.errors.NoRespondersError:
            return False
        except (nats.errors.Error, TimeoutError, OSError):
            return None
        return True

    async def _served_soon(self, tool_id: str) -> bool:
        """Whether a worker serves ``tool_id`` within ``serves_wait`` (Rule 3a)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._serves_wait
        while await self.served(tool_id) is False:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_SERVES_POLL_S)
        return True

    def follow(
        self,
        call_id: str,
        *,
        position: FollowPosition | None = None,
        reassembler: Reassembler | None = None,
    ) -> Follower:
        """A :class:`Follower` of ``call_id`` (from the start, or from ``position``).

        Raises:
            ValueError: ``call_id`` is not a NATS subject token.
        """
        return Follower(
            self.connection,
            call_id,
            prefix=self.subjects.prefix,
            position=position,
            reassembler=reassembler,
            lease=self._lease,
        )

    async def cancel(self, call_id: str) -> None:
        """Write ``call_id``'s cancel message: the worker running it stops it, a
        worker about to start it does not.

        Raises:
            ValueError: ``call_id`` is not a NATS subject token.
            TimeoutError: the server did not take it.
        """
        try:
            await publish_retrying(
                self._js,
                self.subjects.frame(call_id, "cancel"),
                b"{}",
                {Header.MSG_ID: f"{call_id}:cancel"},
                retry_for=self._lease,
            )
        except nats.js.errors.APIError as exc:  # pragma: no cover - JetStream refused it
            if exc.err_code != WRONG_LAST_SEQUENCE:
                raise

    def cancel_later(self, call_id: str) -> None:
        """Write ``call_id``'s cancel message in the background, without waiting
        for it and without failing (the server may be away): :meth:`aclose`
        waits for it (Rule 5). Once the client is closed, nothing is written."""
        if self._closed:
            return
        # Not in a scope: the client owns it (it is no block of code);
        # `aclose` awaits it and raises its failure.
        task = asyncio.get_running_loop().create_task(self._quiet_cancel(call_id))
        self._background.add(task)
        task.add_done_callback(self._cancel_ended)

    def _cancel_ended(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (failure := task.exception()) is not None:
            if len(self._failed) < _KEPT_FAILURES:
                self._failed.append(failure)
            else:
                self._more_failed += 1

    async def _quiet_cancel(self, call_id: str) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
            await self.cancel(call_id)
