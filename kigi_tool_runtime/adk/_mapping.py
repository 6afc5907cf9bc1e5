"""The sans-IO mapping between a served kigi call and Google ADK events.

Invariants:

Rule 1. A kigi tool is an ADK function tool named by its id (``a:b`` as
        ``a__b``: ADK function names allow letters, digits, ``_`` and ``-``),
        declared with the tool's description and its input schema with an
        ``object`` at the root.
Rule 2. Each frame is one partial ``Event`` (``partial=True``: ADK streams it
        to ``run_async`` and never saves it to the session): its content is
        one text part holding the frame's live text (``LiveText``: the delta,
        after a one-line marker where bytes were lost), its
        ``custom_metadata`` the exact kigi frame (:data:`META_FRAME`) and its
        ``seq`` (:data:`META_SEQ`). A loss known only at the end is one more
        partial event whose text says it and whose metadata holds the call
        id under :data:`META_CLOSING` instead of a frame.
Rule 3. The call's end is the function response: ``{"result": text}`` for a
        call that returned, ``{"error": text}`` for one that failed (ADK's own
        convention), ``text`` being the model text every kigi host gives
        (head, omission marker, tail, exit status, a loss line when the live
        output lost bytes); beside it, under :data:`RESPONSE_KEY`, the kigi
        tool id, call id, frame count, completeness and loss report as JSON
        values, for the application.

Values in, ADK values out: nothing here awaits or does I/O.
"""

from __future__ import annotations

from typing import Any

from google.adk.events import Event
from google.genai import types

from .._call._live import LiveDelta, frame_json
from .._call._outcome import CallEnd
from .._call._schema import root_object_schema
from .._tools._tool import Tool
from ._keys import META_CLOSING, META_FRAME, META_SEQ, RESPONSE_KEY

__all__ = ()


def adk_tool_name(tool_id: str) -> str:
    """The ADK name of a kigi tool (Rule 1): its id with ``:`` as ``__``."""
    return tool_id.replace(":", "__")


def function_declaration(tool: Tool[Any], name: str) -> types.FunctionDeclaration:
    """The ADK function declaration of ``tool`` under ``name`` (Rule 1).

    Raises:
        ValueError: the tool's input schema is not an object at the root.
    """
    return types.FunctionDeclaration(
        name=name,
        description=tool.description or None,
        parameters_json_schema=root_object_schema(tool.input_schema()),
    )


def _text_content(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


def partial_event(delta: LiveDelta, *, text: str | None = None) -> Event:
    """The partial event of one frame (Rule 2); ``text`` in place of its own
    (the last frame after frames held back, with their marker)."""
    return Event(
        partial=True,
        content=_text_content(delta.text if text is None else text),
        custom_metadata={META_FRAME: frame_json(delta.frame), META_SEQ: delta.seq},
    )


def closing_event(text: str, call_id: str) -> Event:
    """The partial event saying a loss of call ``call_id`` known only at the
    end (Rule 2)."""
    return Event(partial=True, content=_text_content(text), custom_metadata={META_CLOSING: call_id})


def response_of(end: CallEnd) -> dict[str, Any]:
    """The function response of a served call's end (Rule 3)."""
    figures = {
        "tool_id": end.tool_id,
        "call_id": end.call_id,
        "ok": end.ok,
        "frames": end.frames,
        "complete": end.complete,
        "loss": end.loss_json(),
    }
    return {"result" if end.ok else "error": end.text, RESPONSE_KEY: figures}
