"""A tool's terminal value and what its ``execute`` yields (sans-IO: no
threads, no event loop, so every host's mapping can import it).

Rule 1. A JSON result holding a number JSON cannot carry (NaN, infinity) is no
        result: :func:`non_finite_error` names the value's place
        (``$.stats.mean``), and the runner ends the call with that
        ``internal_error`` on every host, as it does for any other value JSON
        cannot carry, instead of the ``null`` an encoder would quietly write.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final, Literal

import msgspec

from kigi_tool_protocol import CustomProgress, TextProgress, ToolCallResult, ToolProgress
from kigi_tool_protocol._identifiers import validate_tool_call_id
from kigi_tool_protocol._progress import ContentProgress
from kigi_tool_protocol._tool_call import ToolOutputJson, ToolOutputText, ToolOutputWire

from ._errors import ToolError

__all__ = ("ToolEvent", "ToolResult")

#: The progress classes a tool may yield before its terminal.
PROGRESS_TYPES: Final = (TextProgress, ContentProgress, CustomProgress)


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """A successful terminal: the tool's output value.

    ``kind`` is the ``ToolOutputWire`` kind: ``"json"`` (``value`` is any
    JSON-able value, msgspec Structs included; what the Rust servers send) or
    ``"text"`` (``value`` is a str). ``output`` is the excerpt of what the
    tool wrote to its :class:`Output` (head, omission marker, tail), set by
    the runtime for the model's text; it is not part of the wire value.
    """

    value: Any
    kind: Literal["json", "text"] = "json"
    output: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("json", "text"):
            raise ValueError(f"ToolResult kind must be 'json' or 'text', not {self.kind!r}")
        if self.kind == "text" and not isinstance(self.value, str):
            raise TypeError(f"a text ToolResult needs a str value, not {type(self.value).__name__}")

    @classmethod
    def text(cls, value: str) -> ToolResult:
        """A ``text`` result."""
        return cls(value=value, kind="text")

    def to_wire(self, tool_call_id: str) -> ToolCallResult:
        """The ``ToolCallResult`` for this output.

        Raises:
            IdentifierError: ``tool_call_id`` is empty.
        """
        validate_tool_call_id(tool_call_id)
        output: ToolOutputWire
        if self.kind == "text":
            output = ToolOutputText(value=self.value)
        else:
            output = ToolOutputJson(value=msgspec.to_builtins(self.value))
        return ToolCallResult(tool_call_id=tool_call_id, output=output)


_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _step(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if _NAME.match(text):
        return f"{path}.{text}"
    return f"{path}[{msgspec.json.encode(text).decode()}]"


def non_finite_path(value: Any) -> tuple[str, float] | None:
    """The place (``$.a[2].b``) and value of the first NaN or infinity in
    ``value`` (builtins: dicts, lists, tuples, floats), depth first; ``None``
    when it holds none. Walks with a stack of its own: any nesting depth."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, item
        elif isinstance(item, dict):
            stack.extend((_step(path, k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list | tuple):
            stack.extend((_step(path, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def non_finite_error(result: ToolResult) -> ToolError | None:
    """The ``internal_error`` of a JSON result holding NaN or infinity (Rule 1),
    or ``None``. A value msgspec cannot turn into builtins is left to the
    encoder, whose error ends the call the same way."""
    if result.kind != "json":
        return None
    try:
        found = non_finite_path(msgspec.to_builtins(result.value))
    except (TypeError, ValueError, msgspec.EncodeError, RecursionError):
        return None
    if found is None:
        return None
    path, number = found
    return ToolError(
        "internal_error",
        f"the result holds {number!r} at {path}, which JSON cannot carry (a number must be finite)",
    )


#: What a tool's ``execute`` yields: progress, then one terminal.
ToolEvent = ToolProgress | ToolResult | ToolError
