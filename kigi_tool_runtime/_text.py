"""Short texts for people: a quoted value cut to an excerpt, a count with its noun.

Shared by the consumer's anomaly details, the server's error replies and the
command line, so that a hostile value of megabytes is quoted in a few hundred
characters everywhere.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ()

#: The longest value an anomaly's detail quotes, in characters: enough to
#: recognise a key, a method or the start of a line, while a hostile record of
#: megabytes costs a detail of a few hundred bytes. Longer values are cut, and
#: the cut says how long the value was.
MAX_DETAIL_CHARS: Final = 200


def excerpt(value: object, limit: int = MAX_DETAIL_CHARS) -> str:
    """``repr(value)`` for a detail, cut to about ``limit`` characters (the cut
    names the full length)."""
    if isinstance(value, str | bytes | bytearray) and len(value) > limit:
        head = value[:limit]
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{head!r}... ({len(value)} {unit})"
    text = repr(value)
    if len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


def cut(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """``text`` cut to about ``limit`` characters: its start and its end (where
    a decoder names the path), with the count of characters left out between."""
    if len(text) <= limit + 40:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}[... {len(text) - head - tail} characters ...]{text[-tail:]}"


def plural(count: int, noun: str, nouns: str) -> str:
    """``"1 frame"``, ``"2 frames"``."""
    return f"{count} {noun if count == 1 else nouns}"


_EMPTY_TEXT_BYTES: Final = sys.getsizeof("")


def text_bytes(text: str) -> int:
    """The bytes ``text`` takes in memory beyond an empty string's: its length
    for ASCII, up to 4 bytes a character past it (a string holding one
    character past U+FFFF stores each of its characters in 4 bytes)."""
    return sys.getsizeof(text) - _EMPTY_TEXT_BYTES
