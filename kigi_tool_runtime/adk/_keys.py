"""The keys under which kigi's ADK events and function responses carry the
kigi frame and figures (``_mapping`` Rules 2, 3): names only, shared by the
mapping and the application-side fold."""

from __future__ import annotations

from typing import Final

__all__ = ()

#: ``custom_metadata`` key of a partial event holding the exact kigi frame.
META_FRAME: Final = "dev.kigi/frame"
#: ``custom_metadata`` key of a partial event holding the frame's per-call ``seq``.
META_SEQ: Final = "dev.kigi/seq"
#: ``custom_metadata`` key of the partial event that only says a loss known at
#: the end; it holds the call's id.
META_CLOSING: Final = "dev.kigi/closing"
#: Key of the function response holding the kigi figures (Rule 3).
RESPONSE_KEY: Final = "kigi"
