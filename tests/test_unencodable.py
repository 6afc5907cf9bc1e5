"""Tests for ``_unencodable``: a string UTF-8 cannot encode, anywhere in
arguments handed over as Python values, is found and named by its place."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime._tools._unencodable import Unencodable, find_unencodable

#: What ``json.loads`` returns: JSON values whose strings are valid Unicode.
KEYS = st.text(st.characters(exclude_categories=("Cs",)), max_size=6).filter(
    lambda key: key.isidentifier()
)
VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def _places(value: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every container of ``value`` with its path, outermost first."""
    found = [(path, value)] if isinstance(value, dict | list) else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _places(child, f"{path}.{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _places(child, f"{path}[{index}]")
    return found


@given(value=VALUES)
def test_valid_json_values_hold_nothing_unencodable(value: Any) -> None:
    """Whatever ``json.loads`` gives for valid UTF-8 JSON is let through."""
    assert find_unencodable(value) is None
    assert find_unencodable(json.loads(json.dumps(value))) is None


@given(value=VALUES, surrogate=SURROGATES, as_key=st.booleans(), data=st.data())
def test_a_lone_surrogate_anywhere_is_named_by_its_place(
    value: Any, surrogate: str, as_key: bool, data: st.DataObject
) -> None:
    """A lone surrogate put in any object (as a key) or any array (as an
    item) is found, at that container's path (its key's path for a value)."""
    root = {"arg": value}
    path, container = data.draw(st.sampled_from(_places(root)))
    bad = f"x{surrogate}"
    if isinstance(container, dict):
        if as_key:
            container[bad] = 1
            expected = Unencodable(path, f"the object key {bad!a} is not valid Unicode")
        else:
            container["zz_bad"] = bad
            expected = Unencodable(f"{path}.zz_bad", f"the string {bad!a} is not valid Unicode")
    else:
        container.append(bad)
        expected = Unencodable(
            f"{path}[{len(container) - 1}]", f"the string {bad!a} is not valid Unicode"
        )
    assert find_unencodable(root) == expected


def test_what_json_loads_returns_for_an_escaped_surrogate_is_found() -> None:
    """The model's arguments as ``json.loads`` decodes ``"\\ud800"``."""
    assert find_unencodable(json.loads('{"\\ud800": 1}')) == Unencodable(
        "$", "the object key '\\ud800' is not valid Unicode"
    )
    assert find_unencodable(json.loads('{"a": [1, "\\udfff"]}')) == Unencodable(
        "$.a[1]", "the string '\\udfff' is not valid Unicode"
    )


def test_a_cycle_and_a_deep_nest_end() -> None:
    """A value that holds itself is looked at once; a deep nest needs no recursion."""
    loop: list[Any] = []
    loop.append(loop)
    assert find_unencodable(loop) is None
    deep: Any = "\ud800"
    for _ in range(100_000):
        deep = [deep]
    found = find_unencodable(deep)
    assert found is not None
    assert found.path == "$" + "[0]" * 100_000
