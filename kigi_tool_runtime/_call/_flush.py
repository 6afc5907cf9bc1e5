"""``FinalFlush``: when a server that batches lines stops waiting for its
writer on the way out (sans-IO; the time is passed in as ``now``).

Invariants:

Rule 1. The flush waits only while the output moves: at a look that finds it
        stalled (``StallWatch``'s verdict: a pending write no byte of which has
        left for ``stall_s``), it gives up.
Rule 2. It waits at most ``budget_s`` from ``started`` in all, however slowly
        the output moves: no wait it asks for ends past ``started + budget_s``,
        and a look at or past that time gives up.
Rule 3. Between looks it waits at most ``stall_s``, so a stall is seen within
        ``stall_s`` of when it began to count.
"""

from __future__ import annotations

from ._serving import FINAL_FLUSH_S, WRITER_STALL_S

# Plumbing for the servers, not exported.
__all__: tuple[str, ...] = ()


class FinalFlush:
    """The final flush's decisions (see the module's rules).

    Raises:
        ValueError: ``budget_s`` is negative or ``stall_s`` not positive.
    """

    __slots__ = ("give_up_at", "stall_s")

    def __init__(
        self, started: float, *, budget_s: float = FINAL_FLUSH_S, stall_s: float = WRITER_STALL_S
    ) -> None:
        if not budget_s >= 0 or not stall_s > 0:
            raise ValueError(
                f"budget_s must be >= 0 and stall_s > 0 seconds, got {budget_s} and {stall_s}"
            )
        self.give_up_at = started + budget_s
        self.stall_s = stall_s

    def wait_for(self, now: float, stalled: bool) -> float | None:
        """Seconds to wait for the writer before the next look, or ``None``:
        give up now (Rules 1 to 3)."""
        left = self.give_up_at - now
        if left <= 0 or stalled:
            return None
        return min(left, self.stall_s)
