"""``ToolError``: how a tool call failed, as one ``ToolErrorKind`` per wire error
code, and its lossless mapping to and from ``ToolErrorWire``.

The mapping is table-driven: each kind's wire variant comes from the
``ToolErrorWire`` union by its tag, and each wire field from one field table,
so a new wire error needs a kind and, at most, a table row. The JSON-RPC error
number comes from the protocol's one ``ERROR_CODES`` table.

Sans-IO.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import FrozenInstanceError
from enum import StrEnum
from typing import Any, Final, get_args

from kigi_tool_protocol import ToolErrorWire
from kigi_tool_protocol._tool_error import InternalErrorWire, error_code_for

__all__ = ("ToolError", "ToolErrorKind")


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

    An error is immutable once made: assigning an attribute raises
    ``FrozenInstanceError`` (an ``AttributeError``), so an error is made
    right the first time (a stopped call's from its ``ToolContext.cancel``
    reason) and :meth:`with_tool_id` returns a copy. The exception machinery's
    own ``__dunder__`` attributes (traceback, cause, context, notes) stay
    settable.

    Raises:
        TypeError: ``supported`` is a single ``str`` (not a list of versions).
        ValueError: ``kind`` is not a :class:`ToolErrorKind`, or a field the
            kind's wire variant requires is missing (``subcode`` for ``custom``,
            ``supported`` for ``unsupported_protocol_version``, ``frame_bytes``
            and ``limit`` for ``frame_too_large``, ``requested`` for
            ``behavior_version_unsupported``).
    """

    kind: ToolErrorKind
    message: str
    tool_id: str | None
    details: Any
    elapsed_ms: int | None
    subcode: str | None
    supported: tuple[str, ...] | None
    frame_bytes: int | None
    limit: int | None
    requested: str | None
    card_id: str | None
    request_id: str | None
    _has_detail: bool

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
        error_kind = ToolErrorKind(kind)
        fields: dict[str, Any] = {
            "kind": error_kind,
            "message": message,
            "tool_id": tool_id,
            "details": details,
            "elapsed_ms": elapsed_ms,
            "subcode": subcode,
            "supported": None if supported is None else _versions(supported),
            "frame_bytes": frame_bytes,
            "limit": limit,
            "requested": requested,
            "card_id": card_id,
            "request_id": request_id,
            # An ``internal_error`` read off the wire without a ``detail`` keeps none.
            "_has_detail": True,
        }
        missing = [name for name in _REQUIRED.get(error_kind, ()) if fields[name] is None]
        if missing:
            raise ValueError(f"a {error_kind.value!r} error needs {' and '.join(missing)}")
        for name, value in fields.items():
            self._set(name, value)
        super().__init__(message)

    def _set(self, name: str, value: Any) -> None:
        """Set an attribute while the error is being made (it is frozen after)."""
        object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__") and name.endswith("__"):
            # The exception machinery's own (``__traceback__``, ``__notes__``, ...).
            object.__setattr__(self, name, value)
            return
        raise FrozenInstanceError(
            f"a ToolError is immutable once made; cannot assign {name!r}"
            " (make the error right the first time)"
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"a ToolError is immutable once made; cannot delete {name!r}")

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
    def frame_too_large(cls, frame_bytes: int, limit: int, message: str | None = None) -> ToolError:
        """A ``frame_too_large`` error: a frame of ``frame_bytes`` bytes exceeded
        ``limit``; ``message`` says so in a host's own words (else the default)."""
        return cls(
            ToolErrorKind.FRAME_TOO_LARGE,
            f"a frame of {frame_bytes} bytes exceeds the {limit}-byte limit"
            if message is None
            else message,
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
        self._set("_has_detail", not isinstance(wire, InternalErrorWire) or wire.detail is not None)

    def with_tool_id(self, tool_id: str) -> ToolError:
        """This error with ``tool_id`` set: ``self`` when it names a tool
        already, else a copy naming ``tool_id`` (an error is immutable)."""
        if self.tool_id is not None:
            return self
        copy = type(self).__new__(type(self), *self.args)
        for name, value in vars(self).items():
            object.__setattr__(copy, name, value)
        object.__setattr__(copy, "tool_id", tool_id)
        return copy

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
