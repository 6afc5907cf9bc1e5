"""``CallQueue``: one call's frames on their way to its host, bounded, numbered
as they go out, its reply always last; ``StallWatch``: whether the host has
stopped taking them (sans-IO: the time is passed in as ``now``).

Every server of calls (the stdio server, the MCP server, the NATS worker) puts
a call's frames in one of these between the tool and the wire, with one
:class:`QueuePolicy`: wait for room, or wait and drop the oldest once the host
has stalled.

Invariants:

Rule 1. Every item taken carries the call's own ``seq``: 0, 1, 2, ... in the
        order items are *taken*, so ``seq`` never has a hole.
Rule 2. At most ``policy.budget`` bytes of items wait, plus the newest:
        :meth:`CallQueue.offer` queues an item that fits (an empty queue takes
        any one). One that does not fit is refused (the driver waits for a
        take, then offers it again) unless the policy drops and the host is
        stalled, or the queue was given up (:meth:`CallQueue.give_up`): then
        the *oldest* items are dropped until it fits, and it is queued. The
        newest is always kept, so every drop is reported by a later item.
Rule 3. Every dropped item is counted once: in :attr:`CallQueue.dropped`, and
        on the next item taken, as its ``dropped_count`` (``None`` when none
        were dropped just before it).
Rule 4. The reply is last: :meth:`CallQueue.finish` sets it once, after which
        nothing more is offered; :meth:`CallQueue.take_reply` hands it over only
        once every queued item has been taken, and only once.
Rule 5. A host is stalled (:class:`StallWatch`) when a send has been pending
        and nothing of it has moved for ``stall_s`` seconds, or the output
        broke; a slow host that keeps taking bytes, however few, is not.
Rule 6. A heartbeat (:class:`Beat`) waits in a slot of its own, beside the
        items: it takes no ``seq``, counts no bytes and is never counted as
        dropped. It is let in only while no item waits (output on its way is
        no silence) and before the reply; a newer one replaces it, and setting
        the reply (or discarding) removes it, so nothing follows the reply.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, TypeVar

from ._heartbeat import Beat

# Plumbing for the servers and callers, not exported.
__all__: tuple[str, ...] = ()

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What a full :class:`CallQueue` does (Rule 2): ``budget`` bytes of items
    may wait; ``drops``: once the host has stalled, drop the oldest items
    rather than wait (without it, wait however long the host takes).

    Raises:
        ValueError: ``budget`` is below 1.
    """

    budget: int
    drops: bool

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"a call's queue budget must be at least 1 byte, got {self.budget}")

    @classmethod
    def drop_oldest_when_stalled(cls, budget: int) -> QueuePolicy:
        """Wait while the host takes frames; drop the oldest once it stalls."""
        return cls(budget, drops=True)

    @classmethod
    def wait(cls, budget: int) -> QueuePolicy:
        """Always wait for the host; never drop."""
        return cls(budget, drops=False)


class Taken(NamedTuple, Generic[T]):
    """An item taken from a :class:`CallQueue`, with the ``seq`` it goes out
    with and how many items were dropped just before it (Rules 1 and 3)."""

    item: T
    seq: int
    dropped_count: int | None


_new_taken: Final = tuple.__new__


class CallQueue(Generic[T, R]):
    """One call's items (``T``) waiting to be sent, then its reply (``R``); see
    the module's rules."""

    __slots__ = (
        "_beat",
        "_dropped_since",
        "_given_up",
        "_items",
        "_replied",
        "_reply",
        "_seq",
        "dropped",
        "policy",
        "queued_bytes",
    )

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self._items: deque[tuple[T, int]] = deque()
        self.queued_bytes = 0
        self._seq = 0
        self.dropped = 0
        self._dropped_since = 0
        self._given_up = False
        self._reply: R | None = None
        self._replied = False
        self._beat: Beat | None = None

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (
            f"CallQueue({len(self._items)} items, {self.queued_bytes} bytes, next seq"
            f" {self._seq}, {self.dropped} dropped, reply {'set' if self.finished else 'unset'})"
        )

    @property
    def taken(self) -> int:
        """Items taken so far (the next one's ``seq``)."""
        return self._seq

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next item offered is taken with, when nothing is
        dropped before it is taken (always, under a policy that never drops):
        for a host that writes the number into the item as it is made
        (Rule 1 numbers it; the host reuses the number)."""
        return self._seq + len(self._items)

    @property
    def finished(self) -> bool:
        """The reply is set (:meth:`finish`)."""
        return self._reply is not None or self._replied

    @property
    def ended(self) -> bool:
        """The reply has been handed over (:meth:`take_reply`)."""
        return self._replied

    def has_room(self, size: int) -> bool:
        """Whether an item of ``size`` bytes fits without dropping."""
        return not self._items or self.queued_bytes + size <= self.policy.budget

    def offer(self, item: T, size: int, *, stalled: bool = False) -> bool:
        """Queue ``item`` (``size`` bytes) if Rule 2 lets it in now; ``False``:
        wait for a take (or for the host to stall) and offer it again.

        Raises:
            RuntimeError: the reply is already set (Rule 4).
        """
        if self._reply is not None or self._replied:  # self.finished, once per frame
            raise RuntimeError("an item offered after the call's reply")
        items = self._items
        budget = self.policy.budget
        if items and self.queued_bytes + size > budget:
            if not (self._given_up or (stalled and self.policy.drops)):
                return False
            dropped = 0
            while items and self.queued_bytes + size > budget:
                _, old = items.popleft()
                self.queued_bytes -= old
                dropped += 1
            self.dropped += dropped
            self._dropped_since += dropped
        items.append((item, size))
        self.queued_bytes += size
        return True

    def offer_beat(self, beat: Beat) -> bool:
        """Put ``beat`` in the heartbeat slot (Rule 6); ``False``: an item waits,
        or the reply is set, so it is not let in."""
        if self._items or self.finished or self._given_up:
            return False
        self._beat = beat
        return True

    def take_beat(self) -> Beat | None:
        """The waiting heartbeat, once (``None``: none waits)."""
        beat, self._beat = self._beat, None
        return beat

    def take(self) -> Taken[T] | None:
        """The oldest item, numbered (Rules 1 and 3); ``None`` when empty."""
        if not self._items:
            return None
        item, size = self._items.popleft()
        self.queued_bytes -= size
        seq = self._seq
        self._seq = seq + 1
        dropped = self._dropped_since
        self._dropped_since = 0
        # Taken(item, seq, dropped or None) without the Python frame of the
        # NamedTuple's __new__: this runs once per frame.
        return _new_taken(Taken, (item, seq, dropped or None))

    def finish(self, reply: R) -> None:
        """Set the call's reply (Rule 4).

        Raises:
            RuntimeError: it is already set.
        """
        if self.finished:
            raise RuntimeError("a call's reply is set once")
        self._reply = reply
        self._beat = None

    def take_reply(self) -> R | None:
        """The reply, once every item has been taken and only once; else ``None``."""
        if self._items or self._reply is None:
            return None
        reply, self._reply = self._reply, None
        self._replied = True
        return reply

    def give_up(self) -> None:
        """Nobody may take soon (the host is gone or the call is being
        abandoned): no offer waits from now on; full, the queue drops its
        oldest items instead (Rule 2)."""
        self._given_up = True

    def discard(self) -> int:
        """Drop every queued item and the reply not yet handed over (the output
        broke); returns how many that was (the reply counting one). The items
        are not counted as dropped: nothing after them will say so."""
        lines = len(self._items) + (self._reply is not None)
        self._items.clear()
        self._beat = None
        self.queued_bytes = 0
        if self._reply is not None:
            self._reply = None
            self._replied = True
        self._given_up = True
        return lines


class StallWatch:
    """Whether a host has stopped taking what is sent to it (Rule 5).

    A driver says when a send starts (:meth:`sending`), when any of it is seen
    to move (:meth:`moved`), when it is done (:meth:`sent`), and when the output
    broke (:meth:`broke`); :meth:`stalled` gives the verdict at ``now``.

    Raises:
        ValueError: ``stall_s`` is not positive.
    """

    __slots__ = ("_broken", "_since", "stall_s")

    def __init__(self, stall_s: float) -> None:
        if not stall_s > 0:
            raise ValueError(f"stall_s must be positive, got {stall_s}")
        self.stall_s = stall_s
        self._since: float | None = None  # when the pending send last moved
        self._broken = False

    @property
    def broken(self) -> bool:
        """The output broke (:meth:`broke`): stalled from now on."""
        return self._broken

    def sending(self, now: float) -> None:
        """A send started at ``now``."""
        self._since = now

    def moved(self, now: float) -> None:
        """Some of the pending send moved at ``now`` (ignored when none is)."""
        if self._since is not None:
            self._since = now

    def sent(self) -> None:
        """The pending send is done."""
        self._since = None

    def broke(self) -> None:
        """The output is gone: stalled from now on."""
        self._broken = True

    def stalled(self, now: float) -> bool:
        """The verdict at ``now`` (Rule 5)."""
        if self._broken:
            return True
        since = self._since
        return since is not None and now - since >= self.stall_s

    def recheck_in(self, now: float) -> float:
        """Seconds from ``now`` after which :meth:`stalled` could turn true with
        nothing else happening (``stall_s`` when no send is pending)."""
        since = self._since
        if self._broken:
            return 0.0
        if since is None:
            return self.stall_s
        return max(since + self.stall_s - now, 0.0)
