"""The sans-IO mapping between kigi tools and LangChain: the tool's name and
argument schema, each frame as a ``tool-output-delta`` string, and the call's
end as a ``ToolMessage``'s content and artifact.

Invariants:

Rule 1. A tool's LangChain name is its id with ``:`` spelled ``__``
        (:func:`langchain_tool_name`); every name matches ``NAME_PATTERN``, the
        rule chat model APIs put on tool names, or is refused with a clear error.
Rule 2. The argument schema is the tool's ``args_type`` JSON Schema with its
        root reference inlined, so the model sees an ``object`` at the root;
        the arguments are checked by the served-call core, as strictly as the
        stdio server checks them, never by a second validator.
Rule 3. Each frame goes out as one :class:`LiveChunk`: a ``str`` (LangGraph's
        wire type for a delta) holding the frame's live text (its delta, after
        a one-line marker where bytes were lost), which also carries the exact
        kigi frame and its ``seq`` for a fold in the same process. The closing
        text (bytes never delivered, the truncation marker) is a chunk without a
        frame. Concatenated, the chunks are the output exactly when nothing was lost.
Rule 4. A call that returned is the model's text (``CallEnd.text``) as the
        ``ToolMessage`` content and :func:`artifact` as its artifact: the tool's
        value as JSON values and the loss report, whose ``complete`` is false
        whenever anything was lost.

Nothing here imports LangChain or an event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from kigi_tool_protocol import ToolCallProgressFrame

from .._call._held import HeldBack as HeldBack  # the driver and tests take it from here
from .._call._live import LiveDelta
from .._call._outcome import CallEnd
from .._call._schema import root_object_schema

if TYPE_CHECKING:
    from .._tools._tool import Tool

__all__ = ("LiveChunk", "is_kigi_artifact")

#: The names chat model APIs accept for a tool (OpenAI's and Anthropic's rule).
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: The artifact key that marks a kigi call's artifact (its value is the tool id).
ARTIFACT_KEY: Final = "kigi_tool"


def langchain_tool_name(tool_id: str, name: str | None = None) -> str:
    """The LangChain name of the tool ``tool_id`` (Rule 1): ``name`` when
    given, else the id with ``:`` spelled ``__``.

    Raises:
        ValueError: the name does not match :data:`NAME_PATTERN` (too long, or
            a character a chat model API refuses).
    """
    chosen = tool_id.replace(":", "__") if name is None else name
    if not isinstance(chosen, str) or NAME_PATTERN.fullmatch(chosen) is None:
        hint = "" if name is not None else "; give the tool a name with name=..."
        raise ValueError(
            f"{chosen!r} is not a tool name a chat model accepts: 1 to 64 ASCII letters,"
            f" digits, '_' or '-'{hint}"
        )
    return chosen


def args_schema(tool: Tool[Any]) -> dict[str, Any]:
    """The tool's argument JSON Schema with an ``object`` at its root (Rule 2).

    Raises:
        ValueError: the root reference does not resolve, or the root is not an
            ``object`` schema.
    """
    try:
        return root_object_schema(tool.input_schema())
    except ValueError as exc:
        raise ValueError(f"tool {tool.id!r}: {exc}") from None


class LiveChunk(str):
    """One ``tool-output-delta`` of a kigi call (Rule 3): the live text, as a
    ``str``, with the exact kigi ``frame`` and its ``seq`` (both ``None`` for
    the closing text). Anything that reads strings (a UI, a serializer) sees
    the text; :class:`ToolEventFolder` reads the frame."""

    frame: ToolCallProgressFrame[Any] | None
    seq: int | None

    def __new__(
        cls, text: str, frame: ToolCallProgressFrame[Any] | None = None, seq: int | None = None
    ) -> LiveChunk:
        chunk = super().__new__(cls, text)
        chunk.frame = frame
        chunk.seq = seq
        return chunk

    @classmethod
    def of(cls, delta: LiveDelta) -> LiveChunk:
        """The chunk of one frame: its live text, frame and ``seq``."""
        return cls(delta.text, delta.frame, delta.seq)

    def __repr__(self) -> str:
        kind = "closing" if self.frame is None else f"seq={self.seq}"
        return f"LiveChunk({str.__repr__(self)}, {kind})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy (or a pickle) keeps the frame with the text.
        return (LiveChunk, (str(self), self.frame, self.seq))


def artifact(end: CallEnd) -> dict[str, Any]:
    """The ``ToolMessage`` artifact of a call that returned (Rule 4): the tool
    id, its value as JSON values and the loss report (``loss_json``)."""
    return {
        ARTIFACT_KEY: end.tool_id,
        "tool_call_id": end.call_id,
        "value": msgspec.to_builtins(end.value),
        "loss": end.loss_json(),
    }


def is_kigi_artifact(value: Any) -> bool:
    """Whether ``value`` is an artifact :func:`artifact` made."""
    return isinstance(value, Mapping) and ARTIFACT_KEY in value and "loss" in value
