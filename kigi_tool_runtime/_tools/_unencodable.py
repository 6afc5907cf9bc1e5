"""Finding a string UTF-8 cannot encode in arguments a host hands over as
Python values (what ``json.loads`` returns for ``"\\ud800"``: a lone surrogate).

Rule 1. Every string of the value is looked at, object keys included, inside
        dicts, lists and tuples, however deep (an explicit stack: no
        recursion); the first one that is not valid Unicode is named by its
        place, as a JSON path in msgspec's spelling (``$.key``, ``$[0]``).
Rule 2. A key that cannot be encoded cannot be spelled in a path either: it is
        named by the path of the object that holds it, shown with escapes.

Nothing here performs I/O.
"""

from __future__ import annotations

from typing import NamedTuple

__all__: tuple[str, ...] = ()


class Unencodable(NamedTuple):
    """Where a string UTF-8 cannot encode sits, and why."""

    path: str
    reason: str


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: A place as a chain of links to its parent: ``(parent, segment)``, ``None``
#: for ``$``. A deep nest then costs a link a level, not a path string a level.
_Place = tuple["_Place", str] | None


def _spelled(place: _Place) -> str:
    segments: list[str] = []
    while place is not None:
        place, segment = place
        segments.append(segment)
    return "$" + "".join(reversed(segments))


def find_unencodable(value: object) -> Unencodable | None:
    """The first string in ``value`` UTF-8 cannot encode (Rule 1), or ``None``."""
    stack: list[tuple[_Place, object]] = [(None, value)]
    seen: set[int] = set()  # containers looked into (a cycle is looked at once)
    while stack:
        place, item = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                reason = f"the string {ascii(item)[:80]} is not valid Unicode"
                return Unencodable(_spelled(place), reason)
        elif isinstance(item, dict | list | tuple):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                children: list[tuple[_Place, object]] = []
                for key, child in item.items():
                    if isinstance(key, str) and not _encodable(key):
                        reason = f"the object key {ascii(key)[:80]} is not valid Unicode"
                        return Unencodable(_spelled(place), reason)
                    segment = f".{key}" if isinstance(key, str) else "[...]"
                    children.append(((place, segment), child))
                stack.extend(reversed(children))
            else:
                stack.extend(((place, f"[{i}]"), item[i]) for i in reversed(range(len(item))))
    return None
