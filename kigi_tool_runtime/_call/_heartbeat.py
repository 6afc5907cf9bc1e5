"""``HeartbeatRule``: when a running call that has written nothing for a while
says it is alive (sans-IO: the time is passed in as ``now``); ``Beat``: what
such a heartbeat says.

Hosts watch for idleness: Claude Code aborts a remote MCP call that sends no
progress and no answer for five minutes, and no host shows that a silent
command (a long build, a test run) is still running. A heartbeat is a
notification a host already reads, sent only through silence.

Invariants:

Rule 1. A beat is due ``interval`` seconds after the latest of the call's
        start, its last output and its last beat; never before, and never with
        an interval of 0 (heartbeats off).
Rule 2. A beat says how long the call has run (``now`` minus its start) and how
        long it has been silent (``now`` minus its last output, or its start
        before any): both only grow between outputs, and silence never exceeds
        the time run.
Rule 3. A driver that asks :meth:`HeartbeatRule.beat` at each
        :meth:`HeartbeatRule.due_at` gets a beat each time, so the host is never
        left more than ``interval`` (plus the driver's own lateness) without an
        output or a beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._status import format_seconds

# The hosts' plumbing (MCP, FastMCP, ADK, ...), not exported.
__all__: tuple[str, ...] = ()

#: Seconds of silence after which a running call says it is alive, by default:
#: well inside the shortest idle timeout a host is known to apply (Claude Code's
#: five minutes for remote MCP calls) and rare enough to cost nothing.
HEARTBEAT_S: Final = 30.0


#: The stdio wire's notification of a beat (the stdio server's Rule 9):
#: ``{"tool_call_id", "elapsed_ms", "silent_ms"}``, with the call's
#: ``session_id`` and no ``seq`` (docs/wire-heartbeat.md). A consumer that does
#: not know it skips it: the Rust crates, earlier clients of this SDK and the
#: ``Reassembler`` pass over a notification of another method.
METHOD_TOOL_CALL_HEARTBEAT: Final = "tool_call_heartbeat"


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat: the call has run ``elapsed_s`` seconds and written
    nothing for ``silent_s`` (Rule 2)."""

    elapsed_s: float
    silent_s: float

    def text(self) -> str:
        """``running 6m 12s, no output for 45 s``."""
        return (
            f"running {format_seconds(self.elapsed_s)},"
            f" no output for {format_seconds(self.silent_s)}"
        )


class HeartbeatRule:
    """The heartbeat timing of one call (see the module's rules).

    ``interval_s`` is the silence before a beat (0: never); ``started`` the
    call's start on the caller's clock.

    Raises:
        ValueError: ``interval_s`` is negative or not a number.
    """

    __slots__ = ("_last_beat", "beats", "interval_s", "last_output", "started")

    def __init__(self, interval_s: float, started: float) -> None:
        if not interval_s >= 0:
            raise ValueError(f"the heartbeat interval must be >= 0 seconds, got {interval_s}")
        self.interval_s = interval_s
        self.started = started
        #: When the call last wrote (``None``: not yet).
        self.last_output: float | None = None
        self._last_beat: float | None = None
        #: Beats given so far.
        self.beats = 0

    def output(self, now: float) -> None:
        """The call wrote at ``now`` (a frame went to its host)."""
        self.last_output = now

    def due_at(self) -> float | None:
        """When the next beat is due (Rule 1); ``None`` when heartbeats are off."""
        if not self.interval_s:
            return None
        latest = self.started
        if self.last_output is not None and self.last_output > latest:
            latest = self.last_output
        if self._last_beat is not None and self._last_beat > latest:
            latest = self._last_beat
        return latest + self.interval_s

    def beat(self, now: float) -> Beat | None:
        """The beat due at ``now``, counted as given; ``None`` when none is due."""
        due = self.due_at()
        if due is None or now < due:
            return None
        self._last_beat = now
        self.beats += 1
        quiet_since = self.started if self.last_output is None else self.last_output
        return Beat(max(now - self.started, 0.0), max(now - quiet_since, 0.0))
