"""When a response must wait for the host to read what was written before it.

The official TypeScript MCP client handles a response at once but each
notification a microtask later, so a progress notification that reaches it in
the same read as its call's response finds the call's progress handler gone and
is dropped (its stdio transport parses every message of one read before any
deferred handler runs). Over a pipe the server cannot choose how the host's
reads fall, but it can see whether the host has read everything written so
far: when it has, whatever comes next arrives in a read of its own. Invariants:

Rule 1. A response (or error) that follows a notification written since the host
        last had nothing left to read is *held*: written only once the host has
        read every byte before it, so it never shares a read with a
        notification sent before it. Everything else is written at once, in
        order, and batched as before.
Rule 2. The hold is bounded: past :data:`RESPONSE_HOLD_S` without the host
        reading everything, the response is written anyway (a host that stopped
        reading must not keep a call open forever; the notifications it loses
        then are those it never read).
Rule 3. Only an output whose unread bytes the OS reports is held (a pipe, a
        Unix stream socket: what hosts spawn servers on); on any other output
        (a file, a terminal, TCP) nothing is held and nothing changes.
Rule 4. While held, the unread count is looked at after each bare yield to
        the event loop for the first :data:`SPIN_S`, then every
        :data:`POLL_S` (an event loop sleeps in whole milliseconds, so a
        shorter pause would cost as much): a host that reads at once costs the
        call a few turns of the loop, a slow one at most one poll interval
        beyond its own delay.

Nothing here performs I/O: messages' kinds in, decisions out (``_unread`` asks
the OS, ``_transports`` waits).
"""

from __future__ import annotations

from typing import Final

__all__ = ()

#: Longest a response is held for the host to read what came before it (Rule 2).
RESPONSE_HOLD_S: Final = 1.0

#: How long a held response looks at the unread count after bare yields only
#: (Rule 4): a host that reads at once has read within this.
SPIN_S: Final = 0.0001

#: The pause between two looks after :data:`SPIN_S` (Rule 4).
POLL_S: Final = 0.001


def poll_delay(waited: float) -> float:
    """The pause before the next look at the unread count, ``waited`` seconds
    into a hold (Rule 4): a bare yield (``0``) within :data:`SPIN_S`, then
    :data:`POLL_S`."""
    return 0.0 if waited < SPIN_S else POLL_S


class ResponseHold:
    """Which outgoing messages must wait for the host to read (Rule 1).

    ``enabled`` is false for an output whose unread bytes cannot be known
    (Rule 3): then :meth:`must_wait` is always false. Tell it each message
    written (:meth:`wrote`) and when the host was seen to have read everything
    (:meth:`caught_up`); :attr:`held` counts the responses that had to wait.
    """

    __slots__ = ("_unread_notification", "enabled", "gave_up", "held")

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._unread_notification = False
        self.held = 0
        self.gave_up = 0

    def must_wait(self, *, is_response: bool) -> bool:
        """Whether a message must wait for the host to read everything written
        before it: a response after a notification the host may not have read."""
        return self.enabled and is_response and self._unread_notification

    def wrote(self, *, is_notification: bool) -> None:
        """A message was handed to the output."""
        if is_notification:
            self._unread_notification = True

    def caught_up(self, *, in_time: bool) -> None:
        """The wait before a held response ended: the host read everything
        (``in_time``) or :data:`RESPONSE_HOLD_S` passed (Rule 2)."""
        self._unread_notification = False
        self.held += 1
        if not in_time:
            self.gave_up += 1
