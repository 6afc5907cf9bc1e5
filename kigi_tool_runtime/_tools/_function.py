"""``@tool``: a function is a streaming tool.

::

    @tool
    async def count(out: Output, to: int = 3) -> None:
        \"\"\"Count from 1 to `to`, one line each.\"\"\"
        for n in range(1, to + 1):
            out.write(f"{n}\\n")

Invariants:

Rule 1. The decorated object is a :class:`Tool` (an instance of a class made
        for the function), so every host serves it as it serves any tool.
Rule 2. The arguments are the function's parameters after the first, which is
        annotated :class:`Output`. Their JSON Schema and their strict decoding
        come from the type hints, through one msgspec Struct made at
        decoration (``msgspec.defstruct``): unknown fields are refused, a
        missing or mistyped argument is an ``invalid_params`` error naming it.
Rule 3. Everything that can be wrong with the function is an error at
        decoration, naming the function: a bad tool id, a first parameter not
        annotated ``Output``, a parameter without a type hint, ``*args`` or
        ``**kwargs``, a hint msgspec cannot decode, a bad bound.
Rule 4. The return value is the call's result value (any JSON-able value,
        ``None`` included), with the excerpt of what the function wrote for
        the model. Raising :class:`ToolError` fails the call with its kind;
        any other exception fails it as ``internal_error`` with the
        exception's type and message. A plain ``def`` runs in a worker thread
        (``Output.write`` is safe there).
Rule 5. Output is paced by the call (:func:`stream_output`): the function
        never drains, finishes or sizes a buffer.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, overload

import msgspec

from kigi_tool_protocol import StreamingSpec, ToolCapabilities
from kigi_tool_protocol._identifiers import validate_tool_id
from kigi_tool_protocol._limits import DEFAULT_MAX_DELTA_BYTES

from .._producer._chunk import cap_of
from .._producer._pacer import DEFAULT_PACING_S, Pacer
from ._author_output import Output
from ._errors import ToolError, ToolErrorKind
from ._paced import DEFAULT_TAIL_BYTES, stream_output
from ._result import ToolEvent
from ._tool import Tool, ToolContext

__all__ = ("tool",)

#: The subkind a function tool's frames carry: plain output text.
FUNCTION_SUBKIND = "output_chunk"

_Function = Callable[..., Any]


class FunctionTool(Tool[Any]):
    """A tool made by :func:`tool` from a function (one subclass per function).

    ``fn`` is the function; ``pacing`` its pacing interval in seconds;
    ``tail_bytes`` the newest output bytes kept between frames.
    """

    fn: _Function
    pacing: float
    tail_bytes: int

    def __init__(self, fn: _Function, *, pacing: float, tail_bytes: int) -> None:
        self.fn = fn
        self.pacing = pacing
        self.tail_bytes = tail_bytes
        self._params = tuple(msgspec.structs.fields(self.args_type))
        self._threaded = not inspect.iscoroutinefunction(fn)

    def __repr__(self) -> str:
        return f"<function tool {self.id!r} of {self.fn.__module__}.{self.fn.__qualname__}>"

    @property
    def spec(self) -> StreamingSpec:
        """The stream this tool produces."""
        spec = self.capabilities.streaming
        assert spec is not None
        return spec

    async def execute(self, ctx: ToolContext, args: Any) -> AsyncIterator[ToolEvent]:
        """Call the function with an :class:`Output` and the decoded arguments:
        its output's frames, paced, then its result (Rule 4).

        Raises:
            ToolError: what the function raised, or ``internal_error`` for any
                other exception it raised.
        """
        kwargs = {field.name: getattr(args, field.name) for field in self._params}
        events = stream_output(
            ctx,
            self.spec,
            lambda out: self._call(out, kwargs),
            pacing=self.pacing,
            tail_bytes=self.tail_bytes,
        )
        async for event in events:
            yield event

    async def _call(self, out: Output, kwargs: dict[str, Any]) -> Any:
        try:
            if self._threaded:
                return await asyncio.to_thread(self.fn, out, **kwargs)
            return await self.fn(out, **kwargs)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(
                ToolErrorKind.INTERNAL_ERROR,
                f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
            ) from exc


@overload
def tool(fn: _Function, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    max_delta_bytes: int | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    pacing: float = DEFAULT_PACING_S,
) -> Callable[[_Function], FunctionTool]: ...


def tool(
    fn: _Function | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    max_delta_bytes: int | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    pacing: float = DEFAULT_PACING_S,
) -> FunctionTool | Callable[[_Function], FunctionTool]:
    """Make a streaming tool of ``fn`` (see the module's rules): ``@tool`` or
    ``@tool(name=..., description=..., max_delta_bytes=..., tail_bytes=...)``.

    ``name`` is the tool id (default: the function's name); ``description``
    what the model reads (default: the docstring); ``max_delta_bytes`` the
    cap of one frame (default 16 KiB); ``tail_bytes`` the newest output bytes
    kept between frames (a reader further behind sees a gap); ``pacing`` the
    pacing interval in seconds (partial frames at most this often).

    Raises:
        IdentifierError: the tool id is invalid.
        TypeError: the function cannot be a tool (Rule 3), named in the message.
        ValueError: a bound is out of range.
    """
    if fn is not None:
        return _make(fn, name, description, max_delta_bytes, tail_bytes, pacing)

    def decorate(fn: _Function) -> FunctionTool:
        return _make(fn, name, description, max_delta_bytes, tail_bytes, pacing)

    return decorate


def _make(
    fn: _Function,
    name: str | None,
    description: str | None,
    max_delta_bytes: int | None,
    tail_bytes: int,
    pacing: float,
) -> FunctionTool:
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(f"@tool decorates a function, not {type(fn).__name__}")
    what = f"@tool {getattr(fn, '__qualname__', repr(fn))}"
    tool_id = validate_tool_id(fn.__name__ if name is None else name)
    if max_delta_bytes is not None:
        cap_of(max_delta_bytes, "max_delta_bytes")  # refuses a negative cap
    Pacer(pacing)  # refuses a bad interval
    if not isinstance(tail_bytes, int) or isinstance(tail_bytes, bool):
        raise TypeError(f"{what}: tail_bytes must be an int, not {type(tail_bytes).__name__}")
    if tail_bytes < cap_of(max_delta_bytes):
        raise ValueError(
            f"{what}: tail_bytes {tail_bytes} is below one frame ({cap_of(max_delta_bytes)} bytes)"
        )
    args_type = _args_struct(fn, tool_id, what)
    doc = inspect.getdoc(fn) or ""
    spec = StreamingSpec(
        subkind=FUNCTION_SUBKIND,
        max_delta_bytes=DEFAULT_MAX_DELTA_BYTES if max_delta_bytes is None else max_delta_bytes,
    )
    namespace = {
        "id": tool_id,
        "description": doc if description is None else description,
        "args_type": args_type,
        "capabilities": ToolCapabilities(streaming=spec, supports_cancel=True),
        "__module__": getattr(fn, "__module__", __name__),
        "__doc__": doc,
    }
    cls = type(_camel(tool_id) + "Tool", (FunctionTool,), namespace)
    made: FunctionTool = cls(fn, pacing=pacing, tail_bytes=tail_bytes)
    return made


def _args_struct(fn: _Function, tool_id: str, what: str) -> type[msgspec.Struct]:
    """The msgspec Struct of ``fn``'s arguments (Rule 2)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: cannot read its signature: {exc}") from exc
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception as exc:
        raise TypeError(f"{what}: its type hints cannot be evaluated: {exc}") from exc
    params = list(signature.parameters.values())
    if not params or hints.get(params[0].name) is not Output:
        raise TypeError(f"{what}: its first parameter must be annotated Output (out: Output)")
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in params[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{what}: *{param.name} / **{param.name} cannot be tool arguments")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{what}: argument {param.name!r} is positional-only")
        if param.name not in hints:
            raise TypeError(f"{what}: argument {param.name!r} has no type hint")
        hint = hints[param.name]
        if param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
    struct_name = _camel(tool_id) + "Args"
    try:
        args_type = msgspec.defstruct(
            struct_name,
            fields,
            kw_only=True,
            frozen=True,
            forbid_unknown_fields=True,
            module=getattr(fn, "__module__", None),
        )
        msgspec.json.schema(args_type)  # a hint msgspec cannot decode fails now
        msgspec.json.Decoder(args_type)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: its arguments cannot be decoded strictly: {exc}") from exc
    return args_type


def _camel(tool_id: str) -> str:
    """``read_file`` -> ``ReadFile`` (``ns:read-file`` -> ``NsReadFile``)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_:\-]+", tool_id) if part)
