"""How a served call ended, as every host says it: the model's text, the value,
the error and the loss report (sans-IO).

Invariants:

Rule 1. The model reads one text per call (:func:`result_text`,
        :func:`model_text`, :func:`error_text`): a shell outcome's output
        excerpt (head, omission marker, tail) and its exit status; the excerpt
        of what a tool wrote to its ``Output``, then its value's text unless
        the value is ``None``; a string as is; any other value as JSON; an
        error as ``"KIND error (CODE): message"``. Never a traceback.
Rule 2. When the live output lost bytes, or the host dropped frames of it,
        the model's text ends with one line saying both (:func:`loss_line`):
        a host's model is never told an output was whole when its live text
        had a hole, and every host says it in the same words.
Rule 3. :meth:`CallEnd.loss_json` is the loss report as JSON values, for a
        host's artifact or metadata: ``complete`` is false whenever anything
        was lost, and every gap says where it was and how many bytes it lost.
Rule 4. :class:`CallEnd` is the only end of a call, whatever serves it (the
        stdio server, the MCP server, the NATS worker, the in-process hosts):
        each builds it with :meth:`CallEnd.of` and sends what it says; a host
        that cannot send a result (too large for its wire, not encodable)
        ends the call with :meth:`CallEnd.failed`, the same loss said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from .._consumer._loss import LossReport
from .._text import plural
from .._tools._errors import ToolError, ToolErrorKind
from .._tools._result import ToolResult
from .._tools._shell_outcome import ShellOutcome

__all__ = ("CallEnd",)


def model_text(value: Any) -> str:
    """The text a model reads for a tool's value (Rule 1).

    Raises:
        ValueError: the value holds something JSON cannot carry (a string with
            a lone surrogate among them: ``UnicodeEncodeError`` is one).
    """
    if isinstance(value, ShellOutcome):
        if value.signal is not None:
            status = f"killed by {value.signal}"
        else:
            status = f"exit code {value.exit_code}"
        if value.timed_out:
            status += ", timed out"
        detail = f"{value.total_bytes} bytes of output"
        if value.omitted_bytes:
            detail += f", {value.omitted_bytes} left out above"
        return f"{value.output}\n[{status}; {detail}; {value.duration_ms} ms]"
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate is no text a host can send
        return value
    return msgspec.json.encode(value).decode("utf-8")


def result_text(result: ToolResult) -> str:
    """The text a model reads for a result (Rule 1): its value's text, after
    the excerpt of the output the tool wrote when it wrote any (a ``None``
    value then adds nothing).

    Raises:
        ValueError: as :func:`model_text`.
    """
    output = result.output
    if not output:
        return model_text(result.value)
    if result.value is None:
        return output
    between = "" if output.endswith("\n") else "\n"
    return f"{output}{between}{model_text(result.value)}"


def error_text(error: ToolError, tool_id: str | None = None) -> str:
    """The text a model reads for a failed call (Rule 1); ``tool_id`` names
    the tool when the error does not yet."""
    if tool_id is not None:
        error = error.with_tool_id(tool_id)
    return f"{error.kind.value} error ({error.code}): {error.message}"


def _lost(report: LossReport) -> str:
    low, high = report.lost_bytes_min, report.lost_bytes
    high += report.unseen_bytes
    low += report.unseen_bytes
    return plural(high, "byte", "bytes") if low == high else f"{low}-{high} bytes"


def loss_line(report: LossReport | None, dropped: int = 0) -> str | None:
    """One line for the model when the live output lost bytes, or the host
    dropped ``dropped`` frames of it, saying both (Rule 2); else ``None``.

    Raises:
        ValueError: ``dropped`` is negative.
    """
    if dropped < 0:
        raise ValueError(f"dropped must be >= 0 frames, got {dropped}")
    parts = []
    if report is not None and not report.complete:
        if report.gaps or report.unseen_bytes:
            gaps = plural(len(report.gaps), "gap", "gaps")
            parts.append(f"the live output lost {_lost(report)} ({gaps})")
        if report.truncated:
            parts.append("it was truncated at the output limit")
        if report.anomalies:
            parts.append(plural(len(report.anomalies), "frame anomaly", "frame anomalies"))
        if not parts:
            parts.append("the live output was not complete")
    if dropped:
        parts.append(f"{dropped} progress frame(s) were dropped because the host read too slowly")
    return f"[kigi: {'; '.join(parts)}]" if parts else None


def loss_json(report: LossReport | None) -> dict[str, Any]:
    """The loss report as JSON values (Rule 3); a call without frames is
    complete with nothing streamed."""
    if report is None:
        return {
            "complete": True,
            "frames": 0,
            "total_bytes": None,
            "delivered_bytes": 0,
            "lost_bytes": {"min": 0, "max": 0},
            "gaps": [],
            "truncated": False,
            "undelivered_bytes": 0,
            "anomalies": [],
        }
    return {
        "complete": report.complete,
        "frames": report.frames,
        "total_bytes": report.total_bytes,
        "delivered_bytes": report.text_bytes,
        "lost_bytes": {"min": report.lost_bytes_min, "max": report.lost_bytes},
        "gaps": [
            {
                "at_char": gap.offset,
                "frame": gap.index,
                "total_bytes": gap.total_bytes,
                "lost_min": gap.lost_bytes_min,
                "lost_max": gap.lost_bytes,
                "inferred": gap.inferred,
            }
            for gap in report.gaps
        ],
        "truncated": report.truncated,
        "undelivered_bytes": report.unseen_bytes,
        "anomalies": [
            {"kind": anomaly.kind, "frame": anomaly.index, "detail": anomaly.detail}
            for anomaly in report.anomalies
        ],
    }


@dataclass(frozen=True, slots=True)
class CallEnd:
    """How one served call ended.

    ``terminal`` is the run's terminal; ``ok`` whether it is a result;
    ``value`` / ``error`` the result's value or the error (the other
    ``None``); ``text`` the model's text (Rules 1, 2); ``closing`` the text a
    text-only host appends after the last delta (``LiveText.finish``);
    ``report`` the output stream's loss report (``None``: no frame);
    ``frames`` how many frames the call streamed; ``dropped`` how many of them
    the host dropped for a reader that stopped taking them.
    """

    call_id: str
    tool_id: str
    terminal: ToolResult | ToolError
    text: str
    closing: str
    report: LossReport | None
    frames: int
    dropped: int = 0

    @classmethod
    def of(
        cls,
        call_id: str,
        tool_id: str,
        terminal: ToolResult | ToolError,
        report: LossReport | None,
        *,
        frames: int,
        dropped: int = 0,
        closing: str = "",
    ) -> CallEnd:
        """The end of a call whose run ended with ``terminal`` (Rule 4). A
        result whose value JSON cannot carry ends the call with an
        ``internal_error`` (the tool broke its contract), never with an
        exception out of the host.

        Raises:
            ValueError: ``dropped`` is negative.
        """
        if isinstance(terminal, ToolResult):
            try:
                text = result_text(terminal)
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                terminal = ToolError(
                    ToolErrorKind.INTERNAL_ERROR,
                    f"the tool's result cannot be sent as JSON: {exc}",
                    tool_id=tool_id,
                )
        if isinstance(terminal, ToolError):
            terminal = terminal.with_tool_id(tool_id)  # a copy when it named none
            text = error_text(terminal)
        line = loss_line(report, dropped)
        if line is not None:
            text = f"{text}\n{line}"
        return cls(call_id, tool_id, terminal, text, closing, report, frames, dropped)

    def failed(self, error: ToolError) -> CallEnd:
        """This call ended with ``error`` instead: its host could not send the
        end it had (Rule 4); the output's loss is said as before."""
        return CallEnd.of(
            self.call_id,
            self.tool_id,
            error,
            self.report,
            frames=self.frames,
            dropped=self.dropped,
            closing=self.closing,
        )

    @property
    def ok(self) -> bool:
        return isinstance(self.terminal, ToolResult)

    @property
    def value(self) -> Any:
        return self.terminal.value if isinstance(self.terminal, ToolResult) else None

    @property
    def error(self) -> ToolError | None:
        return self.terminal if isinstance(self.terminal, ToolError) else None

    @property
    def complete(self) -> bool:
        """Nothing of the live output was lost."""
        return self.report is None or self.report.complete

    def loss_json(self) -> dict[str, Any]:
        """The loss report as JSON values (Rule 3)."""
        return loss_json(self.report)
