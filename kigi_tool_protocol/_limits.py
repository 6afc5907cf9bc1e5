"""Named bounds of the wire: integer ranges, frame and delta sizes, timeouts."""

from __future__ import annotations

from typing import Final

__all__ = ()

#: Source bytes one streamed delta may consume when ``StreamingSpec.max_delta_bytes``
#: is unset. Large enough that a fast tool needs few frames, small enough that one
#: busy tick cannot flood a harness with a single enormous frame. A larger backlog
#: is paced out over several frames; nothing is dropped.
DEFAULT_MAX_DELTA_BYTES: Final = 16 * 1024

#: The largest frame any tool may declare (``ToolCapabilities.max_frame_bytes`` is
#: clamped to it), and the decoders' default limit. A frame larger than the
#: effective limit is rejected before it is parsed, so a hostile peer cannot make a
#: decoder allocate for it.
MAX_FRAME_BYTES_CEILING: Final = 16 * 1024 * 1024

#: A tool call's deadline when ``ToolCapabilities.timeout_ms`` is absent.
DEFAULT_TIMEOUT_MS: Final = 60_000

#: Ranges of the Rust integer types the wire uses. Python ints are unbounded and
#: msgspec's JSON decoder hands back integers of any size, so every wire integer is
#: range-checked against these; a value outside them is a decode error.
U32_MAX: Final = 2**32 - 1
U64_MAX: Final = 2**64 - 1
I32_MIN: Final = -(2**31)
I32_MAX: Final = 2**31 - 1
I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1
