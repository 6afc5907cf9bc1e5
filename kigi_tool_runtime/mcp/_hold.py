"""When a response must wait for the host to read what its call wrote before it.

The official TypeScript MCP client handles a response at once but each
notification a microtask later, so a progress notification that reaches it in
the same read as its call's response finds the call's progress handler gone and
is dropped (its stdio transport parses every message of one read before any
deferred handler runs). Over a pipe the server cannot choose how the host's
reads fall, but it can see how far the host has read: a message written after
the host read past a byte arrives in a later read than that byte. Invariants:

Rule 1. A response (or error) whose call has a notification the host may not
        have read yet is *held*: written only once the host has read past that
        call's last notification, so it never shares a read with a
        notification of its own call. Notifications of other calls do not
        hold it (their handlers are still there).
Rule 2. Holds are per call and concurrent: a held response is set aside and
        everything behind it goes on being written, in order and batched, so
        many calls that end together are all released by the one read that
        takes their notifications (a held response is therefore written after
        messages the server handed over later; its own call's messages all
        came before it).
Rule 3. A hold is bounded: past :data:`RESPONSE_HOLD_S` without the host
        reading that far, the response is written anyway (a host that stopped
        reading must not keep a call open forever; the notifications it loses
        then are those it never read).
Rule 4. Only an output whose unread bytes the OS reports is held (a pipe, a
        Unix stream socket: what hosts spawn servers on); on any other output
        (a file, a terminal, TCP) nothing is held and nothing changes.
Rule 5. While a response is held, how far the host has read is looked at after
        each bare yield to the event loop for the first :data:`SPIN_S` of the
        newest hold, then every :data:`POLL_S` (an event loop sleeps in whole
        milliseconds, so a shorter pause would cost as much): a host that
        reads at once costs a call a few turns of the loop, a slow one at most
        one poll interval beyond its own delay.
Rule 6. Bounded: one entry per call with a notification not known read, and
        one per held response (at most the calls running).

Nothing here performs I/O: messages' sizes and calls in, decisions out
(``_unread`` asks the OS, ``_lines`` writes and waits).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final, Generic, NamedTuple, TypeVar

__all__ = ()

#: Longest a response is held for the host to read what came before it (Rule 3).
RESPONSE_HOLD_S: Final = 1.0

#: How long after a hold starts the unread count is looked at after bare
#: yields only (Rule 5): a host that reads at once has read within this.
SPIN_S: Final = 0.0001

#: The pause between two looks after :data:`SPIN_S` (Rule 5).
POLL_S: Final = 0.001

M = TypeVar("M")


def poll_delay(waited: float) -> float:
    """The pause before the next look at the unread count, ``waited`` seconds
    into a hold (Rule 5): a bare yield (``0``) within :data:`SPIN_S`, then
    :data:`POLL_S`."""
    return 0.0 if waited < SPIN_S else POLL_S


class _Held(NamedTuple, Generic[M]):
    message: M
    call: Hashable
    after: int  # the byte the host must have read past
    since: float


class ResponseHold(Generic[M]):
    """Which responses wait for the host to read, and when each may go
    (see the module's rules).

    ``enabled`` is false for an output whose unread bytes cannot be known
    (Rule 4): then nothing is ever held. Tell it the bytes of each message as
    it is handed to the output (:meth:`wrote`), offer it each response
    (:meth:`hold`), and tell it how many bytes written are not read yet
    (:meth:`release`), which answers the responses that may go now.
    :attr:`held` counts the responses that had to wait, :attr:`gave_up` those
    written at the bound (Rule 3).
    """

    __slots__ = ("_held", "_read", "_unread_note", "_written", "enabled", "gave_up", "held")

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._written = 0  # bytes handed to the output
        self._read = 0  # bytes the host is known to have read
        self._unread_note: dict[Hashable, int] = {}  # call: end of its last notification
        self._held: list[_Held[M]] = []
        self.held = 0
        self.gave_up = 0

    @property
    def holding(self) -> int:
        """Responses held now."""
        return len(self._held)

    def wrote(self, size: int, *, call: Hashable | None, is_notification: bool) -> None:
        """``size`` bytes of one message were handed to the output;
        ``call`` is the request it belongs to, when it says."""
        self._written += size
        if self.enabled and is_notification and call is not None:
            self._unread_note[call] = self._written

    def hold(self, message: M, call: Hashable, now: float) -> bool:
        """Offer the response (or error) of ``call``: true when it is held
        (Rule 1), and :meth:`release` gives it back later; false when it may
        be written now."""
        after = self._unread_note.get(call)
        if after is None or after <= self._read:
            return False
        self._held.append(_Held(message, call, after, now))
        self.held += 1
        return True

    def must_look(self, call: Hashable) -> bool:
        """Whether a response of ``call`` would be held were nothing more known
        read (look at the unread count before :meth:`hold` to hold less)."""
        after = self._unread_note.get(call)
        return after is not None and after > self._read

    def release(self, unread: int | None, now: float) -> list[M]:
        """Learn that ``unread`` of the bytes written are not read yet
        (``None``: the probe failed, as if all were read); the held responses
        that may go now, in the order they were held (Rules 1, 3)."""
        self._read = max(self._read, self._written - (unread or 0))
        read = self._read
        if self._unread_note and any(end <= read for end in self._unread_note.values()):
            self._unread_note = {c: end for c, end in self._unread_note.items() if end > read}
        if not self._held:
            return []
        going: list[M] = []
        kept: list[_Held[M]] = []
        for item in self._held:
            if item.after <= read:
                going.append(item.message)
            elif now - item.since >= RESPONSE_HOLD_S:
                self.gave_up += 1
                going.append(item.message)
            else:
                kept.append(item)
                continue
            self._unread_note.pop(item.call, None)
        self._held = kept
        return going

    def next_look(self, now: float) -> float:
        """The pause before the next look while responses are held (Rule 5)."""
        newest = max((item.since for item in self._held), default=now)
        return poll_delay(now - newest)
