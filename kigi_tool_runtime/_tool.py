"""The tool interface: ``Tool``, ``ToolContext``, ``ToolResult``, ``ToolError``.

A tool call is ``Progress* Terminal``: zero or more ``ToolProgress`` values,
then exactly one terminal, a :class:`ToolResult` or a :class:`ToolError`.

A streaming tool implements :meth:`Tool.execute` as an async generator that
yields progress and finally **yields** its :class:`ToolResult`; it fails by
raising (or yielding) a :class:`ToolError`. A tool that never streams
implements :meth:`Tool.run` instead, ``async def`` or plain ``def`` (a plain
``def`` runs in a worker thread), and returns its result: a
:class:`ToolResult`, or any JSON-able value, which becomes the JSON output.

A streaming tool, whole::

    class Grep(Tool[GrepArgs]):
        id = "grep"
        args_type = GrepArgs
        capabilities = ToolCapabilities(streaming=SPEC)

        async def execute(self, ctx, args):
            stream = OutputStream(SPEC, capacity=256 * 1024, progress=ctx.wants_progress)
            async for line in matching_lines(args):
                stream.write(line)
                for frame in stream.drain():
                    yield frame
            for frame in stream.finish():
                yield frame
            yield ToolResult(value={"bytes": stream.total})

Nothing here runs a tool: :func:`run_tool` in ``_runner`` does, and enforces
the grammar. This module is sans-IO (no event loop).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable
from enum import StrEnum
from typing import Any, Final, Generic, Literal, Self, TypeVar, get_args

import msgspec

from kigi_tool_protocol import (
    ContentProgress,
    CustomProgress,
    InternalErrorWire,
    TextProgress,
    ToolCallResult,
    ToolCapabilities,
    ToolErrorWire,
    ToolOutputJson,
    ToolOutputText,
    ToolOutputWire,
    ToolProgress,
    error_code_for,
    validate_tool_call_id,
    validate_tool_id,
)

__all__ = (
    "PROGRESS_TYPES",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolErrorKind",
    "ToolEvent",
    "ToolResult",
)

#: The progress classes a tool may yield before its terminal.
PROGRESS_TYPES: Final = (TextProgress, ContentProgress, CustomProgress)

ArgsT = TypeVar("ArgsT", bound=msgspec.Struct)


class ToolErrorKind(StrEnum):
    """How a tool call failed; each kind is a ``ToolErrorWire`` code, and every
    ``ToolErrorWire`` code is a kind (a wire error converts both ways)."""

    #: The arguments do not fit the tool's input type (the runner names the field).
    INVALID_PARAMS = "invalid_params"
    #: The tool ran and failed (an exception, a broken stream, a failed command).
    EXECUTION = "execution"
    #: The call ran past its deadline and was stopped.
    TIMEOUT = "timeout"
    #: The call was cancelled by its caller.
    CANCELLED = "cancelled"
    #: No tool has the requested id.
    TOOL_NOT_FOUND = "tool_not_found"
    #: The tool refused to act (a permission or policy decision).
    FORBIDDEN = "forbidden"
    #: The runtime itself failed; not the tool's fault.
    INTERNAL_ERROR = "internal_error"
    #: The frame's session does not own the call.
    SESSION_MISMATCH = "session_mismatch"
    #: The transport to the tool closed mid-call.
    CONNECTION_LOST = "connection_lost"
    #: The peer speaks none of the protocol versions this side supports.
    UNSUPPORTED_PROTOCOL_VERSION = "unsupported_protocol_version"
    #: A frame exceeded the frame size limit.
    FRAME_TOO_LARGE = "frame_too_large"
    #: The tool does not implement the requested behavior version.
    BEHAVIOR_VERSION_UNSUPPORTED = "behavior_version_unsupported"
    #: A render tool hit its budget.
    RENDER_LIMITED = "render_limited"
    #: A terminal (shell) tool failed for good.
    TERMINAL_ERROR = "terminal_error"
    #: A tool-defined error; its own code is the error's ``subcode``.
    CUSTOM = "custom"


#: Each kind's wire variant, read off the ``ToolErrorWire`` union by its tag.
_WIRE_CLASS: Final[dict[ToolErrorKind, type[Any]]] = {
    ToolErrorKind(cls.__struct_config__.tag): cls for cls in get_args(ToolErrorWire)
}

#: Which :class:`ToolError` attribute each wire field carries. A variant's
#: sentence travels as ``message``, ``reason`` or ``detail``; every other field
#: has an attribute of its own (``bytes`` is ``frame_bytes``).
_ATTRIBUTE_OF: Final[dict[str, str]] = {
    "message": "message",
    "reason": "message",
    "detail": "message",
    "tool_id": "tool_id",
    "details": "details",
    "elapsed_ms": "elapsed_ms",
    "subcode": "subcode",
    "supported": "supported",
    "bytes": "frame_bytes",
    "limit": "limit",
    "requested": "requested",
    "card_id": "card_id",
    "request_id": "request_id",
}

#: What a required wire field holds when the error has no value for it (an
#: error built by hand may leave ``elapsed_ms`` unset, for example).
_UNSET: Final[dict[str, Any]] = {"elapsed_ms": 0, "bytes": 0, "limit": 0, "requested": ""}


class ToolError(Exception):
    """Raised by a tool (or made by the runner) when a tool call fails.

    ``kind`` says how; ``message`` is a sentence for the caller (and the model).
    The other attributes are the wire fields of particular kinds, ``None`` for
    the rest: ``tool_id`` (filled in by the runner when the tool did not set
    it), ``details`` (JSON-able data; ``invalid_params`` and ``custom``),
    ``elapsed_ms`` (``timeout``), ``subcode`` (``custom``), ``supported``
    (``unsupported_protocol_version``), ``frame_bytes`` and ``limit``
    (``frame_too_large``), ``requested`` (``behavior_version_unsupported``),
    ``card_id`` (``render_limited``), ``request_id`` (``internal_error``).

    :meth:`to_wire` and :meth:`from_wire` convert to and from ``ToolErrorWire``
    without loss: ``ToolError.from_wire(wire).to_wire() == wire`` for every
    variant.

    Raises:
        TypeError: ``supported`` is a single ``str`` (not a list of versions).
        ValueError: ``kind`` is not a :class:`ToolErrorKind`, or a field the
            kind's wire variant requires is missing (``subcode`` for ``custom``,
            ``supported`` for ``unsupported_protocol_version``, ``frame_bytes``
            and ``limit`` for ``frame_too_large``, ``requested`` for
            ``behavior_version_unsupported``).
    """

    def __init__(
        self,
        kind: ToolErrorKind | str,
        message: str,
        *,
        tool_id: str | None = None,
        details: Any = None,
        elapsed_ms: int | None = None,
        subcode: str | None = None,
        supported: Iterable[str] | None = None,
        frame_bytes: int | None = None,
        limit: int | None = None,
        requested: str | None = None,
        card_id: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.kind = ToolErrorKind(kind)
        self.message = message
        self.tool_id = tool_id
        self.details = details
        self.elapsed_ms = elapsed_ms
        self.subcode = subcode
        self.supported = None if supported is None else _versions(supported)
        self.frame_bytes = frame_bytes
        self.limit = limit
        self.requested = requested
        self.card_id = card_id
        self.request_id = request_id
        # An ``internal_error`` read off the wire without a ``detail`` keeps none.
        self._has_detail = True
        missing = [name for name in _REQUIRED.get(self.kind, ()) if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind.value!r} error needs {' and '.join(missing)}")
        super().__init__(message)

    def __repr__(self) -> str:
        return f"ToolError({self.kind.value!r}, {self.message!r}, tool_id={self.tool_id!r})"

    @classmethod
    def invalid_params(cls, message: str, details: Any = None) -> ToolError:
        """An ``invalid_params`` error."""
        return cls(ToolErrorKind.INVALID_PARAMS, message, details=details)

    @classmethod
    def execution(cls, message: str) -> ToolError:
        """An ``execution`` error: the tool ran and failed."""
        return cls(ToolErrorKind.EXECUTION, message)

    @classmethod
    def forbidden(cls, reason: str) -> ToolError:
        """A ``forbidden`` error: the tool refuses to act."""
        return cls(ToolErrorKind.FORBIDDEN, reason)

    @classmethod
    def terminal(cls, message: str) -> ToolError:
        """A ``terminal_error``: a terminal (shell) tool failed for good."""
        return cls(ToolErrorKind.TERMINAL_ERROR, message)

    @classmethod
    def render_limited(cls, reason: str, card_id: str | None = None) -> ToolError:
        """A ``render_limited`` error: a render tool hit its budget (on ``card_id``)."""
        return cls(ToolErrorKind.RENDER_LIMITED, reason, card_id=card_id)

    @classmethod
    def custom(cls, subcode: str, message: str, details: Any = None) -> ToolError:
        """A tool-defined error with its own code ``subcode`` and optional JSON data."""
        return cls(ToolErrorKind.CUSTOM, message, subcode=subcode, details=details)

    @classmethod
    def frame_too_large(cls, frame_bytes: int, limit: int) -> ToolError:
        """A ``frame_too_large`` error: a frame of ``frame_bytes`` bytes exceeded ``limit``."""
        return cls(
            ToolErrorKind.FRAME_TOO_LARGE,
            f"a frame of {frame_bytes} bytes exceeds the {limit}-byte limit",
            frame_bytes=frame_bytes,
            limit=limit,
        )

    @classmethod
    def unsupported_protocol_version(cls, supported: Iterable[str]) -> ToolError:
        """An ``unsupported_protocol_version`` error listing the versions this side speaks."""
        versions = _versions(supported)
        return cls(
            ToolErrorKind.UNSUPPORTED_PROTOCOL_VERSION,
            f"unsupported protocol version; supported: {', '.join(versions) or 'none'}",
            supported=versions,
        )

    @classmethod
    def behavior_version_unsupported(cls, requested: str) -> ToolError:
        """A ``behavior_version_unsupported`` error: the tool lacks version ``requested``."""
        return cls(
            ToolErrorKind.BEHAVIOR_VERSION_UNSUPPORTED,
            f"behavior version {requested!r} is not supported",
            requested=requested,
        )

    @staticmethod
    def from_wire(wire: ToolErrorWire, message: str | None = None) -> ToolError:
        """The error a ``ToolErrorWire`` describes, of the matching kind, such that
        ``from_wire(wire).to_wire() == wire``.

        ``message`` (a failed reply's ``error.message``) is the sentence for the
        variants that carry none; the variants that do carry one (``message``,
        ``reason`` or ``detail``) use theirs. Without either, the sentence is
        made from the wire's fields. An ``internal_error`` without a ``detail``
        keeps none.
        """
        error = ToolError.__new__(ToolError)
        error._init_from_wire(wire, message)
        return error

    def _init_from_wire(self, wire: ToolErrorWire, message: str | None) -> None:
        """Initialise this error from ``wire`` (:meth:`from_wire`, and the client's
        ``RemoteToolError``, which is a ``ToolError`` made from a received wire)."""
        text, fields = _wire_fields(wire, message)
        ToolError.__init__(self, message=text, **fields)
        self._has_detail = not isinstance(wire, InternalErrorWire) or wire.detail is not None

    def with_tool_id(self, tool_id: str) -> ToolError:
        """This error, with ``tool_id`` set if it was not (returns ``self``)."""
        if self.tool_id is None:
            self.tool_id = tool_id
        return self

    def to_wire(self) -> ToolErrorWire:
        """The ``ToolErrorWire`` variant for this error (sent as ``error.data``).

        Raises:
            ValueError: the kind needs a tool id and none is set.
        """
        cls = _WIRE_CLASS[self.kind]
        fields: dict[str, Any] = {}
        for field in cls.__struct_fields__:
            value = getattr(self, _ATTRIBUTE_OF[field])
            if field == "tool_id" and value is None:
                raise ValueError(
                    f"a {self.kind.value!r} error needs a tool id; call with_tool_id()"
                )
            if field == "detail" and not self._has_detail:
                value = None
            elif field == "supported":
                value = list(value or ())
            elif value is None and field in _UNSET:
                value = _UNSET[field]
            fields[field] = value
        wire: ToolErrorWire = cls(**fields)
        return wire

    @property
    def code(self) -> int:
        """The JSON-RPC ``error.code`` for this error."""
        return error_code_for(self.to_wire())


def _versions(supported: Iterable[str]) -> tuple[str, ...]:
    if isinstance(supported, str):  # would split into characters
        raise TypeError(f"supported is a list of versions, not the str {supported!r}")
    return tuple(supported)


#: The fields each kind's wire variant requires beyond the tool id and the sentence.
_REQUIRED: Final[dict[ToolErrorKind, tuple[str, ...]]] = {
    ToolErrorKind.CUSTOM: ("subcode",),
    ToolErrorKind.UNSUPPORTED_PROTOCOL_VERSION: ("supported",),
    ToolErrorKind.FRAME_TOO_LARGE: ("frame_bytes", "limit"),
    ToolErrorKind.BEHAVIOR_VERSION_UNSUPPORTED: ("requested",),
}


def _wire_fields(wire: ToolErrorWire, message: str | None) -> tuple[str, dict[str, Any]]:
    """The sentence and the :class:`ToolError` keyword fields (``kind`` among
    them) of ``wire``; see :meth:`ToolError.from_wire` for the sentence."""
    fields: dict[str, Any] = {"kind": ToolErrorKind(wire.code)}
    carried: str | None = None
    for field in wire.__struct_fields__:
        value = getattr(wire, field)
        attribute = _ATTRIBUTE_OF[field]
        if attribute == "message":
            carried = value
        else:
            fields[attribute] = tuple(value) if field == "supported" else value
    if carried is not None:
        return carried, fields
    if message is not None:
        return message, fields
    return _sentence(fields), fields


def _sentence(fields: dict[str, Any]) -> str:
    """A sentence for a wire error that carries none and came without one."""
    K = ToolErrorKind
    kind, tool = fields["kind"], repr(fields.get("tool_id"))
    versions = ", ".join(fields.get("supported") or ()) or "none"
    sentences = {
        K.TIMEOUT: f"tool {tool} timed out after {fields.get('elapsed_ms')} ms",
        K.CANCELLED: f"tool {tool} call was cancelled",
        K.TOOL_NOT_FOUND: f"no tool has the id {tool}",
        K.SESSION_MISMATCH: "the session does not own the call",
        K.CONNECTION_LOST: f"connection to tool {tool} lost",
        K.UNSUPPORTED_PROTOCOL_VERSION: f"unsupported protocol version; supported: {versions}",
        K.FRAME_TOO_LARGE: (
            f"a frame of {fields.get('frame_bytes')} bytes exceeds the"
            f" {fields.get('limit')}-byte limit"
        ),
        K.BEHAVIOR_VERSION_UNSUPPORTED: (
            f"tool {tool} does not support behavior version {fields.get('requested')!r}"
        ),
    }
    return sentences.get(kind, f"{kind.value} error")


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """A successful terminal: the tool's output value.

    ``kind`` is the ``ToolOutputWire`` kind: ``"json"`` (``value`` is any
    JSON-able value, msgspec Structs included; what the Rust servers send) or
    ``"text"`` (``value`` is a str).
    """

    value: Any
    kind: Literal["json", "text"] = "json"

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


class ToolContext:
    """One call's context: its id, whether the caller wants progress, and its
    cancellation signal.

    Cancellation is asyncio-native: the runner runs the tool in its own task and
    cancels that task, so a tool observes cancellation as ``CancelledError`` at
    its next ``await`` (clean up in ``finally``). :attr:`cancelled` is for code
    that cannot await (a synchronous ``run`` in a worker thread polls it).
    :meth:`cancel` may be called from any thread.

    Raises:
        IdentifierError: ``call_id`` is empty.
    """

    __slots__ = ("_callbacks", "_cancelled", "_lock", "call_id", "wants_progress")

    def __init__(self, call_id: str, *, wants_progress: bool = True) -> None:
        self.call_id: Final = validate_tool_call_id(call_id)
        self.wants_progress: Final = wants_progress
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ToolContext(call_id={self.call_id!r}, wants_progress={self.wants_progress},"
            f" cancelled={self._cancelled})"
        )

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called: by the caller, or by the runner
        when the call's deadline passed or its consumer went away."""
        return self._cancelled

    def cancel(self) -> None:
        """Ask the call to stop. The runner cancels the tool's task and ends the
        call with a ``cancelled`` error. Idempotent."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (once, with no arguments) when the call is cancelled,
        at once if it already was. Returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class Tool(Generic[ArgsT]):
    """Base class of every tool.

    A subclass sets ``id`` (``SEG`` or ``SEG:SEG``), ``description``,
    ``args_type`` (a msgspec Struct: its JSON Schema is the input schema) and
    ``capabilities`` (``streaming`` set when it streams), and implements either
    :meth:`execute` (streams) or :meth:`run` (does not). A tool whose JSON
    results have one type may declare it as ``result_type`` (its JSON Schema is
    the output schema, e.g. MCP's ``outputSchema``).

    Raises:
        TypeError: at class definition, a tool with an ``id`` that implements
            neither ``execute`` nor ``run``, or whose ``args_type`` is not a
            msgspec Struct.
        IdentifierError: at class definition, an invalid ``id``.
        TypeError: at instantiation, a class that sets no ``id`` (an abstract base).
    """

    id: str
    description: str = ""
    args_type: type[ArgsT]
    capabilities: ToolCapabilities = ToolCapabilities()
    result_type: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            return  # an intermediate base class
        validate_tool_id(cls.id)
        args_type = getattr(cls, "args_type", None)
        if not (isinstance(args_type, type) and issubclass(args_type, msgspec.Struct)):
            raise TypeError(f"tool {cls.id!r}: args_type must be a msgspec Struct class")
        if cls.execute is Tool.execute and cls.run is Tool.run:
            raise TypeError(f"tool {cls.id!r} must implement execute() or run()")

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # A class without `id` is an intermediate base (see __init_subclass__);
        # refusing its instances here keeps a missing `id` from surfacing later,
        # deep inside a call, as an AttributeError.
        if not isinstance(getattr(cls, "id", None), str):
            raise TypeError(
                f"{cls.__name__} cannot be instantiated: a tool class must set `id`"
                " (a class without one is an abstract base)"
            )
        return super().__new__(cls)

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of ``args_type``."""
        return msgspec.json.schema(self.args_type)

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of ``result_type``, or ``None`` when none is declared."""
        if self.result_type is None:
            return None
        return msgspec.json.schema(self.result_type)

    def execute(self, ctx: ToolContext, args: ArgsT) -> AsyncIterator[ToolEvent]:
        """Yield progress, then one terminal (yield a :class:`ToolResult`, or raise
        or yield a :class:`ToolError`). Honour ``ctx.wants_progress``.

        A tool that implements :meth:`run` instead leaves this alone; the runner
        calls ``run`` (in a thread when it is synchronous).
        """
        raise NotImplementedError(f"{type(self).__name__} implements run(), not execute()")

    def run(self, ctx: ToolContext, args: ArgsT) -> Any:
        """Return the result (``async def`` or plain ``def``): a
        :class:`ToolResult`, or any JSON-able value as the JSON output. Raise
        :class:`ToolError` to fail."""
        raise NotImplementedError(f"{type(self).__name__} implements execute(), not run()")

    @classmethod
    def streams(cls) -> bool:
        """True when the tool implements :meth:`execute`."""
        return cls.execute is not Tool.execute
