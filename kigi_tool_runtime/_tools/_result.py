"""A tool's terminal value and what its ``execute`` yields (sans-IO: no
threads, no event loop, so every host's mapping can import it)."""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from kigi_tool_protocol import (
    ContentProgress,
    CustomProgress,
    TextProgress,
    ToolCallResult,
    ToolOutputJson,
    ToolOutputText,
    ToolOutputWire,
    ToolProgress,
    validate_tool_call_id,
)

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


#: What a tool's ``execute`` yields: progress, then one terminal.
ToolEvent = ToolProgress | ToolResult | ToolError
