"""The per-delta sizes the stream fold measures: the same figures whichever
shortcut measured them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime._consumer._stream_fold import _sizes

# Text that mixes ASCII, 2- and 3-byte characters, U+FFFD and lone surrogates.
_TEXT = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from("é€\ufffd😀\ud800"),
        st.characters(blacklist_categories=()),
    )
)


@given(_TEXT)
def test_sizes_are_the_utf8_length_its_floor_and_its_replacements(delta: str) -> None:
    """``_sizes`` gives the UTF-8 length, the fewest source bytes (each U+FFFD
    standing for one) and the U+FFFD count, with or without one in the text."""
    size = len(delta.encode("utf-8", "surrogatepass"))
    replaced = delta.count("\ufffd")
    assert _sizes(delta) == (size, size - 2 * replaced, replaced)
