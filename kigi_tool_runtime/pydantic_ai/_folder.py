"""``ToolOutputFolder``: the application side. Fold the ``kigi.tool_output``
events of a pydantic-ai run back into exact text, per tool call.

Invariants:

Rule 1. Each ``kigi.tool_output`` is absorbed as the ``tool_call_progress``
        notification the stdio transport would have carried (same frame, same
        ``seq``) by a ``Reassembler`` of its call's own, as the stdio
        ``Client`` folds a call: the text, the ``LossReport`` and the
        ``appended()`` events are the stdio client's.
Rule 2. The events arrive as pydantic-ai events (``run_stream_events``,
        ``event_stream_handler``, ``iter``) or as what a UI adapter forwarded
        (AG-UI ``CUSTOM`` name and value, Vercel AI ``data-kigi.tool_output``
        data): both fold the same. A payload that is not a kigi frame is
        reported by the reassembler, never taken for output.
Rule 3. Events that are not kigi's are left alone (:meth:`ToolOutputFolder.absorb`
        answers ``None``), and tool results of calls that streamed no kigi event
        are not recorded.
Rule 4. A call has ended once its ``kigi.tool_output_end`` or its tool result
        arrived; from then on its report counts every byte the last total
        names that no frame delivered as lost. Its text, report and
        ``complete`` are the call core's (``_call/_folded.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai import CustomEvent, FunctionToolResultEvent, RunContext
from pydantic_ai.messages import ToolReturnPart

from .._call._folded import ReassembledCall, call_reassembler, fold_frame
from .._call._limits import MAX_CALL_TEXT_BYTES
from .._consumer._reassembler import Appended, Reassembler
from ._events import OUTPUT_END_EVENT, OUTPUT_EVENT

__all__ = ("ToolOutputFolder",)

#: The most text a folder keeps per call when it keeps text, as the stdio
#: client does; past it the stream stops keeping text and says so.
MAX_FOLDED_TEXT_BYTES: Final = MAX_CALL_TEXT_BYTES


@dataclass(eq=False)
class FoldedToolCall(ReassembledCall):
    """One tool call folded on the application side.

    ``tool_call_id`` and ``tool_name`` are the pydantic-ai call's;
    ``reassembler`` folds its frames (``frames`` counts them); ``end`` is its
    ``kigi.tool_output_end`` payload and ``result`` its tool result part, once
    they arrived.
    """

    tool_call_id: str
    tool_name: str | None
    reassembler: Reassembler
    end: dict[str, Any] | None = None
    result: ToolReturnPart | None = None
    frames: int = 0

    @property
    def ended(self) -> bool:
        """Whether the call's output has ended (Rule 4)."""
        return self.end is not None or self.result is not None

    @property
    def closing(self) -> str:
        """What a text-only consumer appends after the last delta (the end's
        ``closing``; ``""`` before the end or when there is nothing to say)."""
        closing = (self.end or {}).get("closing")
        return closing if isinstance(closing, str) else ""

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The tool return's metadata: the kigi value and loss report (``None``
        before the result, or when the call failed)."""
        metadata = None if self.result is None else self.result.metadata
        return metadata if isinstance(metadata, dict) else None

    @property
    def value(self) -> Any:
        """The tool's value as JSON values (``None`` before the result, or
        when the call failed)."""
        return (self.metadata or {}).get("value")

    @property
    def failed(self) -> bool:
        """The call's result arrived and is not a success."""
        return self.result is not None and self.result.outcome != "success"


class ToolOutputFolder:
    """Fold the kigi events of pydantic-ai runs, per tool call (see the
    module's rules).

    Give :meth:`event_stream_handler` to ``agent.run(...,
    event_stream_handler=...)``, or feed each event of ``run_stream_events``
    or ``iter`` to :meth:`absorb`, and what a UI adapter forwarded to
    :meth:`absorb_custom`. ``keep_text``: keep each call's text (at most
    ``max_text_bytes``); ``on_appended`` hears each frame's
    :class:`Appended` event.
    """

    def __init__(
        self,
        *,
        keep_text: bool = True,
        max_text_bytes: int | None = MAX_FOLDED_TEXT_BYTES,
        on_appended: Callable[[Appended], None] | None = None,
    ) -> None:
        self.calls: dict[str, FoldedToolCall] = {}
        #: kigi events that named no tool call (nothing to fold them into).
        self.unattributed = 0
        self._keep_text = keep_text
        self._max_text = max_text_bytes if keep_text else None
        self._on_appended = on_appended

    def __getitem__(self, tool_call_id: str) -> FoldedToolCall:
        return self.calls[tool_call_id]

    def absorb(self, event: object) -> Appended | None:
        """Absorb one pydantic-ai event: a ``kigi.tool_output`` into its call's
        fold, answering what it added (Rule 1); a ``kigi.tool_output_end`` or
        a kigi call's tool result into its call (Rule 4); anything else is left
        alone and answered ``None`` (Rule 3). Never raises for bad input."""
        if isinstance(event, CustomEvent) and event.name in (OUTPUT_EVENT, OUTPUT_END_EVENT):
            payload = event.to_payload()
            if not isinstance(payload, Mapping):
                payload = {}
            return self._absorb(event.name, payload, event.tool_call_id, event.tool_name)
        if isinstance(event, FunctionToolResultEvent):
            call = self.calls.get(event.tool_call_id)
            if call is not None:
                call.result = event.part
        return None

    def absorb_custom(self, name: str, value: Any) -> Appended | None:
        """Absorb what a UI adapter forwarded (Rule 2): an AG-UI ``CUSTOM``
        event's ``name`` and ``value``, or a Vercel AI ``data-NAME`` part's
        name (``data-`` is dropped) and ``data``. Other names are left alone
        and answered ``None``."""
        name = name.removeprefix("data-")
        if name not in (OUTPUT_EVENT, OUTPUT_END_EVENT):
            return None
        payload = value if isinstance(value, Mapping) else {}
        return self._absorb(name, payload, None, None)

    async def event_stream_handler(self, ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
        """An ``event_stream_handler`` for ``agent.run``: absorbs every event."""
        async for event in events:
            self.absorb(event)

    def _absorb(
        self,
        name: str,
        payload: Mapping[str, Any],
        tool_call_id: str | None,
        tool_name: str | None,
    ) -> Appended | None:
        frame = payload.get("frame")
        call_id = tool_call_id or _text(payload.get("tool_call_id"))
        if call_id is None and isinstance(frame, Mapping):
            call_id = _text(frame.get("tool_call_id"))
        if call_id is None:
            self.unattributed += 1
            return None
        call = self._call(call_id, tool_name or _text(payload.get("tool_name")))
        if name == OUTPUT_END_EVENT:
            call.end = dict(payload)
            return None
        appended = fold_frame(call.reassembler, frame, payload.get("seq"))
        call.frames += 1
        if self._on_appended is not None:
            self._on_appended(appended)
        return appended

    def _call(self, tool_call_id: str, tool_name: str | None) -> FoldedToolCall:
        call = self.calls.get(tool_call_id)
        if call is None:
            reassembler = call_reassembler(
                tool_call_id, keep_text=self._keep_text, max_text_bytes=self._max_text
            )
            call = self.calls[tool_call_id] = FoldedToolCall(tool_call_id, tool_name, reassembler)
        elif call.tool_name is None:
            call.tool_name = tool_name
        return call


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
