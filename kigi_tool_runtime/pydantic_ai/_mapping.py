"""The mapping between kigi tools and pydantic-ai: tool definitions, the
argument check, and how a served call's end becomes the tool's return.

Invariants:

Rule 1. A kigi tool is a pydantic-ai function tool named by its id (``a:b`` as
        ``a__b``, since model APIs allow only letters, digits, ``_`` and ``-``),
        with the tool's description and its input schema with an ``object`` at
        the root.
Rule 2. Arguments are checked strictly up front, as every kigi host checks
        them; arguments the tool refuses are a ``ModelRetry`` whose message
        names the field and what the tool takes, so the model can correct the
        call on pydantic-ai's retry path.
Rule 3. A call that returned is a ``ToolReturn``: the model reads the call's
        model text (head, omission marker, tail, exit status, and a loss line
        when the live output lost bytes); the application reads the tool's
        value and the loss report in its ``metadata``, as JSON values.
Rule 4. A call that failed is a ``ToolFailed`` whose message is the kigi error's
        kind, code and message: the model sees a failed tool call, never a
        traceback. Bad arguments found only by the run are a ``ModelRetry``
        (Rule 2).

Values in, pydantic-ai values out: nothing here awaits or does I/O.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from pydantic_ai import ModelRetry, ToolDefinition, ToolFailed, ToolReturn
from pydantic_core import SchemaValidator, core_schema

from .._call._outcome import CallEnd
from .._call._schema import root_object_schema
from .._call._served import check_arguments
from .._tools._errors import ToolError, ToolErrorKind
from .._tools._tool import Tool

__all__ = ()

#: What pydantic-ai checks before the kigi check: a JSON object (the kigi
#: check, Rule 2, judges its fields).
ARGS_OBJECT: Final = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)


def tool_name(tool_id: str) -> str:
    """The pydantic-ai name of a kigi tool (Rule 1): its id with ``:`` as ``__``."""
    return tool_id.replace(":", "__")


def tool_definition(tool: Tool[Any], name: str | None = None) -> ToolDefinition:
    """The pydantic-ai ``ToolDefinition`` of ``tool`` (Rule 1); ``name``
    overrides the name made from its id. Its ``metadata`` holds the kigi tool
    id and capabilities (not sent to the model).

    Raises:
        ValueError: the tool's input schema is not an object at the root.
    """
    return ToolDefinition(
        name=name if name is not None else tool_name(tool.id),
        description=tool.description or None,
        parameters_json_schema=root_object_schema(tool.input_schema()),
        metadata={
            "kigi_tool_id": tool.id,
            "kigi_capabilities": msgspec.to_builtins(tool.capabilities),
        },
    )


def check_or_retry(tool: Tool[Any], arguments: Any) -> Any:
    """``arguments`` decoded strictly for ``tool`` (Rule 2).

    Raises:
        ModelRetry: the tool refuses them; the message names the field.
    """
    try:
        return check_arguments(tool, arguments)
    except ToolError as exc:
        raise ModelRetry(exc.message) from None


def return_metadata(end: CallEnd) -> dict[str, Any]:
    """The ``ToolReturn`` metadata of a call that returned (Rule 3)."""
    return {
        "kigi_tool_id": end.tool_id,
        "kigi_call_id": end.call_id,
        "value": msgspec.to_builtins(end.value),
        "frames": end.frames,
        "complete": end.complete,
        "loss": end.loss_json(),
    }


def return_of(end: CallEnd) -> ToolReturn:
    """The tool's return for a served call's end (Rules 3, 4).

    Raises:
        ToolFailed: the call failed (its text is the kigi error's).
        ModelRetry: the call's arguments were refused.
    """
    error = end.error
    if error is not None:
        if error.kind is ToolErrorKind.INVALID_PARAMS:
            raise ModelRetry(error.message)
        raise ToolFailed(end.text)
    return ToolReturn(return_value=end.text, metadata=return_metadata(end))
