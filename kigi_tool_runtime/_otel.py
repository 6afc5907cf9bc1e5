"""OpenTelemetry, when it is installed (the ``otel`` extra: ``opentelemetry-api``
alone): the one module that imports it.

Invariants:

Rule 1. Without ``opentelemetry-api`` nothing is imported (one failed import,
        remembered) and a call costs one test of a module global. With it but
        no SDK configured (or a sampler that drops the call), the span does
        not record and the call core does no accounting for it.
Rule 2. A span's parent is the trace context the call arrived with (a W3C
        ``traceparent`` and ``tracestate``: the stdio request's
        ``trace_context``, MCP ``_meta``, NATS headers) when it is valid, else
        whatever span is current (an in-process host: LangGraph, pydantic-ai,
        ACP). A caller puts its current context on the wire
        (:func:`current_carrier`), so its span is the worker's parent.
Rule 3. The span's attributes and events are :mod:`._call._trace`'s; a call
        that failed ends with the span's status ``ERROR`` and ``error.type``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Final

from ._call._trace import (
    GAP_EVENT,
    CallTrace,
    end_attributes,
    gap_events,
    span_name,
    start_attributes,
)
from ._consumer._loss import LossReport
from ._tools._errors import ToolError
from ._tools._result import ToolResult

__all__ = ()

#: The instrumentation scope of every span.
SCOPE: Final = "kigi_tool_runtime"

#: The trace context headers (W3C Trace Context) a carrier may hold.
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

# The tracer (a proxy until an SDK is configured), False when OpenTelemetry
# is not installed, None before the first look (Rule 1).
_tracer: Any = None


def _get_tracer() -> Any:
    global _tracer
    if _tracer is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = False
        else:
            _tracer = trace.get_tracer(SCOPE)
    return _tracer or None


def carrier_of(values: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``traceparent`` and ``tracestate`` strings among ``values`` (MCP
    ``_meta``, NATS headers), nothing else."""
    if not values:
        return {}
    return {
        key: value
        for key in (TRACEPARENT, TRACESTATE)
        if isinstance(value := values.get(key), str) and value
    }


def current_carrier() -> dict[str, str]:
    """The current trace context as ``traceparent`` (and ``tracestate``), for a
    caller to send with a call; empty without OpenTelemetry or a valid span."""
    if _get_tracer() is None:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier


class CallSpan:
    """One call's recording span, its :class:`CallTrace`, and the context it
    made current (if it was asked to)."""

    __slots__ = ("_span", "_token", "trace")

    def __init__(self, span: Any, trace: CallTrace, token: Any) -> None:
        self._span = span
        self._token = token
        self.trace = trace

    def end(
        self,
        terminal: ToolResult | ToolError,
        reports: list[LossReport] | None = None,
    ) -> None:
        """End the span with the call's outcome and output figures (Rule 3);
        ``reports``: the host's own loss reports (default: the trace's)."""
        trace = self.trace
        if reports is None:
            trace.flush()
            reports = trace.reports()
        span = self._span
        try:
            span.set_attributes(
                end_attributes(terminal, reports, frames_dropped=trace.frames_dropped)
            )
            for event in gap_events(reports):
                span.add_event(GAP_EVENT, event)
            if isinstance(terminal, ToolError):
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, terminal.message))
        finally:
            span.end()
            self.detach()

    def detach(self) -> None:
        """Stop making the span current (idempotent)."""
        token, self._token = self._token, None
        if token is not None:
            from opentelemetry import context

            with contextlib.suppress(Exception):  # another context (a task's copy)
                context.detach(token)


def start_call_span(
    tool_id: str,
    call_id: str,
    carrier: Mapping[str, Any] | None = None,
    *,
    make_current: bool = False,
) -> CallSpan | None:
    """Start the span of a call of ``tool_id`` (Rule 2); ``None`` when
    OpenTelemetry is not installed or the span does not record (Rule 1).
    ``make_current``: the tool's own spans nest under it (detached at
    :meth:`CallSpan.end`)."""
    tracer = _get_tracer()
    if tracer is None:
        return None
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = None
    found = carrier_of(carrier)
    if found:
        extracted = TraceContextTextMapPropagator().extract(found)
        if trace.get_current_span(extracted).get_span_context().is_valid:
            parent = extracted
    span = tracer.start_span(
        span_name(tool_id),
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=start_attributes(tool_id, call_id),
    )
    if not span.is_recording():
        span.end()
        return None
    token = context.attach(trace.set_span_in_context(span)) if make_current else None
    return CallSpan(span, CallTrace(call_id), token)
