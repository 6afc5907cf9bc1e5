"""``CallLoop``: the one loop that runs a call to its terminal. Every host
drives a call through it: the queued servers through ``_call/_feed``'s
:func:`produce` (the stdio server, the MCP server, the NATS worker, a
beating ``ServedCall``), a plain ``ServedCall`` by iterating it.

Invariants:

Rule 1. :meth:`CallLoop.frames` yields each progress event of the run as a
        ``tool_call_progress`` frame (``progress_to_frame``), in order, with no
        task of its own (a frame costs a generator step, never a task switch);
        the run's terminal is kept, not yielded. Closing the generator early
        closes the run (the runner stops the tool).
Rule 2. :attr:`CallLoop.terminal` is how the call ended: the error the host
        gave :meth:`CallLoop.stop` (a frame it could not send), else the run's
        terminal, else (the runner's Rule 1 says it cannot happen) an
        ``internal_error``: a loop always has an end.
Rule 3. The call's span (``_otel``), when the loop has one, is ended once:
        by :meth:`CallLoop.end` with the call's end, or, when the loop is left
        by an exception or a cancel that no :meth:`CallLoop.stop` explains, as
        ``cancelled`` (:meth:`CallLoop.abandon`), with the host's own loss
        reports when it keeps them (``reports``). Ending it again does nothing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

from kigi_tool_protocol import ToolCallProgressFrame, progress_to_frame

from .._consumer._loss import LossReport
from .._otel import CallSpan
from .._tools._errors import ToolError
from .._tools._runner import ToolRun
from .._tools._tool import ToolResult

# Plumbing for the servers and the served call, not exported.
__all__: tuple[str, ...] = ()

# A tuple, built once: ``ToolResult | ToolError`` in the loop made a union per frame.
_TERMINALS: Final = (ToolResult, ToolError)


def _stopped() -> ToolError:
    return ToolError("cancelled", "the call was stopped before its end")


def _no_terminal() -> ToolError:
    return ToolError("internal_error", "the tool run ended without a terminal")


def ended_early(failure: BaseException | None) -> ToolError:
    """The end a call's reader is given when its producer was left before the
    run's terminal: by ``failure``, an ``internal_error`` that names it; by a
    cancel (``failure`` a cancellation or ``None``), ``cancelled``."""
    if isinstance(failure, Exception):
        return ToolError(
            "internal_error",
            f"the call failed before its end: {type(failure).__name__}: {failure}",
        )
    return _stopped()


class CallLoop:
    """One run of ``run`` to its terminal (see the module's rules); ``span``:
    the call's span, ended by the loop (Rule 3); ``reports``: the host's loss
    reports for a ``cancelled`` span end (``None``: the span's own trace)."""

    __slots__ = ("_end", "_reports", "_run", "_terminal", "span")

    def __init__(
        self,
        run: ToolRun,
        span: CallSpan | None = None,
        *,
        reports: Callable[[], list[LossReport]] | None = None,
    ) -> None:
        self._run = run
        self.span = span
        self._reports = reports
        self._terminal: ToolResult | ToolError | None = None
        self._end: ToolError | None = None  # the host's stop (Rule 2)

    @property
    def call_id(self) -> str:
        return self._run.ctx.call_id

    async def frames(self) -> AsyncGenerator[ToolCallProgressFrame[Any], None]:
        """The run's frames (Rule 1); its terminal is :attr:`terminal` after."""
        call_id = self._run.ctx.call_id
        try:
            async with self._run as run:
                async for event in run:
                    if isinstance(event, _TERMINALS):
                        self._terminal = event
                        continue
                    yield progress_to_frame(call_id, event)
        except BaseException:
            if self._end is None:
                self.abandon()
            raise

    def stop(self, error: ToolError) -> None:
        """The host cannot send a frame: the call ends with ``error`` (close
        :meth:`frames` next, which stops the tool)."""
        self._end = error

    @property
    def terminal(self) -> ToolResult | ToolError:
        """How the call ended (Rule 2)."""
        if self._end is not None:
            return self._end
        if self._terminal is None:  # pragma: no cover - the runner always ends with one
            self._terminal = _no_terminal()
        return self._terminal

    def end(
        self,
        terminal: ToolResult | ToolError | None = None,
        reports: list[LossReport] | None = None,
    ) -> None:
        """End the span with ``terminal`` (default :attr:`terminal`) and
        ``reports`` (default the span's own), once (Rule 3)."""
        span, self.span = self.span, None
        if span is not None:
            span.end(self.terminal if terminal is None else terminal, reports)

    def abandon(self) -> None:
        """The call was left before its end: its span ends ``cancelled`` (Rule 3)."""
        span, self.span = self.span, None
        if span is not None:
            span.end(_stopped(), None if self._reports is None else self._reports())
