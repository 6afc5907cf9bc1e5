"""SEP-2998 partial results (draft): tool output on a channel of its own. Every
spelling of the draft lives here, so a change to the draft is a change to this
module alone.

Implemented: the draft revision :data:`DRAFT` (``notifications/tools/partial_result``).
Invariants:

Rule 1. A call gets partial results only when it declares them: its
        ``_meta["io.modelcontextprotocol/clientCapabilities"]`` holds
        ``partialResults`` (an object) *and* its ``_meta`` carries a
        ``partialResultToken`` (a string or an integer). A call that does not
        gets none (:func:`partial_result_token` answers ``None``); a declared
        call with a token of another type is refused (``ValueError``).
Rule 2. Each frame is one notification ``{"partialResultToken", "seq",
        "content": [{"type": "text", "text": ...}]}``: ``seq`` counts from 0 per
        token, in the order sent; the text is the frame's live text (its delta,
        after a one-line marker where bytes were lost, as ``message`` in
        progress); the exact kigi frame and its seq ride under ``_meta`` (the
        draft leaves loss, totals and append semantics to the consumer: the
        frame gives them).
Rule 3. The call's last partial result has ``"final": true`` and no frame: its
        content is the closing text (a loss known only at the end) or empty.
        The ``CallToolResult`` stays complete and authoritative.
Rule 4. A tool that streams is listed with ``annotations.streamingHint: true``
        (the tool definition's, ``_mapping.streaming_annotations``).
Rule 5. A host folds a partial result carrying a kigi frame back into exactly
        the ``tool_call_progress`` notification the stdio transport would have
        carried (:func:`notification_from_partial`), as it does progress;
        anything else (the final one, another server's) is a
        :class:`PartialNote`.

Nothing here imports the MCP SDK or an event loop: values in, JSON-able dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from kigi_tool_protocol import JsonRpcNotification, ToolCallProgressFrame
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS

from .._call._live import frame_json
from ._mapping import META_FRAME, META_SEQ

__all__ = ()

#: The draft this module implements.
DRAFT: Final = "SEP-2998 (draft as of 2026-12-01): notifications/tools/partial_result"
#: The notification's method.
METHOD_PARTIAL_RESULT: Final = "notifications/tools/partial_result"
#: The request ``_meta`` key holding the client's capabilities (2026-07-28).
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
#: The client capability a call declares to get partial results.
CAPABILITY: Final = "partialResults"
#: The request ``_meta`` key, and the notification field, of the call's token.
TOKEN: Final = "partialResultToken"


def _is_token(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def partial_result_token(meta: Mapping[str, Any] | None) -> str | int | None:
    """The token a ``tools/call``'s ``_meta`` declares partial results under
    (Rule 1), or ``None`` when the call does not declare them.

    Raises:
        ValueError: the call declares the capability with a token that is not a
            string or an integer.
    """
    if not isinstance(meta, Mapping):
        return None
    capabilities = meta.get(CLIENT_CAPABILITIES_META)
    declared = isinstance(capabilities, Mapping) and isinstance(
        capabilities.get(CAPABILITY), Mapping
    )
    if not declared or TOKEN not in meta:
        return None
    token = meta[TOKEN]
    if not _is_token(token):
        raise ValueError(f"_meta[{TOKEN!r}] must be a string or an integer, got {token!r}")
    return token  # type: ignore[no-any-return]


def partial_params(
    token: str | int, seq: int, frame: ToolCallProgressFrame[Any], text: str
) -> dict[str, Any]:
    """The params of the partial result carrying ``frame`` as the call's
    ``seq``-th (Rule 2), ``text`` its live text.

    Raises:
        WireError: the frame holds a value JSON cannot carry.
        ValueError: ``seq`` is negative.
    """
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    return {
        TOKEN: token,
        "seq": seq,
        "content": [{"type": "text", "text": text}],
        "_meta": {META_FRAME: frame_json(frame), META_SEQ: seq},
    }


def final_params(token: str | int, seq: int, text: str) -> dict[str, Any]:
    """The params of the call's last partial result (Rule 3), the ``seq``-th.

    Raises:
        ValueError: ``seq`` is negative.
    """
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    content = [{"type": "text", "text": text}] if text else []
    return {TOKEN: token, "seq": seq, "content": content, "final": True}


class PartialNote(NamedTuple):
    """A partial result that carries no kigi frame: the call's final one, or
    another server's (kept, never taken for output)."""

    token: str | int | None
    seq: int | None
    text: str
    final: bool


def notification_from_partial(
    params: Mapping[str, Any],
) -> JsonRpcNotification[Any] | PartialNote:
    """The kigi ``tool_call_progress`` notification a partial result carries
    under ``_meta`` (Rule 5), for a ``Reassembler`` to absorb; or a
    :class:`PartialNote`. The frame is not decoded here: the reassembler
    decodes it strictly and reports a bad one."""
    seq = params.get("seq")
    seq = seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None
    meta = params.get("_meta")
    if isinstance(meta, Mapping) and META_FRAME in meta:
        kigi_seq = meta.get(META_SEQ)
        if isinstance(kigi_seq, int) and not isinstance(kigi_seq, bool) and kigi_seq >= 0:
            seq = kigi_seq
        return JsonRpcNotification(
            method=METHOD_TOOL_CALL_PROGRESS, seq=seq, params=meta[META_FRAME]
        )
    token = params.get(TOKEN)
    texts = []
    content = params.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            texts.append(item["text"])
    return PartialNote(
        token if _is_token(token) else None, seq, "".join(texts), params.get("final") is True
    )
