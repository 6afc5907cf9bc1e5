"""The served call's queue (``_call/_queue``) and its asyncio feed
(``_call/_feed``): any interleaving of offers, takes, stalls, give-ups and the
reply keeps the seq whole, the reply last, the bytes bounded and every dropped
item counted once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from kigi_tool_protocol import CustomProgress, PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime._call._feed import QueueFeed, produce
from kigi_tool_runtime._call._frame_check import encoded_body
from kigi_tool_runtime._call._heartbeat import Beat
from kigi_tool_runtime._call._queue import CallQueue, QueuePolicy, StallWatch, Taken
from kigi_tool_runtime._tools._errors import ToolError
from kigi_tool_runtime._tools._runner import run_tool
from kigi_tool_runtime._tools._tool import Tool, ToolContext, ToolEvent, ToolResult


class QueueMachine(RuleBasedStateMachine):
    """A model of one call's queue: what was offered, taken and dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: CallQueue[int, str] | None = None
        self.offered: list[int] = []  # accepted items, in order
        self.taken: list[Taken[int]] = []
        self.sizes: dict[int, int] = {}
        self.next_item = 0
        self.reply_taken = 0
        self.given_up = False

    @precondition(lambda self: self.queue is None)
    @rule(budget=st.integers(1, 64), drops=st.booleans())
    def start(self, budget: int, drops: bool) -> None:
        self.queue = CallQueue(QueuePolicy(budget, drops))

    @precondition(lambda self: self.queue is not None and not self.queue.finished)
    @rule(size=st.integers(0, 80), stalled=st.booleans())
    def offer(self, size: int, stalled: bool) -> None:
        queue = self.queue
        assert queue is not None
        before = queue.dropped
        fits = queue.has_room(size)
        item = self.next_item
        accepted = queue.offer(item, size, stalled=stalled)
        may_drop = self.given_up or (stalled and queue.policy.drops)
        # Refused only when it does not fit and nothing may be dropped.
        assert accepted == (fits or may_drop)
        if not may_drop:
            assert queue.dropped == before
        if accepted:
            self.next_item += 1
            self.offered.append(item)
            self.sizes[item] = size

    @precondition(lambda self: self.queue is not None)
    @rule()
    def take(self) -> None:
        queue = self.queue
        assert queue is not None
        had = len(queue)
        taken = queue.take()
        if had == 0:
            assert taken is None
            return
        assert taken is not None
        self.taken.append(taken)

    @precondition(lambda self: self.queue is not None and not self.queue.finished)
    @rule()
    def finish(self) -> None:
        assert self.queue is not None
        self.queue.finish("reply")
        with pytest.raises(RuntimeError):
            self.queue.offer(-1, 1)
        with pytest.raises(RuntimeError):
            self.queue.finish("again")

    @precondition(lambda self: self.queue is not None)
    @rule()
    def take_reply(self) -> None:
        queue = self.queue
        assert queue is not None
        had_items = len(queue) > 0
        reply = queue.take_reply()
        if reply is not None:
            assert not had_items, "the reply went out before a queued item"
            self.reply_taken += 1

    @precondition(lambda self: self.queue is not None)
    @rule()
    def give_up(self) -> None:
        assert self.queue is not None
        self.queue.give_up()
        self.given_up = True

    @invariant()
    def seq_is_whole(self) -> None:
        assert [t.seq for t in self.taken] == list(range(len(self.taken)))
        if self.queue is not None:
            assert self.queue.taken == len(self.taken)

    @invariant()
    def order_is_kept(self) -> None:
        items = [t.item for t in self.taken]
        assert items == sorted(items)
        assert set(items) <= set(self.offered)

    @invariant()
    def every_drop_counted_once(self) -> None:
        queue = self.queue
        if queue is None:
            return
        queued = len(queue)
        # Offered = taken + queued + dropped, and each drop is said exactly once
        # (on a taken item, or on the next one to be taken).
        assert len(self.offered) == len(self.taken) + queued + queue.dropped
        said = sum(t.dropped_count or 0 for t in self.taken)
        assert said <= queue.dropped
        assert all(t.dropped_count is None or t.dropped_count > 0 for t in self.taken)
        if said < queue.dropped:
            assert queued > 0, "a drop that no later item can report"
        # The items dropped before each taken one are exactly those skipped.
        previous = -1
        for t in self.taken:
            skipped = t.item - previous - 1
            assert (t.dropped_count or 0) == skipped
            previous = t.item

    @invariant()
    def bytes_bounded(self) -> None:
        queue = self.queue
        if queue is None or not len(queue):
            return
        waiting = [
            item for item in self.offered if item > (self.taken[-1].item if self.taken else -1)
        ]
        kept = [i for i in waiting if i in self._queued_items()]
        assert queue.queued_bytes == sum(self.sizes[i] for i in kept)
        newest = self.offered[-1]
        assert newest in kept, "the newest item was dropped"
        assert queue.queued_bytes - self.sizes[newest] <= queue.policy.budget

    def _queued_items(self) -> set[int]:
        assert self.queue is not None
        return {item for item, _ in self.queue._items}

    @invariant()
    def reply_once_and_last(self) -> None:
        assert self.reply_taken <= 1
        if self.queue is not None and self.reply_taken:
            assert self.queue.ended
            assert len(self.queue) == 0


TestQueueMachine = QueueMachine.TestCase


def test_discard_counts_lines_and_ends_the_queue() -> None:
    queue: CallQueue[str, str] = CallQueue(QueuePolicy.drop_oldest_when_stalled(10))
    assert queue.offer("a", 4)
    assert queue.offer("b", 4)
    queue.finish("reply")
    assert queue.discard() == 3
    assert queue.take() is None
    assert queue.take_reply() is None
    assert queue.ended
    assert queue.queued_bytes == 0


def test_wait_policy_never_drops_for_a_stall() -> None:
    queue: CallQueue[int, str] = CallQueue(QueuePolicy.wait(5))
    assert queue.offer(0, 5)
    assert not queue.offer(1, 5, stalled=True)
    assert queue.dropped == 0
    queue.give_up()
    assert queue.offer(1, 5)
    assert queue.dropped == 1
    assert queue.take() == Taken(1, 0, 1)


def test_policy_refuses_an_empty_budget() -> None:
    with pytest.raises(ValueError, match="at least 1 byte"):
        QueuePolicy.wait(0)


@given(
    stall_s=st.floats(0.01, 10),
    events=st.lists(
        st.tuples(st.sampled_from(["sending", "moved", "sent", "broke"]), st.floats(0, 5)),
        max_size=20,
    ),
    probe=st.floats(0, 20),
)
def test_stall_watch_verdict(stall_s: float, events: list[tuple[str, float]], probe: float) -> None:
    watch = StallWatch(stall_s)
    now = 0.0
    since: float | None = None
    broken = False
    for name, step in events:
        now += step
        getattr(watch, name)(*([] if name in ("sent", "broke") else [now]))
        if name == "sending" or (name == "moved" and since is not None):
            since = now
        elif name == "sent":
            since = None
        elif name == "broke":
            broken = True
    at = now + probe
    expected = broken or (since is not None and at - since >= stall_s)
    assert watch.stalled(at) == expected
    wait = watch.recheck_in(at)
    assert wait >= 0
    if since is not None and not broken:
        assert watch.stalled(at + wait + 1e-9)  # nothing else happening, the verdict turns
    if since is None and not broken:
        assert wait == stall_s
        assert not watch.stalled(at + wait)


def test_stall_watch_refuses_a_zero_stall() -> None:
    with pytest.raises(ValueError, match="positive"):
        StallWatch(0)


def _frame(delta: str, kind: str = "stdout") -> ToolCallProgressFrame[Any]:
    body = PartialResultPayload(delta=delta, total_bytes=len(delta.encode()))
    return ToolCallProgressFrame(tool_call_id="c", kind=kind, body=body)


def test_encoded_body_is_the_wire_bytes_and_refuses_what_json_cannot_carry() -> None:
    frame = _frame("grüße ✓")
    body = encoded_body(frame)
    assert bytes(body).startswith(b"{")
    assert "grüße ✓".encode() in bytes(body)
    with pytest.raises(ToolError, match=r"kind 'std.udc80' cannot be sent as JSON") as info:
        encoded_body(_frame("x", kind="std\udc80"))
    assert info.value.kind == "internal_error"


async def test_feed_waits_for_room_then_drops_once_the_host_stalls() -> None:
    watch = StallWatch(0.05)
    feed: QueueFeed[int, str] = QueueFeed(CallQueue(QueuePolicy.drop_oldest_when_stalled(4)), watch)
    await feed.put(0, 4)
    # Full: the put waits while the host is not stalled...
    pending = asyncio.ensure_future(feed.put(1, 4))
    await asyncio.sleep(0.01)
    assert not pending.done()
    # ... a take makes room.
    assert (await feed.get()) == Taken(0, 0, None)
    await asyncio.wait_for(pending, 1)
    # Full again, and the host stops taking: after the stall the oldest goes.
    watch.sending(asyncio.get_running_loop().time())
    await asyncio.wait_for(feed.put(2, 4), 5)
    assert feed.queue.dropped == 1
    feed.finish("reply")
    assert (await feed.get()) == Taken(2, 1, 1)
    assert (await feed.get()) == "reply"


async def test_feed_get_waits_for_the_reply_last() -> None:
    feed: QueueFeed[int, str] = QueueFeed(CallQueue(QueuePolicy.wait(100)), StallWatch(1))
    getter = asyncio.ensure_future(feed.get())
    await asyncio.sleep(0)
    assert not getter.done()
    await feed.put(7, 1)
    assert (await asyncio.wait_for(getter, 1)) == Taken(7, 0, None)
    feed.finish("end")
    assert (await feed.get()) == "end"


async def test_give_up_frees_a_waiting_put() -> None:
    feed: QueueFeed[int, str] = QueueFeed(CallQueue(QueuePolicy.wait(1)), StallWatch(100))
    await feed.put(0, 1)
    pending = asyncio.ensure_future(feed.put(1, 1))
    await asyncio.sleep(0.01)
    assert not pending.done()
    feed.give_up()
    await asyncio.wait_for(pending, 1)
    assert feed.queue.dropped == 1


async def test_on_ready_is_called_for_each_item_and_the_reply() -> None:
    """Rule 4 of the feed: a host taking from many queues hears of each item
    queued (after it is in the queue) and of the reply."""
    seen: list[int] = []
    feed: QueueFeed[int, str]

    def ready() -> None:
        seen.append(len(feed.queue) + feed.queue.finished)

    feed = QueueFeed(CallQueue(QueuePolicy.wait(100)), StallWatch(1), on_ready=ready)
    await feed.put(1, 1)
    await feed.put(2, 1)
    feed.finish("end")
    assert seen == [1, 2, 3]


class _CountingStall:
    """A stall verdict that counts how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def stalled(self, now: float) -> bool:
        self.asked += 1
        return True

    def recheck_in(self, now: float) -> float:
        return 0.0


async def test_put_asks_the_verdict_only_of_an_item_that_does_not_fit() -> None:
    stall = _CountingStall()
    feed: QueueFeed[int, str] = QueueFeed(CallQueue(QueuePolicy.drop_oldest_when_stalled(2)), stall)
    await feed.put(0, 1)
    await feed.put(1, 1)
    assert stall.asked == 0
    await feed.put(2, 1)  # over the budget: the verdict (stalled) lets it drop
    assert stall.asked == 1
    assert feed.queue.dropped == 1


class Count(msgspec.Struct):
    count: int = 3
    bad_at: int = -1


class Streamer(Tool[Count]):
    """Streams ``count`` text frames (the ``bad_at``-th of a kind JSON cannot
    carry), then a result; says whether it was stopped."""

    id = "streamer"
    args_type = Count

    def __init__(self) -> None:
        self.stopped = False

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        try:
            for i in range(args.count):
                value = "bad\udc80" if i == args.bad_at else i
                yield CustomProgress(subkind="count", payload=value)
                await asyncio.sleep(0)
            yield ToolResult(value={"done": args.count})
        except asyncio.CancelledError:
            self.stopped = True
            raise
        finally:
            if args.bad_at >= 0:
                self.stopped = True


def _item_of(frame: ToolCallProgressFrame[Any]) -> tuple[bytes, int]:
    body = bytes(encoded_body(frame))
    return body, len(body)


async def _drain(feed: QueueFeed[bytes, ToolResult | ToolError]) -> list[Any]:
    got: list[Any] = []
    while True:
        item = await feed.get()
        got.append(item)
        if not isinstance(item, Taken):
            return got


async def test_produce_runs_to_the_terminal_and_feeds_every_frame() -> None:
    feed: QueueFeed[bytes, ToolResult | ToolError] = QueueFeed(
        CallQueue(QueuePolicy.wait(64)), StallWatch(1)
    )
    run = run_tool(Streamer(), b'{"count": 5}', ctx=ToolContext("c"))
    producer = asyncio.ensure_future(produce(run, feed, _item_of))
    taker = asyncio.ensure_future(_drain(feed))
    terminal = await asyncio.wait_for(producer, 10)
    assert terminal == ToolResult(value={"done": 5})
    feed.finish(terminal)
    got = await asyncio.wait_for(taker, 10)
    assert [t.seq for t in got[:-1]] == [0, 1, 2, 3, 4]
    assert [msgspec.json.decode(t.item) for t in got[:-1]] == [0, 1, 2, 3, 4]
    assert got[-1] is terminal


async def test_produce_ends_the_call_with_the_item_error_and_stops_the_tool() -> None:
    tool = Streamer()
    feed: QueueFeed[bytes, ToolResult | ToolError] = QueueFeed(
        CallQueue(QueuePolicy.wait(1 << 20)), StallWatch(1)
    )
    run = run_tool(tool, b'{"count": 10, "bad_at": 2}', ctx=ToolContext("c"))
    terminal = await asyncio.wait_for(produce(run, feed, _item_of), 10)
    assert isinstance(terminal, ToolError)
    assert terminal.kind == "internal_error"
    assert "a progress frame of kind 'count' cannot be sent as JSON" in terminal.message
    assert len(feed.queue) == 2  # the frames before it went to the queue
    assert tool.stopped


def test_a_heartbeat_waits_beside_the_items_and_never_after_the_reply() -> None:
    """The beat slot (Rule 6): let in only while no item waits, a newer beat
    replaces it, it takes no seq and is never counted as dropped, and setting
    the reply removes it."""
    queue: CallQueue[int, str] = CallQueue(QueuePolicy.drop_oldest_when_stalled(2))
    assert queue.offer_beat(Beat(1.0, 1.0))
    assert queue.offer_beat(Beat(2.0, 2.0))
    assert queue.take_beat() == Beat(2.0, 2.0)
    assert queue.take_beat() is None
    assert queue.offer(1, 1)
    assert not queue.offer_beat(Beat(3.0, 3.0))  # output waits: no silence
    assert queue.take() == Taken(1, 0, None)
    assert queue.offer_beat(Beat(4.0, 4.0))
    assert queue.offer(2, 2)
    assert queue.offer(3, 2, stalled=True)
    assert queue.dropped == 1
    assert queue.take() == Taken(3, 1, 1)
    queue.finish("reply")
    assert queue.take_beat() is None
    assert not queue.offer_beat(Beat(5.0, 5.0))
    assert queue.take_reply() == "reply"


class Quiet(Tool[Count]):
    """One frame, ``count`` tenths of a second of silence, one more frame."""

    id = "quiet"
    args_type = Count

    async def execute(self, ctx: ToolContext, args: Count) -> AsyncIterator[ToolEvent]:
        yield CustomProgress(subkind="count", payload=0)
        await asyncio.sleep(args.count / 10)
        yield CustomProgress(subkind="count", payload=1)
        yield ToolResult(value="done")


async def test_produce_beats_through_silence_and_stops_at_the_end() -> None:
    """A call silent for 1 s with a 0.1 s interval: the taker gets beats
    between its two frames, each silence at least one interval longer than
    the one before, the frames' seq whole, and no beat once produce returned."""
    feed: QueueFeed[bytes, ToolResult | ToolError] = QueueFeed(
        CallQueue(QueuePolicy.wait(64)), StallWatch(1)
    )
    run = run_tool(Quiet(), b'{"count": 10}', ctx=ToolContext("c"))
    taker = asyncio.ensure_future(_drain_all(feed))
    terminal = await asyncio.wait_for(produce(run, feed, _item_of, heartbeat_s=0.1), 10)
    await asyncio.sleep(0.3)  # a timer left armed would beat here
    feed.finish(terminal)
    got = await asyncio.wait_for(taker, 10)
    beats = [item for item in got if isinstance(item, Beat)]
    frames = [item for item in got if isinstance(item, Taken)]
    assert [t.seq for t in frames] == [0, 1]
    assert got.index(beats[0]) > got.index(frames[0])
    assert got.index(beats[-1]) < got.index(frames[1])
    assert len(beats) >= 3
    assert all(b.silent_s - a.silent_s >= 0.1 - 1e-6 for a, b in itertools.pairwise(beats))
    assert all(beat.silent_s >= 0.1 and beat.elapsed_s >= beat.silent_s for beat in beats)
    assert got[-1] is terminal


async def _drain_all(feed: QueueFeed[bytes, ToolResult | ToolError]) -> list[Any]:
    got: list[Any] = []
    while True:
        item = await feed.get()
        got.append(item)
        if not isinstance(item, Taken | Beat):
            return got
