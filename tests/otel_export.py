"""A test-only span exporter for child processes, loaded by ``kigi-stream serve
--tools otel_export.py:TOOLS``: when ``$KIGI_TEST_SPANS`` names a file, every
span the child ends is appended to it as one JSON line (name, ids, parent,
attributes, events), so a test can read the worker's spans. TOOLS is the
shell tool and a tool that streams with a gap."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_runtime import OutputStream, ShellTool, Tool, ToolContext, ToolResult


def span_json(span: ReadableSpan) -> dict[str, Any]:
    """The parts of a span the tests look at, as JSON values."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "status": span.status.status_code.name,
    }


class FileExporter(SpanExporter):
    """Append each span as a JSON line to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


if os.environ.get("KIGI_TEST_SPANS"):
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["KIGI_TEST_SPANS"])))
    trace.set_tracer_provider(_provider)


SPEC = StreamingSpec(subkind="gappy_chunk", max_delta_bytes=8)


class GappyArgs(msgspec.Struct):
    pass


class Gappy(Tool[GappyArgs]):
    """Writes 8 bytes, then 104 more into an 8-byte tail: one gap of 100."""

    id = "gappy"
    args_type = GappyArgs
    capabilities = ToolCapabilities(streaming=SPEC)

    async def execute(self, ctx: ToolContext, args: GappyArgs) -> Any:
        stream = OutputStream(SPEC, capacity=8)
        stream.write(b"01234567")
        for frame in stream.drain():
            yield frame
        stream.write(b"x" * 100)
        stream.write(b"tail")
        for frame in stream.drain():
            yield frame
        for frame in stream.finish():
            yield frame
        yield ToolResult(value="done")


TOOLS = [ShellTool(), Gappy()]
