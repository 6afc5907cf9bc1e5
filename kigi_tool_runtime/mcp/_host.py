"""``ProgressFolder``: the host side. Fold MCP progress notifications that carry
kigi frames back into exact text with a ``Reassembler``.

Invariants:

Rule 1. A progress notification with a kigi frame under ``_meta`` is absorbed as
        the ``tool_call_progress`` notification the stdio transport would have
        carried (same frame, same ``seq``), so the text, the loss report and the
        ``appended()`` events are those of the stdio transport.
Rule 2. A progress notification without one (an ordinary MCP server's) is kept
        as a :class:`ProgressNote`, never taken for output.
Rule 3. The official client runs each notification's handler in a task of its
        own, so a result can overtake the last notifications of its call. A
        result says how many notifications its call sent; :meth:`ProgressFolder.settle`
        waits (bounded) until that many were absorbed, and a call that still
        misses some reports them (``missing``) and is not complete.
Rule 4. SEP-2998 partial results (``_partial``) fold the same way: a partial
        result's kigi frame is absorbed as its progress twin would be, so the
        text, loss report and events are the same whichever channel carried
        them; the final partial result (no frame) is kept as a note.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import anyio
import mcp_types as types
from mcp.client.extension import ClientExtension

from kigi_tool_protocol import JsonRpcNotification

from .._call._folded import is_complete
from .._consumer._loss import LossReport
from .._consumer._reassembler import Appended, Reassembler
from .._consumer._stream_state import StreamState
from ._mapping import META_STREAM, ProgressNote, notification_from_progress
from ._partial import TOKEN as PARTIAL_TOKEN
from ._partial import PartialNote, notification_from_partial
from ._partial_host import partial_results_extension

__all__ = ("FoldedCall", "ProgressFolder")

#: How long :meth:`ProgressFolder.settle` waits for notifications a result
#: overtook. They are already received and only wait for their task's turn, so
#: a moment is plenty; a host that lost them must not hang on them.
SETTLE_WAIT_S: Final = 2.0

_tokens = itertools.count(1)


class FoldedCall(NamedTuple):
    """One call folded on the host side: its result, its kigi call id (the
    progress token), its streams' state and loss reports, and how many of the
    notifications its result announced never arrived (``missing``)."""

    result: types.CallToolResult
    call_id: str
    streams: tuple[StreamState, ...]
    missing: int

    @property
    def text(self) -> str | None:
        """The streamed text of the call's first stream (``None``: none streamed)."""
        return self.streams[0].text if self.streams else None

    def reports(self) -> list[LossReport]:
        return [state.report() for state in self.streams]

    @property
    def complete(self) -> bool:
        """True when the call returned a result (not an error) and nothing was
        lost: every stream complete, nothing missing (``_call/_folded.py``
        Rule 3, the meaning every host's fold gives it)."""
        return is_complete(
            ended=True,
            failed=bool(self.result.is_error),
            reports=self.reports(),
            refused=self.missing > 0,
        )


class ProgressFolder:
    """Fold one MCP connection's progress into a :class:`Reassembler`.

    Hand :meth:`message_handler` to the official client
    (``Client(..., message_handler=folder.message_handler)``) and call tools
    with :meth:`call_tool`, or feed raw ``notifications/progress`` params to
    :meth:`absorb`. (The client's ``progress_callback`` receives only
    ``progress``, ``total`` and ``message``, no ``_meta``, so it cannot carry
    the frames; the message handler receives every notification whole.)
    ``on_appended`` hears each frame's :class:`Appended` event, ``on_note``
    each progress notification without a kigi frame.
    """

    def __init__(
        self,
        reassembler: Reassembler | None = None,
        *,
        on_appended: Callable[[Appended], None] | None = None,
        on_note: Callable[[ProgressNote], None] | None = None,
    ) -> None:
        self.reassembler = reassembler if reassembler is not None else Reassembler()
        self.notes: list[ProgressNote] = []
        self.partial_notes: list[PartialNote] = []
        self._on_appended = on_appended
        self._on_note = on_note
        self._seen: dict[str, int] = {}
        self._finals: set[str] = set()
        self._arrived = anyio.Event()

    def absorb(
        self, params: Mapping[str, Any] | types.ProgressNotificationParams
    ) -> Appended | ProgressNote:
        """Absorb one ``notifications/progress`` (its params): the kigi frame into
        the reassembler (Rule 1), or a note (Rule 2). Never raises for bad input:
        a bad frame is reported by the reassembler."""
        if isinstance(params, types.ProgressNotificationParams):
            params = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        item = notification_from_progress(params)
        if isinstance(item, ProgressNote):
            self.notes.append(item)
            if self._on_note is not None:
                self._on_note(item)
            return item
        return self._fold(item)

    def absorb_partial(self, params: Mapping[str, Any]) -> Appended | PartialNote:
        """Absorb one SEP-2998 partial result (its params, Rule 4): the kigi
        frame into the reassembler, exactly as from progress; the final one
        (and another server's) kept in :attr:`partial_notes`. Never raises for
        bad input."""
        item = notification_from_partial(params)
        if isinstance(item, PartialNote):
            self.partial_notes.append(item)
            if item.final and item.token is not None:
                self._finals.add(str(item.token))
                self._arrived.set()
            return item
        return self._fold(item)

    def extension(self) -> ClientExtension:
        """The official client's extension that feeds partial results to
        :meth:`absorb_partial` (``Client(..., extensions=[folder.extension()])``)."""

        def handler(params: Mapping[str, Any]) -> None:
            self.absorb_partial(params)

        return partial_results_extension(handler)

    def _fold(self, item: JsonRpcNotification[Any]) -> Appended:
        appended = self.reassembler.appended(item)
        call = _call_of(item)
        if call is not None:
            self._seen[call] = self._seen.get(call, 0) + 1
        self._arrived.set()
        if self._on_appended is not None:
            self._on_appended(appended)
        return appended

    async def message_handler(self, message: Any) -> None:
        """The official client's ``message_handler``: absorbs progress
        notifications and ignores everything else."""
        if isinstance(message, types.ProgressNotification):
            self.absorb(message.params)

    async def call_tool(
        self,
        client: Any,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        partial_results: bool = False,
    ) -> FoldedCall:
        """Call ``name`` through the official ``client`` with a progress token of
        this folder's making (the kigi call id), wait for its notifications
        (Rule 3), and return the folded call. ``partial_results``: ask for
        SEP-2998 partial results instead (a ``partialResultToken``; the client
        must declare them, see :func:`declaring_partial_results`, and carry
        :meth:`extension`)."""
        token = f"kigi-{next(_tokens)}"
        request_meta: dict[str, Any] = dict(meta or {})
        request_meta[PARTIAL_TOKEN if partial_results else "progressToken"] = token
        result = await client.call_tool(
            name, arguments, read_timeout_seconds=read_timeout_seconds, meta=request_meta
        )
        return await self.settle(token, result, final=partial_results)

    async def settle(
        self, call_id: str, result: types.CallToolResult, *, final: bool = False
    ) -> FoldedCall:
        """Wait up to :data:`SETTLE_WAIT_S` until the notifications ``result``
        announces for ``call_id`` were absorbed (Rule 3), and with ``final``
        its final partial result too; return the folded call."""
        expected = _announced(result)
        with anyio.move_on_after(SETTLE_WAIT_S):
            while self._seen.get(call_id, 0) < expected or (final and call_id not in self._finals):
                self._arrived = anyio.Event()
                await self._arrived.wait()
        missing = max(expected - self._seen.get(call_id, 0), 0)
        streams = tuple(
            state for key, state in self.reassembler.streams.items() if key.tool_call_id == call_id
        )
        return FoldedCall(result, call_id, streams, missing)


def _call_of(note: JsonRpcNotification[Any]) -> str | None:
    params = note.params
    call = params.get("tool_call_id") if isinstance(params, Mapping) else None
    return call if isinstance(call, str) else None


def _announced(result: types.CallToolResult) -> int:
    """How many progress notifications ``result`` says its call sent."""
    meta = result.meta or {}
    stream = meta.get(META_STREAM)
    sent = stream.get("frames_sent") if isinstance(stream, Mapping) else None
    return sent if isinstance(sent, int) and not isinstance(sent, bool) and sent >= 0 else 0
