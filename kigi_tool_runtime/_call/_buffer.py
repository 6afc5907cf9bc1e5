"""``CallBuffer``: the progress items of one call that its consumer has not
taken yet, bounded, with every item dropped past the bound told as a loss
(sans-IO: the stdio ``Client``'s ``Call`` puts frames in as they are read and
takes items out when its consumer asks; the waiting is the driver's).

Invariants:

Rule 1. Every frame put before the end is absorbed by the call's
        ``Reassembler`` at once, whether its item is later taken or dropped, so
        the reassembler's figures (and its text, when it keeps text) hold every
        frame. A frame put after the end is refused: not absorbed, not kept.
Rule 2. Items are taken in the order their frames were put, and the end after
        every item still held. At most ``bound`` items are held: putting one
        more drops the oldest held item first. The end is never dropped.
Rule 3. Each dropped item is told once in the loss report: one
        ``dropped_frames`` anomaly of its stream (``Reassembler.record_loss``),
        naming its record and bytes, so that report is not ``complete``; and
        :attr:`CallBuffer.frames_dropped` counts it.
Rule 4. A dropped item whose stream's text would have shown something (text
        bytes, or a gap of its own) is marked where it was: as an inferred
        ``Gap`` (at the item's offset in its stream's text, its bytes and own
        gap counted) on the next item of its stream, the oldest held one or,
        if none is held, the next one put. Losses that meet on one item join
        into one gap (offset of the first, record of the last, bytes summed),
        rendered before that item's own gap and text.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from kigi_tool_protocol import ToolCallProgressFrame

from .._consumer._loss import Gap, StreamKey
from .._consumer._reassembler import Appended, Reassembler
from .._wire._split import OversizedLine
from ._caller import CallProgress

# The stdio client's plumbing, not exported.
__all__: tuple[str, ...] = ()


class CallBuffer:
    """The untaken items of one call: at most ``bound`` of them (Rules 1-4).

    :meth:`put` each frame as it arrives, :meth:`end` the call once;
    :meth:`take` gives the next item, or ``None`` when none is held (the end,
    once :attr:`ended`).
    """

    __slots__ = ("_chars", "_items", "_lost", "bound", "ended", "frames_dropped", "reassembler")

    def __init__(self, reassembler: Reassembler, bound: int) -> None:
        if bound < 1:
            raise ValueError(f"a call buffer holds at least 1 item, got {bound}")
        self.reassembler = reassembler
        #: The most items held untaken (Rule 2).
        self.bound = bound
        # Held items with where each stands: (item, its text's offset in its
        # stream, its record index in the reassembler).
        self._items: deque[tuple[CallProgress, int, int]] = deque()
        self._chars: dict[StreamKey, int] = {}  # characters appended per stream
        self._lost: dict[StreamKey, Gap] = {}  # dropped, for the next item to mark
        #: Items dropped because the consumer fell behind (Rule 3).
        self.frames_dropped = 0
        #: Whether the call has ended (nothing more is put).
        self.ended = False

    def __len__(self) -> int:
        """How many items are held (the end not counted)."""
        return len(self._items)

    def __repr__(self) -> str:
        return (
            f"CallBuffer({len(self._items)} of {self.bound} items,"
            f" {self.frames_dropped} dropped, ended={self.ended})"
        )

    def put(self, frame: ToolCallProgressFrame[Any], seq: int | None) -> bool:
        """Absorb ``frame`` (envelope ``seq``) and hold its item, dropping the
        oldest past the bound (Rules 1, 2); whether it was taken (not after
        the end)."""
        if self.ended:
            return False
        reassembler = self.reassembler
        appended = reassembler.appended(frame, seq)
        index = reassembler.records - 1
        items = self._items
        if len(items) >= self.bound:
            self.frames_dropped += 1
            self._drop(*items.popleft())  # Rule 2: the oldest held item
        key = appended.key
        offset = 0
        if key is not None:
            chars = self._chars
            offset = chars.get(key, 0)
            text = appended.text
            if text:
                chars[key] = offset + len(text)
            # Dropped items wait to be marked only after a consumer fell behind.
            if self._lost:
                lost = self._lost.pop(key, None)
                if lost is not None:
                    appended = _marked(appended, lost)
        items.append((CallProgress(frame, seq, appended), offset, index))
        return True

    def refuse(self, size: int, limit: int) -> None:
        """A progress line of ``size`` bytes past its tool's declared ``limit``
        was not taken: the reassembler's report says so (its bytes show as lost
        where the totals prove it)."""
        self.reassembler.absorb_oversized(OversizedLine(size, limit))

    def end(self) -> bool:
        """The call ended: nothing more is put, and the end is taken after the
        items held (Rule 2); whether this ended it (only the first call does)."""
        if self.ended:
            return False
        self.ended = True
        return True

    def take(self) -> CallProgress | None:
        """The oldest held item, or ``None`` when none is held: then the end
        comes next if :attr:`ended`, else nothing has come yet."""
        items = self._items
        return items.popleft()[0] if items else None

    def _drop(self, item: CallProgress, offset: int, index: int) -> None:
        """Tell the loss of ``item`` in the report (Rule 3) and, on the next item
        of its stream, in the text (Rule 4)."""
        appended = item.appended
        key = appended.key
        text = appended.text or ""
        size = len(text.encode("utf-8", "surrogatepass"))
        replaced = text.count("\ufffd")  # each stands for 1 to 3 source bytes
        upper, lower = size, size - 2 * replaced
        own = appended.gap
        if own is not None:  # the item's own gap is lost with it
            upper += own.lost_bytes
            lower += own.lost_bytes_min
        what = f"{size} bytes of text" + (f" and a gap of {own.describe()} bytes" if own else "")
        self.reassembler.record_loss(
            key,
            f"the client dropped the untaken progress item of record {index} ({what}):"
            f" its consumer fell {self.bound} items behind",
        )
        if key is None or (not upper and own is None):
            return  # nothing its stream's text would have shown
        total = getattr(item.frame.body, "total_bytes", 0)
        # The loss starts where the first of it did: a gap the item carried
        # (its own, or the drops before it) lies before the item's text.
        start = offset if own is None else min(offset, own.offset)
        gap = Gap(start, index, total if isinstance(total, int) else 0, upper, lower, 0, True)
        items = self._items
        for position, (later, later_offset, later_index) in enumerate(items):
            if later.appended.key == key:
                marked = _marked(later.appended, gap)
                items[position] = (
                    CallProgress(later.frame, later.seq, marked),
                    later_offset,
                    later_index,
                )
                return
        earlier = self._lost.get(key)
        self._lost[key] = gap if earlier is None else _joined(earlier, gap)


def _joined(first: Gap, second: Gap) -> Gap:
    """One gap for two losses side by side in a stream (``first`` before)."""
    return Gap(
        first.offset,
        second.index,
        max(first.total_bytes, second.total_bytes),
        first.lost_bytes + second.lost_bytes,
        first.lost_bytes_min + second.lost_bytes_min,
        0,
        True,
    )


def _marked(appended: Appended, lost: Gap) -> Appended:
    """``appended`` with the loss ``lost`` (dropped items just before it) in its
    gap, rendered before its text with its own gap, if any (Rule 4)."""
    own = appended.gap
    return replace(appended, gap=lost if own is None else _joined(lost, own))
