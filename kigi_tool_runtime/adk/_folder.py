"""``AdkEventFolder``: the application side. Fold the events of an ADK run
back into exact text, per kigi tool call (sans-IO).

Invariants:

Rule 1. A partial event carrying a kigi frame in its ``custom_metadata`` is
        absorbed as the ``tool_call_progress`` notification the stdio
        transport would have carried (same frame, same ``seq``) by a
        ``Reassembler`` of its call's own: the text, the ``LossReport`` and the
        ``appended()`` events are the stdio client's.
Rule 2. A function response carrying the kigi figures (``_mapping`` Rule 3)
        ends its call (matched by the function call id); from then on its
        report counts every byte the last total names that no frame
        delivered as lost. The closing partial event (it names its call) is
        kept as the call's ``closing``.
Rule 3. Every other event is left alone (:meth:`AdkEventFolder.absorb` answers
        ``None``), never raised on; a frame that is not a kigi frame is
        reported by the reassembler, never taken for output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .._call._folded import ReassembledCall, call_reassembler, fold_frame
from .._call._limits import MAX_CALL_TEXT_BYTES
from .._consumer._reassembler import Appended, Reassembler
from ._keys import META_CLOSING, META_FRAME, META_SEQ, RESPONSE_KEY

__all__ = ("AdkEventFolder",)

#: The most text a folder keeps per call, as the stdio client does.
MAX_FOLDED_TEXT_BYTES: Final = MAX_CALL_TEXT_BYTES


@dataclass(eq=False)
class FoldedAdkCall(ReassembledCall):
    """One kigi tool call of an ADK run, folded.

    ``call_id`` is the ADK function call's id; ``reassembler`` folds its
    frames (``frames`` counts them); ``closing`` is the closing text, if any;
    ``response`` the function response, once it arrived.
    """

    call_id: str
    reassembler: Reassembler
    frames: int = 0
    closing: str = ""
    response: Mapping[str, Any] | None = None

    @property
    def ended(self) -> bool:
        """Whether the call's function response arrived."""
        return self.response is not None

    @property
    def failed(self) -> bool:
        """The call's response arrived and is an error."""
        return self.response is not None and "error" in self.response


class AdkEventFolder:
    """Fold the kigi events of ADK runs, per tool call (see the module's
    rules): feed each event of ``Runner.run_async`` to :meth:`absorb`.
    ``keep_text``: keep each call's text (at most ``max_text_bytes``);
    ``on_appended`` hears each frame's :class:`Appended` event."""

    def __init__(
        self,
        *,
        keep_text: bool = True,
        max_text_bytes: int | None = MAX_FOLDED_TEXT_BYTES,
        on_appended: Callable[[Appended], None] | None = None,
    ) -> None:
        self.calls: dict[str, FoldedAdkCall] = {}
        self._keep_text = keep_text
        self._max_text = max_text_bytes if keep_text else None
        self._on_appended = on_appended

    def __getitem__(self, call_id: str) -> FoldedAdkCall:
        return self.calls[call_id]

    def absorb(self, event: Any) -> Appended | None:
        """Absorb one ADK event (Rules 1-3): answers what a frame added, else
        ``None``. Never raises for bad input."""
        metadata = getattr(event, "custom_metadata", None)
        if isinstance(metadata, Mapping):
            frame = metadata.get(META_FRAME)
            if isinstance(frame, Mapping):
                return self._frame(frame, metadata.get(META_SEQ))
            closing = metadata.get(META_CLOSING)
            if isinstance(closing, str) and closing:
                self._call(closing).closing = _text_of(event)
                return None
        for response in _function_responses(event):
            figures = response.get(RESPONSE_KEY) if isinstance(response, Mapping) else None
            call_id = figures.get("call_id") if isinstance(figures, Mapping) else None
            if isinstance(call_id, str) and call_id:
                self._call(call_id).response = response
        return None

    def _frame(self, frame: Mapping[str, Any], seq: Any) -> Appended | None:
        call_id = frame.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            return None
        call = self._call(call_id)
        appended = fold_frame(call.reassembler, dict(frame), seq)
        call.frames += 1
        if self._on_appended is not None:
            self._on_appended(appended)
        return appended

    def _call(self, call_id: str) -> FoldedAdkCall:
        call = self.calls.get(call_id)
        if call is None:
            reassembler = call_reassembler(
                call_id, keep_text=self._keep_text, max_text_bytes=self._max_text
            )
            call = self.calls[call_id] = FoldedAdkCall(call_id, reassembler)
        return call


def _text_of(event: Any) -> str:
    content = getattr(event, "content", None)
    parts = getattr(content, "parts", None) or []
    return "".join(getattr(part, "text", None) or "" for part in parts)


def _function_responses(event: Any) -> list[Any]:
    content = getattr(event, "content", None)
    parts = getattr(content, "parts", None) or []
    found = []
    for part in parts:
        response = getattr(part, "function_response", None)
        if response is not None:
            found.append(getattr(response, "response", None))
    return found
