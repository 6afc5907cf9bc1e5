"""The streaming contract's wire types: a tool's ``StreamingSpec`` and the
``PartialResultPayload`` each streamed delta travels in."""

from __future__ import annotations

from ._base import U32, U64, WireStruct, check_u64
from ._limits import U32_MAX, U64_MAX

__all__ = ("PartialResultPayload", "StreamingSpec")


class StreamingSpec(WireStruct, frozen=True, kw_only=True, omit_defaults=True):
    """How a tool streams: the ``subkind`` its progress frames carry and the most
    source bytes one delta may consume (``None``: the 16 KiB default).

    Lenient like its Rust counterpart: unknown fields are ignored, and an empty
    subkind and a cap of 0 decode (a cap of 0 streams one character per frame).

    Raises:
        TypeError: on construction, ``subkind`` is not a ``str`` or
            ``max_delta_bytes`` is neither an ``int`` nor ``None``.
        ValueError: on construction, ``max_delta_bytes`` is outside the u32 range.
    """

    subkind: str
    max_delta_bytes: U32 | None = None

    def __post_init__(self) -> None:
        # Decoding has checked both fields already; a spec built in Python has
        # not (msgspec checks types only on decode), and a wrong one would be
        # encoded as written.
        if not isinstance(self.subkind, str):
            raise TypeError(f"`subkind` must be a str, not {type(self.subkind).__name__}")
        cap = self.max_delta_bytes
        if cap is not None:
            if not isinstance(cap, int) or isinstance(cap, bool):
                raise TypeError(
                    f"`max_delta_bytes` must be an int or None, not {type(cap).__name__}"
                )
            if not 0 <= cap <= U32_MAX:
                raise ValueError(
                    f"`max_delta_bytes` = {cap} is outside the u32 range 0..={U32_MAX}"
                )


class PartialResultPayload(WireStruct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One streamed delta. Strict: an unknown field is a decode error, so schema
    drift between producer and consumer is caught instead of misread.

    ``total_bytes`` is the monotonic count of bytes the source has produced (not
    the length of ``delta``), a u64; ``truncated`` says content was lost upstream
    and will never be delivered; ``gap`` says the bytes between the previous delta
    and this one were lost (the tail buffer overflowed). All four fields are always
    written; the flags may be missing on decode (false) but not ``null``.

    Raises:
        ValueError: on construction, ``total_bytes`` is outside the u64 range.
    """

    delta: str
    total_bytes: U64
    truncated: bool = False
    gap: bool = False

    def __post_init__(self) -> None:
        # check_u64, inlined: one is built for every streamed delta.
        if not 0 <= self.total_bytes <= U64_MAX:
            check_u64("total_bytes", self.total_bytes)
