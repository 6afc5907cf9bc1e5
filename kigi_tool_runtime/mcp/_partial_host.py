"""The host side of SEP-2998 partial results with the official MCP client, which
does not know the draft yet: declaring it per call, and receiving its
notifications (the wire spellings are ``_partial``'s).

Rule 1. :func:`declaring_partial_results` wraps a client transport so that every
        ``tools/call`` whose ``_meta`` carries a ``partialResultToken`` also
        declares ``partialResults`` in its
        ``_meta["io.modelcontextprotocol/clientCapabilities"]`` (the client
        stamps that key with its own capabilities, which have no such field);
        every other message passes unchanged, in order.
Rule 2. :func:`partial_results_extension` hands each partial result, whole (the
        kigi frame under ``_meta`` included), to a handler, through the
        client's extension mechanism (the only way the official client
        delivers a notification method it does not know).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final

from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest
from pydantic import BaseModel, ConfigDict

from ._partial import CAPABILITY, CLIENT_CAPABILITIES_META, METHOD_PARTIAL_RESULT, TOKEN

__all__ = ("declaring_partial_results",)

#: The identifier the receiving extension advertises (SEP-2133 wants one).
EXTENSION_ID: Final = "dev.kigi/partial-results"


class PartialResultParams(BaseModel):
    """A partial result's params, every field kept (``model_dump(by_alias=True)``
    gives them back as sent)."""

    model_config = ConfigDict(extra="allow")


def declared(message: SessionMessage) -> SessionMessage:
    """``message`` with ``partialResults`` declared when it is a ``tools/call``
    carrying a ``partialResultToken`` (Rule 1); otherwise ``message`` itself."""
    inner = message.message
    if not isinstance(inner, JSONRPCRequest) or inner.method != "tools/call":
        return message
    params = dict(inner.params or {})
    meta = params.get("_meta")
    if not isinstance(meta, Mapping) or TOKEN not in meta:
        return message
    meta = dict(meta)
    capabilities = meta.get(CLIENT_CAPABILITIES_META)
    capabilities = dict(capabilities) if isinstance(capabilities, Mapping) else {}
    capabilities.setdefault(CAPABILITY, {})
    meta[CLIENT_CAPABILITIES_META] = capabilities
    params["_meta"] = meta
    request = JSONRPCRequest(jsonrpc=inner.jsonrpc, id=inner.id, method=inner.method, params=params)
    return SessionMessage(request, metadata=message.metadata)


class _DeclaringWriter:
    """A client write stream that declares partial results on the way (Rule 1)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(declared(item))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _DeclaringWriter:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc_val, exc_tb)
        return result


@asynccontextmanager
async def declaring_partial_results(transport: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The client ``transport`` (``stdio_client(...)``,
    ``streamable_http_client(url)``, ...) declaring partial results on every
    call that brings a token (Rule 1); pass it to ``Client(...)``."""
    async with transport as (reader, writer):
        yield reader, _DeclaringWriter(writer)


def partial_results_extension(
    handler: Callable[[Mapping[str, Any]], Awaitable[None] | None],
) -> ClientExtension:
    """A client extension (``Client(..., extensions=[...])``) handing each
    partial result's params, as sent, to ``handler`` (Rule 2)."""

    async def deliver(params: PartialResultParams) -> None:
        done = handler(params.model_dump(by_alias=True))
        if done is not None:
            await done

    binding = NotificationBinding(
        method=METHOD_PARTIAL_RESULT, params_type=PartialResultParams, handler=deliver
    )

    class _PartialResults(ClientExtension):
        identifier = EXTENSION_ID

        def notifications(self) -> tuple[NotificationBinding[Any], ...]:
            return (binding,)

    return _PartialResults()
