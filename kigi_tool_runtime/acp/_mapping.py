"""The sans-IO mapping of one served call onto ACP tool-call updates.

A call's moments come from the served-call core (:class:`LiveDelta` per frame,
:class:`CallEnd` at the end); this module says which ``session/update`` each
one becomes for the client in front of it.

Invariants:

Rule 1. One call is one ACP tool call: a ``tool_call`` start (title, kind,
        status ``in_progress``; in the terminal modes a ``terminal`` content
        item and ``_meta.terminal_info``), updates while it runs, and one last
        ``tool_call_update`` with status ``completed`` or ``failed``, the model's
        text in its content, ``_meta.terminal_exit`` in the terminal modes and
        the loss report under ``_meta["dev.kigi/loss"]``. A command that exited
        non-zero, was killed or timed out, and every error (a cancel too), is
        ``failed``.
Rule 2. The live text (the core's ``LiveDelta.text``: delta, and a marker line
        wherever bytes were lost) travels as the client declared
        (:class:`LiveOutput`): appended, one update per frame
        (``_meta.terminal_output_delta``); or as a replacement, the retained
        tail (``_meta.terminal_output``, after :data:`TERMINAL_REDRAW`); or,
        for a client that declared neither, as the text of the call's
        ``content``. A client that declared both gets appends, and after a
        frame that showed a loss a replacement: in place of that frame's append
        when the pacer allows, else in place of the first later one it allows,
        at the end at the latest (the appends before it carry their markers).
Rule 3. Nothing is lost silently. An append carries the marker itself. A
        replacement is the last :data:`DEFAULT_TAIL_BYTES` of the live text cut
        between characters, and when markers that were never shown fell out of
        it before it was sent, it opens with one marker line counting their
        bytes together. A client that replaces gets a last replacement at the
        end (the closing markers included).
Rule 4. Replacements are paced (:class:`Pacing`): one is sent only when
        ``interval`` has passed since the last one and either the text appended
        since is at least ``1/ratio`` of its size or ``idle`` has passed. So a
        call sends at most ``ratio`` bytes of replacement text (the redraw
        aside) per byte of live text, plus one tail per ``idle`` seconds, plus
        the last replacement:
        ``ratio * L + tail_bytes * (seconds / idle + 2)`` for ``L`` bytes of live
        text; never O(L²). Appends are the live text once.
Rule 5. Every update that carries live text carries kigi's figures under
        ``_meta["dev.kigi/live"]``: the frame's ``seq`` and ``total_bytes``, and
        the live-text byte offsets its text spans (``offset``, ``end``); one
        made for a frame carries the exact kigi frame under
        ``_meta["dev.kigi/frame"]``, so a client that declared appends has
        every frame and can fold them itself.

No I/O and no event loop, and not the SDK either (its package loads its
connections): updates are the JSON the SDK's models validate, and the caller
passes the clock (``now``, in seconds).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from .._call._heartbeat import Beat
from .._call._live import LOSS_MARKER, LiveDelta
from .._call._outcome import CallEnd
from .._tools._shell_outcome import ShellOutcome

__all__ = ("LiveOutput", "Pacing")

#: ``_meta`` keys of the terminal convention Zed's Claude and Codex adapters use.
TERMINAL_INFO: Final = "terminal_info"
TERMINAL_OUTPUT: Final = "terminal_output"
TERMINAL_OUTPUT_DELTA: Final = "terminal_output_delta"
TERMINAL_EXIT: Final = "terminal_exit"
#: What a replacement under ``terminal_output`` opens with: cursor home, clear
#: the screen and the scrollback (what ``clear`` prints). Zed writes that
#: key's data into a terminal emulator as it comes; these make the write a
#: replacement there, and a client that replaces the text itself and renders
#: ANSI shows the same.
TERMINAL_REDRAW: Final = "\x1b[H\x1b[2J\x1b[3J"
#: ``_meta`` key of kigi's figures for the live text an update carries (Rule 5).
META_LIVE: Final = "dev.kigi/live"
#: ``_meta`` key of the exact kigi frame an append carries (the MCP host's key).
META_FRAME: Final = "dev.kigi/frame"
#: ``_meta`` key of the last update's loss report (``CallEnd.loss_json``).
META_LOSS: Final = "dev.kigi/loss"
#: ``_meta`` key of a heartbeat update: the seconds a silent call has run and
#: been silent, and a sentence saying so (the MCP host's key).
META_HEARTBEAT: Final = "dev.kigi/heartbeat"

#: The live text a replacement holds: 32 KiB, two default shell frames, small
#: enough that one update stays well under the 64 KiB line a default asyncio
#: reader takes; a marker line fits beside the largest frame it may follow.
DEFAULT_TAIL_BYTES: Final = 32 * 1024
#: Room beside one frame's delta for the marker line(s) before it.
_MARKER_ROOM: Final = 1024
#: The most bytes one frame's delta holds above its cap (one whole character).
_CHAR_BYTES: Final = 4

#: One ``session/update``'s ``update``: the JSON of the SDK's ``ToolCallStart``
#: or ``ToolCallProgress``.
Update = dict[str, Any]

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]


class LiveOutput(enum.Enum):
    """How a client takes a call's live output (Rule 2), from what it
    declared in ``clientCapabilities._meta``."""

    #: ``terminal_output_delta`` and ``terminal_output``: appends, and a
    #: replacement to resynchronise after a loss.
    APPEND_AND_REPLACE = "append_and_replace"
    #: ``terminal_output_delta`` only: appends, markers inline.
    APPEND = "append"
    #: ``terminal_output`` only: paced replacements of the retained tail.
    REPLACE = "replace"
    #: Neither: plain v1 ``content`` updates, the retained tail, paced.
    CONTENT = "content"

    @classmethod
    def of(cls, capabilities: object) -> LiveOutput:
        """The mode a client's capabilities declare: the SDK's
        ``ClientCapabilities``, its JSON, or ``None`` (it declared none).

        Raises:
            TypeError: ``capabilities`` is none of those.
        """
        if capabilities is None:
            meta: Any = None
        elif isinstance(capabilities, Mapping):
            meta = capabilities.get("_meta")
        elif hasattr(capabilities, "field_meta"):  # the SDK's model
            meta = capabilities.field_meta
        else:
            raise TypeError(
                "capabilities must be ClientCapabilities, a mapping or None,"
                f" not {type(capabilities).__name__}"
            )
        if not isinstance(meta, Mapping):
            meta = {}
        append = meta.get(TERMINAL_OUTPUT_DELTA) is True
        replace = meta.get(TERMINAL_OUTPUT) is True
        if append:
            return cls.APPEND_AND_REPLACE if replace else cls.APPEND
        return cls.REPLACE if replace else cls.CONTENT

    @property
    def terminal(self) -> bool:
        """Whether the client shows the call as a terminal (``_meta`` convention)."""
        return self is not LiveOutput.CONTENT

    @property
    def appends(self) -> bool:
        return self in (LiveOutput.APPEND, LiveOutput.APPEND_AND_REPLACE)


@dataclass(frozen=True, slots=True)
class Pacing:
    """How often a replacement may be sent (Rule 4).

    ``interval``: the least time between two (0.2 s: five a second is live
    enough for a person); ``ratio``: a replacement is due once the text
    appended since the last one is ``1/ratio`` of its size (4: at most 4 bytes
    sent per byte of output); ``idle``: or once this long has passed with
    anything new (2 s: a slow trickle past a full tail still shows).

    Raises:
        ValueError: a figure is not positive, or ``idle`` is below ``interval``.
    """

    interval: float = 0.2
    ratio: int = 4
    idle: float = 2.0

    def __post_init__(self) -> None:
        if not self.interval > 0 or not self.idle > 0 or self.ratio < 1:
            raise ValueError(f"pacing figures must be positive, got {self}")
        if self.idle < self.interval:
            raise ValueError(f"idle {self.idle} s is below interval {self.interval} s")

    def due(self, *, since: float | None, new_bytes: int, size: int) -> bool:
        """Whether a replacement of ``size`` bytes, ``new_bytes`` of them new,
        may go now, ``since`` seconds after the last (``None``: none yet)."""
        if new_bytes <= 0:
            return False
        if since is None:
            return True
        if since < self.interval:
            return False
        return new_bytes * self.ratio >= size or since >= self.idle


class _Piece:
    __slots__ = ("data", "gap", "start")

    def __init__(self, start: int, data: bytes, gap: tuple[int, int] | None) -> None:
        self.start = start
        self.data = data
        self.gap = gap


class TextTail:
    """The last ``limit`` bytes of a live text, cut only between characters,
    and the losses its markers said that fell out of it unseen (Rule 3).

    Raises:
        ValueError: ``limit`` is below 1.
    """

    __slots__ = ("_hidden", "_limit", "_pieces", "_shown", "_size", "_total")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._limit = limit
        self._pieces: deque[_Piece] = deque()
        self._size = 0
        self._total = 0
        self._shown = 0
        self._hidden: tuple[int, int] | None = None

    @property
    def total(self) -> int:
        """Bytes of live text appended so far."""
        return self._total

    @property
    def start(self) -> int:
        """The live-text byte offset the retained tail starts at."""
        return self._total - self._size

    @property
    def hidden(self) -> tuple[int, int] | None:
        """The (least, most) bytes lost at markers that fell out unseen."""
        return self._hidden

    def append(self, text: str, *, gap: tuple[int, int] | None = None) -> None:
        """Add ``text``; ``gap``: it is a marker line, for that many bytes lost."""
        data = text.encode("utf-8")
        if not data:
            return
        self._pieces.append(_Piece(self._total, data, gap))
        self._size += len(data)
        self._total += len(data)
        self._trim()

    def shown(self) -> None:
        """Everything appended so far reached the client (an append)."""
        self._shown = self._total

    def snapshot(self) -> str:
        """The replacement text: the marker line for losses that fell out
        unseen, then the tail; everything in it counts as shown."""
        head = ""
        if self._hidden is not None:
            low, high = self._hidden
            lost = str(high) if low == high else f"{low}-{high}"
            head = LOSS_MARKER.format(lost=lost) + "\n"
            self._hidden = None
        self._shown = self._total
        return head + b"".join(piece.data for piece in self._pieces).decode("utf-8")

    def _trim(self) -> None:
        while self._size > self._limit:
            first = self._pieces[0]
            excess = self._size - self._limit
            if first.gap is not None or excess >= len(first.data):
                # A marker goes whole or not at all.
                self._pieces.popleft()
                self._size -= len(first.data)
                if first.gap is not None and first.start >= self._shown:
                    self._hide(first.gap)
                continue
            cut = excess
            while cut < len(first.data) and first.data[cut] & 0xC0 == 0x80:
                cut += 1
            first.data = first.data[cut:]
            first.start += cut
            self._size -= cut

    def _hide(self, gap: tuple[int, int]) -> None:
        low, high = self._hidden or (0, 0)
        self._hidden = (low + gap[0], high + gap[1])


def _json(value: Any) -> Any:
    try:
        return msgspec.to_builtins(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return repr(value)


class ToolCallMapper:
    """One call's ACP updates (see the module's rules).

    ``tool_call_id`` is the call's id (its terminal id too); ``output`` how the
    client takes live output; ``tail_bytes`` the replacement's size;
    ``max_delta_bytes`` the tool's cap, which a replacement must hold beside
    its marker.

    Raises:
        ValueError: ``tail_bytes`` cannot hold one frame and its marker.
    """

    __slots__ = (
        "_last_replace",
        "_output",
        "_pacing",
        "_replaced_at",
        "_resync",
        "_tail",
        "_tool_call_id",
        "sent_bytes",
        "updates",
    )

    def __init__(
        self,
        tool_call_id: str,
        output: LiveOutput,
        *,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        max_delta_bytes: int = 0,
        pacing: Pacing | None = None,
    ) -> None:
        need = max_delta_bytes + _CHAR_BYTES + _MARKER_ROOM
        if tail_bytes < need:
            raise ValueError(
                f"tail_bytes {tail_bytes} cannot hold a {max_delta_bytes}-byte frame and its"
                f" marker: give at least {need}"
            )
        self._tool_call_id = tool_call_id
        self._output = output
        self._pacing = pacing or Pacing()
        self._tail = TextTail(tail_bytes)
        self._last_replace: float | None = None
        self._replaced_at = 0
        self._resync = False
        #: Updates made so far, and bytes of live text they carried.
        self.updates = 0
        self.sent_bytes = 0

    @property
    def output(self) -> LiveOutput:
        return self._output

    @property
    def tail(self) -> TextTail:
        return self._tail

    def start(self, title: str, kind: ToolKind, raw_input: Any) -> Update:
        """The ``tool_call`` that opens the call (Rule 1)."""
        self.updates += 1
        update: Update = {
            "sessionUpdate": "tool_call",
            "toolCallId": self._tool_call_id,
            "title": title,
            "kind": kind,
            "status": "in_progress",
            "rawInput": _json(raw_input),
        }
        if self._output.terminal:
            update["content"] = [self._terminal()]
            update["_meta"] = {TERMINAL_INFO: {"terminal_id": self._tool_call_id}}
        return update

    def heartbeat(self, beat: Beat) -> Update:
        """The update of a heartbeat: the call is still in progress, and
        ``_meta[META_HEARTBEAT]`` says for how long it has run and been silent;
        its content is left as it is."""
        self.updates += 1
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self._tool_call_id,
            "status": "in_progress",
            "_meta": {
                META_HEARTBEAT: {
                    "elapsed_s": round(beat.elapsed_s, 3),
                    "silent_s": round(beat.silent_s, 3),
                    "text": beat.text(),
                }
            },
        }

    def frame(self, delta: LiveDelta, now: float) -> Update | None:
        """The update for one frame, ``None`` when none is due (Rules 2-5)."""
        offset = self._tail.total
        gap = delta.gap
        if delta.marker is not None and gap is not None:
            self._tail.append(delta.marker, gap=(gap.lost_bytes_min, gap.lost_bytes))
            self._tail.append(delta.delta)
        else:
            self._tail.append(delta.text)
        live = {
            "seq": delta.seq,
            "total_bytes": _total_bytes(delta),
            "gap": delta.marker is not None,
        }
        output = self._output
        if output is LiveOutput.APPEND_AND_REPLACE:
            self._resync = self._resync or delta.marker is not None
            if self._resync:
                update = self._replace(now, live, delta)
                if update is not None:
                    self._resync = False
                    return update
        if output.appends:
            if not delta.text:
                return None
            self._tail.shown()
            return self._append(delta.text, offset, live, delta)
        return self._replace(now, live, delta)

    def finish(self, end: CallEnd, now: float) -> list[Update]:
        """The closing update, if any, and the last one (Rules 1, 3)."""
        updates: list[Update] = []
        offset = self._tail.total
        self._tail.append(end.closing)
        live = {"seq": None, "total_bytes": None, "gap": False}
        replaces = self._output is LiveOutput.REPLACE or self._resync
        if replaces and self._tail.total > self._replaced_at:
            updates.append(self._replacement(now, live, None))
        elif self._output.appends and end.closing:
            self._tail.shown()
            updates.append(self._append(end.closing, offset, live, None))
        updates.append(self._last(end))
        return updates

    # -- the updates ---------------------------------------------------------------

    def _terminal(self) -> dict[str, Any]:
        return {"type": "terminal", "terminalId": self._tool_call_id}

    def _progress(self, meta: dict[str, Any], **fields: Any) -> Update:
        self.updates += 1
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self._tool_call_id,
            **fields,
            "_meta": meta,
        }

    def _append(
        self, text: str, offset: int, live: dict[str, Any], delta: LiveDelta | None
    ) -> Update:
        meta: dict[str, Any] = {
            TERMINAL_OUTPUT_DELTA: {"terminal_id": self._tool_call_id, "data": text},
            META_LIVE: {**live, "offset": offset, "end": self._tail.total},
        }
        if delta is not None:
            meta[META_FRAME] = _json(delta.frame)
        self.sent_bytes += len(text.encode("utf-8"))
        return self._progress(meta)

    def _replace(self, now: float, live: dict[str, Any], delta: LiveDelta) -> Update | None:
        since = None if self._last_replace is None else now - self._last_replace
        new_bytes = self._tail.total - self._replaced_at
        size = self._tail.total - self._tail.start
        if not self._pacing.due(since=since, new_bytes=new_bytes, size=size):
            return None
        return self._replacement(now, live, delta)

    def _replacement(self, now: float, live: dict[str, Any], delta: LiveDelta | None) -> Update:
        start = self._tail.start
        text = self._tail.snapshot()
        self._last_replace = now
        self._replaced_at = self._tail.total
        self.sent_bytes += len(text.encode("utf-8"))
        meta: dict[str, Any] = {META_LIVE: {**live, "offset": start, "end": self._tail.total}}
        if delta is not None:
            meta[META_FRAME] = _json(delta.frame)
        if self._output is LiveOutput.CONTENT:
            return self._progress(meta, content=[_text(text)])
        data = TERMINAL_REDRAW + text
        self.sent_bytes += len(TERMINAL_REDRAW)
        meta[TERMINAL_OUTPUT] = {"terminal_id": self._tool_call_id, "data": data}
        return self._progress(meta)

    def _last(self, end: CallEnd) -> Update:
        value = end.value
        failed = not end.ok or (
            isinstance(value, ShellOutcome)
            and (value.exit_code != 0 or value.signal is not None or value.timed_out)
        )
        meta: dict[str, Any] = {META_LOSS: end.loss_json()}
        content: list[dict[str, Any]] = [_text(end.text)]
        if self._output.terminal:
            content.insert(0, self._terminal())
            outcome = value if isinstance(value, ShellOutcome) else None
            meta[TERMINAL_EXIT] = {
                "terminal_id": self._tool_call_id,
                "exit_code": None if outcome is None else outcome.exit_code,
                "signal": None if outcome is None else outcome.signal,
            }
        error = end.error
        raw_output = (
            _json(value)
            if error is None
            else {"error": {"kind": error.kind.value, "code": error.code, "message": error.message}}
        )
        return self._progress(
            meta,
            status="failed" if failed else "completed",
            content=content,
            rawOutput=raw_output,
        )


def _text(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


def _total_bytes(delta: LiveDelta) -> int | None:
    total = getattr(delta.frame.body, "total_bytes", None)
    return total if isinstance(total, int) else None
