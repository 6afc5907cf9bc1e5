"""``ToolEventFolder``: fold LangGraph ``tools`` events back into exact text with
a kigi ``Reassembler``, per ``tool_call_id`` (sans-IO).

Invariants:

Rule 1. A ``tool-output-delta`` whose delta is a :class:`LiveChunk` with a
        frame is absorbed as the frame the stdio transport would have carried
        (same frame, same ``seq``), so a call's text, loss report and
        ``appended()`` events are those of the stdio client for the same call.
Rule 2. A delta that is not one (an ordinary LangChain tool's, or a kigi delta
        that crossed a serializer and lost its frame) is kept as a note of its
        call, never taken for output; a kigi call's closing text is kept as its
        ``closing``, since the fold says the same from the frames.
Rule 3. Every form LangGraph streams the ``tools`` channel in is taken: the
        payload (``stream_mode="tools"``), a ``(mode, payload)`` or
        ``(namespace, mode, payload)`` tuple (several modes, subgraphs), a
        protocol event (``{"method": "tools", "params": {...}}``), and a v3
        ``ToolCallStream`` (:meth:`ToolEventFolder.fold_tool_call`). Anything
        else is counted in ``ignored``, never raised on.
Rule 4. A call ends at its ``tool-finished`` (whose ``ToolMessage`` artifact,
        when it reaches the fold, is kept) or ``tool-error`` (its message kept);
        its report is then final (``ended``). Its text, report and
        ``complete`` are the call core's (``_call/_folded.py``).

No I/O and no event loop: events in, folds out.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._call._folded import FoldedCall
from .._call._limits import MAX_CALL_TEXT_BYTES
from .._consumer._reassembler import Appended, Reassembler
from .._consumer._stream_state import StreamState
from ._mapping import LiveChunk, is_kigi_artifact

__all__ = ("ToolEventFolder",)

#: The most text a folded call keeps by default: the stdio client's
#: ``MAX_CALL_TEXT_BYTES`` (64 MiB).
MAX_TEXT_BYTES: Final = MAX_CALL_TEXT_BYTES

#: The events of LangGraph's ``tools`` channel.
TOOL_EVENTS: Final = frozenset({"tool-started", "tool-output-delta", "tool-finished", "tool-error"})


@dataclass(eq=False)
class FoldedToolCall(FoldedCall):
    """One tool call as the fold saw it.

    ``kigi`` is true once one of its deltas carried a kigi frame; ``notes``
    holds the deltas that did not (Rule 2); ``closing`` the kigi closing text;
    ``output`` the ``tool-finished`` output, ``artifact`` its kigi artifact
    (value and loss report) when it reached the fold; ``error`` the
    ``tool-error`` message; ``finished`` whether either arrived.
    """

    tool_call_id: str
    tool_name: str | None = None
    input: Any = None
    kigi: bool = False
    notes: list[Any] = field(default_factory=list)
    closing: str = ""
    output: Any = None
    artifact: Mapping[str, Any] | None = None
    error: str | None = None
    finished: bool = False
    _stream: StreamState | None = field(default=None, repr=False)

    @property
    def stream(self) -> StreamState | None:
        """The kigi stream folded for this call (``None``: no frame)."""
        return self._stream

    @property
    def ended(self) -> bool:
        """Whether its ``tool-finished`` or ``tool-error`` arrived (Rule 4)."""
        return self.finished

    @property
    def failed(self) -> bool:
        """Whether it ended with a ``tool-error``."""
        return self.error is not None


class ToolEventFolder:
    """Fold the ``tools`` events of LangGraph runs (see the module's rules).

    ``on_appended(call, appended)`` hears each kigi frame's
    :class:`Appended` event as it is absorbed; ``keep_text`` whether calls
    keep their text (at most ``max_text_bytes`` each, as the stdio client's).
    """

    def __init__(
        self,
        *,
        on_appended: Callable[[FoldedToolCall, Appended], None] | None = None,
        keep_text: bool = True,
        max_text_bytes: int | None = MAX_TEXT_BYTES,
    ) -> None:
        self.reassembler = Reassembler(
            keep_text=keep_text, max_text_bytes=max_text_bytes if keep_text else None
        )
        self._on_appended = on_appended
        self._calls: dict[str, FoldedToolCall] = {}
        #: Items that were not ``tools`` events (Rule 3).
        self.ignored = 0

    @property
    def calls(self) -> Mapping[str, FoldedToolCall]:
        """The calls seen, by ``tool_call_id``, in the order they started."""
        return dict(self._calls)

    def call(self, tool_call_id: str) -> FoldedToolCall | None:
        return self._calls.get(tool_call_id)

    def kigi_calls(self) -> list[FoldedToolCall]:
        """The calls that streamed kigi frames."""
        return [call for call in self._calls.values() if call.kigi]

    def absorb(self, item: Any) -> Appended | None:
        """Absorb one streamed item (Rule 3); returns the :class:`Appended` of a
        kigi frame, else ``None``."""
        payload = _tools_payload(item)
        if payload is None:
            self.ignored += 1
            return None
        event = payload["event"]
        call = self._call(payload["tool_call_id"])
        if event == "tool-started":
            call.tool_name = payload.get("tool_name")
            call.input = payload.get("input")
        elif event == "tool-output-delta":
            return self.absorb_delta(call.tool_call_id, payload.get("delta"))
        elif event == "tool-finished":
            self._finish(call, payload.get("output"))
        else:
            self._fail(call, payload.get("message"))
        return None

    def absorb_all(self, items: Iterable[Any]) -> ToolEventFolder:
        """Absorb every item of a (sync) stream; returns ``self``."""
        for item in items:
            self.absorb(item)
        return self

    async def aabsorb_all(self, items: AsyncIterable[Any]) -> ToolEventFolder:
        """Absorb every item of an async stream; returns ``self``."""
        async for item in items:
            self.absorb(item)
        return self

    def absorb_delta(self, tool_call_id: str, delta: Any) -> Appended | None:
        """Absorb one ``tool-output-delta`` of ``tool_call_id`` (Rules 1, 2)."""
        call = self._call(tool_call_id)
        if not isinstance(delta, LiveChunk):
            call.notes.append(delta)
            return None
        if delta.frame is None:
            call.closing += str(delta)
            return None
        appended = self.reassembler.appended(delta.frame, delta.seq)
        if not call.kigi:
            call.kigi = True
        if call._stream is None and appended.key is not None:
            call._stream = self.reassembler.streams.get(appended.key)
        if self._on_appended is not None:
            self._on_appended(call, appended)
        return appended

    def fold_tool_call(self, stream: Any) -> FoldedToolCall:
        """Fold one v3 ``ToolCallStream`` of a sync run (``run.tool_calls``):
        read its deltas to its end, then its output or error."""
        call = self._start(stream)
        for delta in stream.output_deltas:
            self.absorb_delta(call.tool_call_id, delta)
        return self._end(call, stream)

    async def afold_tool_call(self, stream: Any) -> FoldedToolCall:
        """:meth:`fold_tool_call` for a ``ToolCallStream`` of an async run."""
        call = self._start(stream)
        async for delta in stream.output_deltas:
            self.absorb_delta(call.tool_call_id, delta)
        return self._end(call, stream)

    def _start(self, stream: Any) -> FoldedToolCall:
        call = self._call(stream.tool_call_id)
        call.tool_name = stream.tool_name
        call.input = stream.input
        return call

    def _end(self, call: FoldedToolCall, stream: Any) -> FoldedToolCall:
        if stream.error is not None:
            self._fail(call, stream.error)
        else:
            self._finish(call, stream.output)
        return call

    def _call(self, tool_call_id: str) -> FoldedToolCall:
        call = self._calls.get(tool_call_id)
        if call is None:
            call = self._calls[tool_call_id] = FoldedToolCall(tool_call_id)
        return call

    def _finish(self, call: FoldedToolCall, output: Any) -> None:
        call.output = output
        found = _artifact_of(output)
        if is_kigi_artifact(found):
            call.artifact = found
        call.finished = True

    def _fail(self, call: FoldedToolCall, message: Any) -> None:
        call.error = message if isinstance(message, str) else str(message)
        call.finished = True


def _tools_payload(item: Any) -> Mapping[str, Any] | None:
    """The ``tools`` event payload ``item`` is or holds (Rule 3), else ``None``."""
    if isinstance(item, tuple) and item:
        *head, payload = item
        mode = head[-1] if len(head) >= 2 or (head and isinstance(head[-1], str)) else "tools"
        if mode != "tools":
            return None
        item = payload
    if not isinstance(item, Mapping):
        return None
    if item.get("method") == "tools" and isinstance(item.get("params"), Mapping):
        item = item["params"].get("data")
        if not isinstance(item, Mapping):
            return None
    if item.get("event") not in TOOL_EVENTS or not isinstance(item.get("tool_call_id"), str):
        return None
    return item


def _artifact_of(output: Any) -> Any:
    """The artifact of a ``tool-finished`` output: a ``ToolMessage``'s, or a
    serialized one's (``{"kwargs": {"artifact": ...}}``)."""
    found = getattr(output, "artifact", None)
    if found is None and isinstance(output, Mapping):
        kwargs = output.get("kwargs")
        found = kwargs.get("artifact") if isinstance(kwargs, Mapping) else output.get("artifact")
    return found
