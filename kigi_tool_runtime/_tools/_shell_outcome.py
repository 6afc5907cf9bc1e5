"""``ShellOutcome``: how a shell command ended, the shell tool's JSON output
(sans-IO, so every host's mapping reads it without the tool's process code)."""

from __future__ import annotations

import msgspec

__all__ = ("ShellOutcome",)


class ShellOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a command ended; the shell tool's JSON output.

    Exactly one of ``exit_code`` (it exited) and ``signal`` (a signal killed it,
    e.g. ``"SIGKILL"``) is set. ``timed_out`` says the tool killed it at its
    deadline. ``total_bytes`` counts all output; ``output`` is the output for the
    model: whole, or, when ``truncated``, the head and the tail around a marker
    that says how many bytes were left out there. ``omitted_bytes`` counts every
    byte missing from ``output``: those, and any dropped at the tool's hard
    ``limit`` (a second marker at the end says how many).
    """

    exit_code: int | None
    signal: str | None
    timed_out: bool
    duration_ms: int
    total_bytes: int
    truncated: bool
    omitted_bytes: int
    output: str
