"""Identifier types, validated during decode: one bad id fails the whole frame.

``SessionId``, ``RequestId`` and ``ToolCallId`` are any non-empty string (new
call ids are UUIDv7 strings). A ``ToolId`` is ``SEG`` or ``SEG:SEG`` where
``SEG`` is one or more ASCII letters, digits, ``_`` or ``-``: ``read_file``,
``Kigi:read_file`` and ``-_-`` are valid; ``a:b:c``, ``:a``, ``a.b`` and
``fooébar`` are not.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

import msgspec

from ._errors import IdentifierError

__all__ = ()

#: The ToolId grammar. ``\Z`` rather than ``$``, which would also match before a
#: trailing newline; the classes are spelled out so only ASCII qualifies.
TOOL_ID_PATTERN: Final = r"^[A-Za-z0-9_-]+(?::[A-Za-z0-9_-]+)?\Z"
_TOOL_ID = re.compile(TOOL_ID_PATTERN)

SessionId = Annotated[str, msgspec.Meta(min_length=1, description="non-empty session id")]
RequestId = Annotated[str, msgspec.Meta(min_length=1, description="non-empty request id")]
ToolCallId = Annotated[str, msgspec.Meta(min_length=1, description="non-empty tool call id")]
ToolId = Annotated[
    str, msgspec.Meta(pattern=TOOL_ID_PATTERN, description="SEG or SEG:SEG, SEG = [A-Za-z0-9_-]+")
]


def _non_empty(kind: str, value: str) -> str:
    if not isinstance(value, str):
        raise IdentifierError(f"{kind} must be a str, not {type(value).__name__}")
    if not value:
        raise IdentifierError(f"{kind} must not be empty")
    return value


def validate_tool_call_id(value: str) -> str:
    """Return ``value`` if it is a valid tool call id (any non-empty string).

    Raises:
        IdentifierError: ``value`` is empty or not a str.
    """
    return _non_empty("tool call id", value)


def validate_session_id(value: str) -> str:
    """Return ``value`` if it is a valid session id (any non-empty string).

    Raises:
        IdentifierError: ``value`` is empty or not a str.
    """
    return _non_empty("session id", value)


def validate_request_id(value: str) -> str:
    """Return ``value`` if it is a valid request id (any non-empty string).

    Raises:
        IdentifierError: ``value`` is empty or not a str.
    """
    return _non_empty("request id", value)


def validate_tool_id(value: str) -> str:
    """Return ``value`` if it is a valid tool id (``SEG`` or ``SEG:SEG``).

    Raises:
        IdentifierError: ``value`` is empty, has an empty or extra segment, or holds
            a character other than an ASCII letter, digit, ``_`` or ``-``.
    """
    _non_empty("tool id", value)
    if _TOOL_ID.match(value) is None:
        raise IdentifierError(
            f"tool id {value!r} is invalid: expected SEG or SEG:SEG where SEG is one or "
            "more ASCII letters, digits, '_' or '-'"
        )
    return value
