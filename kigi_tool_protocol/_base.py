"""The one base Struct that carries the wire configuration, and the integer types.

Every wire type is frozen (a decoded frame is a value, never mutated in place)
and keyword-only (field order is the wire order and may grow; callers name
fields). msgspec inherits ``frozen`` and ``forbid_unknown_fields`` but not
``kw_only``, so each subclass restates ``kw_only=True``; a test pins the
configuration of every public wire class.

Optional fields default to ``None`` and the classes that have them set
``omit_defaults=True``, so ``None`` (absent, or ``null`` on the wire) is never
written. A ``bool`` that must always be written defaults through
:func:`always_false`: ``omit_defaults`` only treats *empty collection* factories
as defaults, never a plain callable, so ``false`` stays on the wire.

u64 fields are the one range msgspec cannot check for us: its integer
constraints must fit an int64, and its JSON decoder returns integers of any size.
``U64`` therefore checks ``>= 0`` during decode and each struct holding one calls
:func:`check_u64` from ``__post_init__``; msgspec reports a ``ValueError`` raised
there as a validation error at the struct's path, and a constructed value is
checked the same way.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._limits import I32_MAX, I32_MIN, I64_MAX, I64_MIN, U32_MAX, U64_MAX

__all__ = ()

#: Unsigned 32-bit integer fields, range-checked on decode.
U32 = Annotated[int, msgspec.Meta(ge=0, le=U32_MAX)]
#: Unsigned 64-bit integer fields: ``>= 0`` on decode; the upper bound is checked
#: by :func:`check_u64` in the holder's ``__post_init__``.
U64 = Annotated[int, msgspec.Meta(ge=0)]
#: Signed 32-bit integer fields (JSON-RPC error codes), range-checked on decode.
I32 = Annotated[int, msgspec.Meta(ge=I32_MIN, le=I32_MAX)]
#: Signed 64-bit integer fields (numeric JSON-RPC ids), range-checked on decode.
I64 = Annotated[int, msgspec.Meta(ge=I64_MIN, le=I64_MAX)]


class WireStruct(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every wire type: frozen, keyword-only, unknown fields ignored."""


def always_false() -> bool:
    """Default factory of the ``bool`` fields that are always written (see module doc)."""
    return False


def check_u64(name: str, value: int | None) -> None:
    """Check an unsigned 64-bit field.

    Raises:
        ValueError: ``value`` is negative or larger than 2**64 - 1.
    """
    if value is not None and not 0 <= value <= U64_MAX:
        raise ValueError(f"`{name}` = {value} is outside the u64 range 0..={U64_MAX}")
