"""``StatusLine``: a call's output as one short status a host shows in place of
the last (sans-IO); ``ProgressMessages``: the ``message`` of each progress
notification in the mode a host reads (``"status"`` or ``"delta"``).

Hosts read a progress ``message`` one of two ways. Most overwrite it (Claude
Code shows the latest on the tool's row, about 200 characters; VS Code passes
it to ``progress.report``): for them the useful message is a status. Some
append every message (a log pane, our own folds): for them it is the delta.

Invariants (of :meth:`StatusLine.message` and :meth:`StatusLine.heartbeat`):

Rule 1. A message is at most ``max_chars`` characters (200 by default) and
        holds no control character (C0, C1, DEL, lone surrogates, line and
        paragraph separators, bidirectional overrides): a tab becomes a space,
        terminal colour sequences are removed, the rest is dropped.
Rule 2. A cut never splits a character: it falls on a code point boundary
        and not inside a combining sequence, an emoji sequence (ZWJ, variation
        selectors, skin tones, tags) or a flag's pair; a cut line ends with
        ``…`` (within the limit).
Rule 3. The message says the newest complete line of output: text ended by a
        newline or a carriage return (a progress bar's ``\\r`` redraws the
        line, as a terminal would), with its outer whitespace stripped; blank
        lines are skipped. Before the first one it says the bytes counted and
        the time run (``1024 bytes of output, running 3.2 s``).
Rule 4. A message starts with the loss marker whenever bytes were lost (or
        frames dropped) since the previous message, and only then: the newest
        marker, with how many more were said since when there were several.
        A line the loss cut through is never shown (its start is dropped).
Rule 5. Memory is bounded: the line being written keeps at most
        :data:`LINE_KEEP_CHARS` characters; the newest line and the loss
        markers since the last message are one short string each.

No I/O and no clock: the time comes in as ``now``.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Final, Literal

from .._text import plural

if TYPE_CHECKING:
    from ._heartbeat import Beat
    from ._live import LiveDelta

# The hosts' plumbing (MCP, FastMCP, ADK, ...), not exported.
__all__: tuple[str, ...] = ()

#: The longest status message, in characters: what Claude Code shows of a
#: progress ``message`` on the tool's row (it collapses whitespace and cuts
#: about here); VS Code shows less, and cuts on its own.
STATUS_MAX_CHARS: Final = 200

#: Characters of the line being written that are kept: five times the status,
#: so colour sequences and indentation can be removed from a long line and
#: leave a full status. Past it the line is cut (and ends with ``…``).
LINE_KEEP_CHARS: Final = 1024

#: How a host reads the ``message``: ``"status"`` (it shows the latest in place
#: of the last) or ``"delta"`` (it appends each one).
MessageMode = Literal["status", "delta"]

#: The modes, for a command line's choices.
MESSAGE_MODES: Final[tuple[MessageMode, ...]] = ("status", "delta")

_ELLIPSIS: Final = "…"

# A terminal's CSI (colours, cursor moves) and OSC (titles, links) sequences.
_ESCAPES: Final = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
)

# Format characters that reorder or hide text (a status row must read as written).
_BIDI: Final = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


def _dropped(char: str) -> bool:
    """Whether ``char`` is removed from a message (Rule 1)."""
    return unicodedata.category(char) in ("Cc", "Cs") or char in _BIDI


def clean(text: str) -> str:
    """``text`` as a message may hold it (Rule 1): tabs as spaces, terminal
    sequences and control characters removed."""
    text = _ESCAPES.sub("", text.replace("\t", " "))
    if text.isprintable():
        return text
    return "".join(char for char in text if not _dropped(char))


def _joins_previous(char: str) -> bool:
    """Whether ``char`` belongs to the character before it (Rule 2)."""
    code = ord(char)
    return (
        unicodedata.combining(char) != 0
        or unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char == "\u200d"
        or 0xFE00 <= code <= 0xFE0F
        or 0xE0100 <= code <= 0xE01EF
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
    )


def _regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def boundary(text: str, limit: int) -> int:
    """The largest index ``<= limit`` at which ``text`` can be cut without
    splitting a character (Rule 2)."""
    if len(text) <= limit:
        return len(text)
    at = max(limit, 0)
    while at > 0 and (_joins_previous(text[at]) or text[at - 1] == "\u200d"):
        at -= 1
    if at > 0 and _regional(text[at]):
        run = 0
        while at - run > 0 and _regional(text[at - run - 1]):
            run += 1
        at -= run % 2  # an odd run before the cut: its last one pairs with text[at]
    return at


def cut_to(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut on a boundary and ended
    with ``…`` when cut (Rule 2)."""
    if len(text) <= limit:
        return text
    if limit < 1:
        return ""
    return text[: boundary(text, limit - 1)].rstrip() + _ELLIPSIS


def format_seconds(seconds: float) -> str:
    """A duration as a status says it: ``0.5 s``, ``45 s``, ``6m 12s``, ``2h 05m``."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


class StatusLine:
    """One call's output as a status (see the module's rules).

    ``started`` is when the call started (the clock the caller passes as
    ``now``); ``max_chars`` the longest message.

    Raises:
        ValueError: ``max_chars`` is below 20 (too short to say a loss and a line).
    """

    __slots__ = (
        "_bytes",
        "_cut",
        "_line",
        "_losses",
        "_marker",
        "_partial",
        "_started",
        "max_chars",
    )

    def __init__(self, started: float, *, max_chars: int = STATUS_MAX_CHARS) -> None:
        if max_chars < 20:
            raise ValueError(f"max_chars must be at least 20, got {max_chars}")
        self.max_chars = max_chars
        self._started = started
        self._partial = ""  # the line being written (at most LINE_KEEP_CHARS)
        self._cut = False  # it was longer than that
        self._line: str | None = None  # the newest complete line, cleaned and cut
        self._bytes = 0
        self._marker: str | None = None  # the newest loss marker since the last message
        self._losses = 0  # markers since the last message

    @property
    def last_line(self) -> str | None:
        """The newest complete line (cleaned and cut), ``None`` before one."""
        return self._line

    def add(self, delta: LiveDelta) -> None:
        """Take one frame's live delta: its loss marker, its text and the byte
        count of its frame."""
        if delta.marker is not None:
            self.lost(delta.marker)
        if delta.delta:
            self.write(delta.delta)
        if delta.total_bytes is not None and delta.total_bytes > self._bytes:
            self._bytes = delta.total_bytes

    def count(self, total_bytes: int) -> None:
        """The output's byte count is now ``total_bytes`` (it never goes down)."""
        self._bytes = max(self._bytes, total_bytes)

    def write(self, text: str) -> None:
        """Take output text (Rule 3). Only the newest non-blank line it
        completes is looked at, found from its end: a 16 KiB delta of short
        lines costs one line's work, not one per line."""
        last = max(text.rfind("\n"), text.rfind("\r"))
        if last < 0:
            self._extend(text)
            return
        end = last
        before = self._partial, self._cut  # the start of the first line it ends
        while True:
            start = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end))
            if start < 0:
                self._partial, self._cut = before
                self._extend(text[:end])
                if self._complete():
                    break
            else:
                self._partial, self._cut = "", False
                self._extend(text[start + 1 : end])
                if self._complete():
                    break
            if start < 0:
                break
            end = start
        self._partial, self._cut = "", False
        self._extend(text[last + 1 :])

    def lost(self, marker: str) -> None:
        """Bytes were lost (or frames dropped) here; ``marker`` says so (Rule 4)."""
        said = " ".join(part.strip() for part in marker.splitlines() if part.strip())
        # The line being written has a hole now: what came before it is no line.
        self._partial, self._cut = "", False
        if said:
            self._marker = cut_to(clean(said), self.max_chars // 2)
            self._losses += 1

    def message(self, now: float) -> str:
        """The status at ``now`` (Rules 1-4); the loss marker is said once."""
        if self._line is not None:
            body = self._line
        else:
            body = (
                f"{plural(self._bytes, 'byte', 'bytes')} of output,"
                f" running {format_seconds(now - self._started)}"
            )
        return self._with_loss(body)

    def heartbeat(self, beat: Beat) -> str:
        """The status of a heartbeat: the call's time run and silence, then the
        newest line (Rules 1-4)."""
        body = beat.text()
        if self._line is not None:
            body = f"{body} · {self._line}"
        return self._with_loss(body)

    def _with_loss(self, body: str) -> str:
        marker, losses = self._marker, self._losses
        self._marker, self._losses = None, 0
        if marker is None:
            return cut_to(body, self.max_chars)
        if losses > 1:
            marker = f"{marker} (+{losses - 1} more)"
        return cut_to(f"{marker} {body}", self.max_chars)

    def _extend(self, piece: str) -> None:
        if not piece or self._cut:
            return
        room = LINE_KEEP_CHARS - len(self._partial)
        if len(piece) > room:
            piece = piece[:room]
            self._cut = True
        self._partial += piece

    def _complete(self) -> bool:
        """Make the line being written the newest line, unless it is blank;
        whether it was kept."""
        partial, was_cut = self._partial, self._cut
        self._partial, self._cut = "", False
        line = clean(partial).strip()
        if not line:
            return False
        self._line = cut_to(line + _ELLIPSIS if was_cut else line, self.max_chars)
        return True


class ProgressMessages:
    """The ``message`` of each progress notification of one call, in ``mode``.

    ``"status"``: :class:`StatusLine`'s status at each frame, at a heartbeat
    and at the end. ``"delta"``: each frame's live text (its delta after its
    loss marker, what an appending host needs), the closing text at the end,
    and no message at a heartbeat (an appending host would add it to the
    output). ``started`` is the call's start on the caller's clock.

    Raises:
        ValueError: ``mode`` is neither ``"status"`` nor ``"delta"``.
    """

    __slots__ = ("mode", "status")

    def __init__(self, mode: MessageMode, started: float) -> None:
        if mode not in MESSAGE_MODES:
            raise ValueError(f"the message mode must be 'status' or 'delta', got {mode!r}")
        self.mode: MessageMode = mode
        self.status = StatusLine(started)

    def frame(self, delta: LiveDelta, now: float) -> str:
        """The message of the notification carrying ``delta``."""
        if self.mode == "delta":
            return delta.text
        self.status.add(delta)
        return self.status.message(now)

    def closing(self, text: str, now: float) -> str:
        """The message of the closing notification that says ``text`` (a loss
        known only at the end, ``LiveText.finish``); ``""`` when there is none."""
        if not text or self.mode == "delta":
            return text
        self.status.lost(text)
        return self.status.message(now)

    def heartbeat(self, beat: Beat) -> str | None:
        """The message of a heartbeat notification (``None``: send none)."""
        if self.mode == "delta":
            return None
        return self.status.heartbeat(beat)
