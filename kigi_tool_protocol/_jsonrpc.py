"""JSON-RPC 2.0 envelopes, in the subset the protocol uses.

- ``jsonrpc`` is required and exactly the string ``"2.0"``. It is the struct
  tag of every envelope, so it is written first and checked on decode; the
  codecs decode an envelope type in a union with :class:`Unversioned`, which
  makes msgspec insist on the tag being present.
- ``id`` is a string or an i64 (``null``, floats, bools and out-of-range numbers
  are rejected; ``""`` is accepted at this layer).
- ``params`` is required on requests and notifications (``null`` is a value).
- A response has exactly one of ``result`` and ``error``; ``"result": null``
  counts as absent.

Envelopes are generic in what they carry: ``JsonRpcRequest[ToolCallParams]``
decodes the params typed in one pass; the bare class carries any JSON value.
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

import msgspec

from ._base import I32, I64, U64, WireStruct, check_u64
from ._identifiers import SessionId

__all__ = ("JsonRpcError", "JsonRpcNotification", "JsonRpcRequest", "JsonRpcResponse")

#: The only ``jsonrpc`` value the protocol accepts.
JSONRPC_VERSION: Final = "2.0"

P = TypeVar("P")
R = TypeVar("R")

#: A request id: a string, or an integer in the i64 range.
JsonRpcId = str | I64


class JsonRpcError(WireStruct, frozen=True, kw_only=True, omit_defaults=True):
    """The ``error`` of a failed response: ``code`` (i32), ``message``, and ``data``
    (written only when set; for a failed tool call, a ``ToolErrorWire``)."""

    code: I32
    message: str
    data: Any = None


class _Envelope(
    WireStruct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="jsonrpc",
    tag=JSONRPC_VERSION,
):
    @property
    def jsonrpc(self) -> str:
        """Always ``"2.0"``."""
        return JSONRPC_VERSION


class JsonRpcRequest(_Envelope, Generic[P], frozen=True, kw_only=True):
    """A call that expects a response with the same ``id``.

    Written as ``jsonrpc, id, session_id (when set), method, params``.
    """

    id: JsonRpcId
    session_id: SessionId | None = None
    method: str
    params: P


class JsonRpcNotification(_Envelope, Generic[P], frozen=True, kw_only=True):
    """A one-way message (no ``id``). ``seq`` is the sender's per-connection u64
    counter; it and ``session_id`` are written only when set.

    Raises:
        ValueError: on construction, ``seq`` is outside the u64 range.
    """

    session_id: SessionId | None = None
    seq: U64 | None = None
    method: str
    params: P

    def __post_init__(self) -> None:
        check_u64("seq", self.seq)


class JsonRpcResponse(_Envelope, Generic[R], frozen=True, kw_only=True):
    """The answer to request ``id``: exactly one of ``result`` and ``error``.

    Raises:
        ValueError: both or neither of ``result`` and ``error`` are set (on decode,
            a decode error; ``"result": null`` counts as absent).
    """

    id: JsonRpcId
    session_id: SessionId | None = None
    result: R | None = None
    error: JsonRpcError | None = None

    def __post_init__(self) -> None:
        if (self.result is None) == (self.error is None):
            which = "both" if self.error is not None else "neither"
            raise ValueError(
                f"a response needs exactly one of `result` and `error`, got {which} "
                "(`result: null` counts as absent)"
            )


#: Any incoming JSON-RPC message, as :func:`decode_message` returns it.
JsonRpcMessage = JsonRpcRequest[Any] | JsonRpcNotification[Any] | JsonRpcResponse[Any]


class Unversioned(msgspec.Struct, frozen=True, tag_field="jsonrpc", tag=""):
    """Decoded beside an envelope type so msgspec requires the ``jsonrpc`` tag;
    matching it means ``"jsonrpc": ""``, which is still wrong."""

    def __post_init__(self) -> None:
        raise ValueError('`jsonrpc` must be "2.0", got ""')


ENVELOPE_TYPES: Final = (JsonRpcRequest, JsonRpcNotification, JsonRpcResponse)
