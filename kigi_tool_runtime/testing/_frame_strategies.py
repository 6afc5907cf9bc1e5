"""Hypothesis strategies for single progress frames, well-formed or malformed.

Whole frame logs (well-formed and damaged) live in ``_consumer_strategies``;
sources, schedules and payload values in ``_strategies``. These fill the gap
between them: the frames a tool yields (``CustomProgress``), the frames a
harness receives (``ToolCallProgressFrame``), and payload bodies a strict
consumer must reject.
"""

from __future__ import annotations

from typing import Any, Final

from hypothesis import strategies as st

from kigi_tool_protocol import (
    CustomProgress,
    PartialResultPayload,
    ToolCallProgressFrame,
    msgpack_codec,
)

from ._strategies import U32_MAX, U64_MAX, partial_payloads

__all__ = ()

_SUBKINDS: Final = ("bash_output_chunk", "test_chunk", "x")

#: Payload bodies the strict ``PartialResultPayload`` decode must reject, each
#: with the JSON path of the fault: a missing or mistyped field, a ``null``
#: flag, a count outside the u64 range, an unknown field, not an object.
MALFORMED_PAYLOADS: Final[tuple[tuple[Any, str], ...]] = (
    ({"total_bytes": 1}, "$"),
    ({"delta": "a"}, "$"),
    ({"delta": 1, "total_bytes": 1}, "$.delta"),
    ({"delta": None, "total_bytes": 1}, "$.delta"),
    ({"delta": "a", "total_bytes": -1}, "$.total_bytes"),
    # The u64 bound is checked after the fields are built, so it names the body.
    ({"delta": "a", "total_bytes": U64_MAX + 1}, "$"),
    ({"delta": "a", "total_bytes": 1.5}, "$.total_bytes"),
    ({"delta": "a", "total_bytes": "1"}, "$.total_bytes"),
    ({"delta": "a", "total_bytes": 1, "gap": None}, "$.gap"),
    ({"delta": "a", "total_bytes": 1, "truncated": None}, "$.truncated"),
    ({"delta": "a", "total_bytes": 1, "gap": "true"}, "$.gap"),
    ({"delta": "a", "total_bytes": 1, "extra": 0}, "$"),
    (["a", 1], "$"),
    ("a", "$"),
    (None, "$"),
)


def malformed_payloads() -> st.SearchStrategy[tuple[Any, str]]:
    """A payload body the strict decode must reject and the JSON path of its
    fault (``"$"`` for the body itself): one of :data:`MALFORMED_PAYLOADS`, or
    a well-formed payload with one field broken at random."""
    broken_field = st.builds(
        _break_field,
        partial_payloads(),
        st.sampled_from(["delta", "total_bytes", "truncated", "gap"]),
        st.one_of(st.none(), st.lists(st.integers(), max_size=2), st.just({})),
    )
    return st.one_of(st.sampled_from(MALFORMED_PAYLOADS), broken_field)


def _break_field(
    payload: PartialResultPayload, field: str, value: object
) -> tuple[dict[str, Any], str]:
    body: dict[str, Any] = msgpack_codec.decode(msgpack_codec.encode(payload), dict)
    body[field] = value
    return body, f"$.{field}"


def progress_frames(
    payloads: st.SearchStrategy[Any] | None = None,
    subkinds: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[CustomProgress]:
    """``CustomProgress`` frames as a streaming tool yields them: a subkind and a
    ``PartialResultPayload`` (any from :func:`partial_payloads` by default; not
    a consistent stream, see ``producer_runs`` for that). ``payloads`` may draw
    any JSON value instead (``json_values()``) for a consumer of other subkinds."""
    return st.builds(
        CustomProgress,
        subkind=st.sampled_from(_SUBKINDS) if subkinds is None else subkinds,
        payload=partial_payloads() if payloads is None else payloads,
    )


def tool_call_frames(
    bodies: st.SearchStrategy[Any] | None = None,
    tool_call_ids: st.SearchStrategy[str] | None = None,
    subkinds: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[ToolCallProgressFrame[Any]]:
    """``ToolCallProgressFrame``s as a harness receives them: a non-empty call
    id, a subkind (``kind``), a body (a ``PartialResultPayload`` by default) and
    a ``dropped_count`` that is absent, zero or any u32."""
    return st.builds(
        ToolCallProgressFrame,
        tool_call_id=(
            st.one_of(st.sampled_from(["call-0", "call-1"]), st.text(min_size=1, max_size=12))
            if tool_call_ids is None
            else tool_call_ids
        ),
        kind=st.sampled_from(_SUBKINDS) if subkinds is None else subkinds,
        body=partial_payloads() if bodies is None else bodies,
        dropped_count=st.one_of(st.none(), st.just(0), st.integers(1, U32_MAX)),
    )
