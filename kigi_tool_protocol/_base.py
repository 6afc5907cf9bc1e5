"""The one base Struct that carries the wire configuration.

Every wire type is frozen (a decoded frame is a value, never mutated in place)
and keyword-only (field order is the wire order and may grow; callers name
fields). msgspec inherits ``frozen`` and ``forbid_unknown_fields`` but not
``kw_only``, so each subclass restates ``kw_only=True``; a test pins the
configuration of every public wire class.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._limits import U32_MAX

__all__ = ("U32", "U64", "WireStruct")

#: Unsigned integer fields, range-checked on decode (Python ints are unbounded).
U32 = Annotated[int, msgspec.Meta(ge=0, le=U32_MAX)]
#: msgspec cannot express ``le=2**64 - 1`` as a constraint, but its decoder
#: already refuses integers past the uint64 range, so ``ge=0`` completes the check.
U64 = Annotated[int, msgspec.Meta(ge=0)]


class WireStruct(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every wire type: frozen, keyword-only, unknown fields ignored."""
