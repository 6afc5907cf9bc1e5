"""The API page (``docs/api.md``) is the public surface: per package, the names it
lists are exactly that package's ``__all__``, each listed once with a line
saying what it is for, and each importable from the package; the surface stays
at most :data:`MAX_PUBLIC_NAMES` names, and what the page says is not exported
imports from the private module it names and nowhere public."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"

#: Every public package, in the order the section lists them.
PACKAGES = (
    "kigi_tool_protocol",
    "kigi_tool_runtime",
    "kigi_tool_runtime.testing",
    "kigi_tool_runtime.mcp",
    "kigi_tool_runtime.fastmcp",
    "kigi_tool_runtime.nats",
    "kigi_tool_runtime.langchain",
    "kigi_tool_runtime.pydantic_ai",
    "kigi_tool_runtime.adk",
    "kigi_tool_runtime.acp",
)

#: The most names all the packages may export together (issue #35: a surface
#: chosen on purpose, not every helper a module happens to have).
MAX_PUBLIC_NAMES = 150

_HEADING = re.compile(r"^## `(?P<package>[\w.]+)`$")
_PRIVATE_ROW = re.compile(r"^\| `(?P<module>[\w.]+)` \| (?P<names>`\w+`(?:, `\w+`)*) \| \S.* \|$")
_TOTAL = re.compile(r"with what it is for: (?P<total>\d+)\s+names across the ten packages")
_ENTRY = re.compile(r"^- `(?P<name>\w+)`: (?P<what>\S.*)$")


def _api_section() -> list[str]:
    return API_PAGE.read_text(encoding="utf-8").splitlines()


def _listed() -> dict[str, list[str]]:
    """Each package's listed names, in the README's order."""
    listed: dict[str, list[str]] = {}
    package = None
    for line in _api_section():
        heading = _HEADING.match(line)
        if heading:
            package = heading["package"]
            assert package not in listed, f"{package} has two headings"
            listed[package] = []
            continue
        if line.startswith("- "):
            entry = _ENTRY.match(line)
            assert entry, f"not a `name`: what-it-is-for line: {line!r}"
            assert package is not None, f"{line!r} comes before any package heading"
            listed[package].append(entry["name"])
    return listed


def test_the_section_lists_every_public_package_in_order() -> None:
    assert tuple(_listed()) == PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_the_listed_names_are_all_of_the_package(package: str) -> None:
    """The names listed under the package equal its ``__all__`` exactly, each once."""
    names = _listed()[package]
    module = importlib.import_module(package)
    exported = module.__all__
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    assert sorted(set(names) - set(exported)) == [], "listed on the API page, not exported"
    assert sorted(set(exported) - set(names)) == [], "exported, not listed on the API page"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_imports(package: str) -> None:
    """``from package import name`` works for every name of ``__all__``."""
    module = importlib.import_module(package)
    for name in module.__all__:
        namespace: dict[str, object] = {}
        exec(f"from {package} import {name}", namespace)
        assert namespace[name] is getattr(module, name)


def test_the_removed_plumbing_is_still_importable_privately() -> None:
    """What left the public surface still imports from its private module, as
    CHANGELOG.md says, so internal code and its tests go on working."""
    moved = {
        "kigi_tool_protocol._methods": ["METHOD_PING", "METHOD_SESSION_OPEN"],
        "kigi_tool_runtime._lines": ["LineReader", "read_lines"],
        "kigi_tool_runtime._wire._split": ["LineSplitter"],
        "kigi_tool_runtime._text": ["MAX_DETAIL_CHARS"],
        "kigi_tool_runtime._transport._file_follow": ["READ_BLOCK_BYTES"],
        "kigi_tool_runtime.mcp._mapping": [
            "ProgressNumbering",
            "StreamSummary",
            "closing_params",
            "notification_from_progress",
            "progress_params",
            "result_from_terminal",
        ],
        "kigi_tool_runtime.mcp._partial": [
            "final_params",
            "notification_from_partial",
            "partial_params",
            "partial_result_token",
        ],
        "kigi_tool_runtime.mcp._queued": ["OUTBOX_BYTES"],
        "kigi_tool_runtime.mcp._hold": ["RESPONSE_HOLD_S"],
        "kigi_tool_runtime.mcp._host": ["SETTLE_WAIT_S"],
        "kigi_tool_runtime.langchain._mapping": ["args_schema", "artifact"],
        "kigi_tool_runtime.langchain._fold": ["TOOL_EVENTS"],
        "kigi_tool_runtime.pydantic_ai._mapping": ["tool_definition"],
        "kigi_tool_runtime.acp._host": ["CONNECTION_CHECK_S", "LAST_UPDATE_WAIT_S", "tool_title"],
        "kigi_tool_runtime.acp._mapping": ["TextTail"],
    }
    for module_name, names in moved.items():
        module = importlib.import_module(module_name)
        home_name = max((p for p in PACKAGES if module_name.startswith(p + ".")), key=len)
        home = importlib.import_module(home_name)
        for name in names:
            assert hasattr(module, name), (module_name, name)
            assert name not in home.__all__, (home.__name__, name)


def _exported() -> dict[str, tuple[str, ...]]:
    return {package: importlib.import_module(package).__all__ for package in PACKAGES}


def test_the_surface_stays_small_and_the_page_says_its_size() -> None:
    """All packages together export at most ``MAX_PUBLIC_NAMES`` names, and the
    page's opening states the total as it is."""
    total = sum(len(names) for names in _exported().values())
    assert total <= MAX_PUBLIC_NAMES, f"{total} public names, more than {MAX_PUBLIC_NAMES}"
    stated = _TOTAL.search(" ".join(API_PAGE.read_text(encoding="utf-8").split()))
    assert stated is not None, "the page's opening does not state the total"
    assert int(stated["total"]) == total


def test_every_exported_name_is_on_the_page() -> None:
    """Each name of every package's ``__all__`` has its own line on the page."""
    page = API_PAGE.read_text(encoding="utf-8")
    for package, names in _exported().items():
        for name in names:
            assert f"- `{name}`: " in page, (package, name)


def _private_rows() -> list[tuple[str, list[str]]]:
    rows = []
    for line in _api_section():
        row = _PRIVATE_ROW.match(line)
        if row:
            rows.append((row["module"], re.findall(r"`(\w+)`", row["names"])))
    return rows


def test_what_the_page_says_is_not_exported_lives_where_it_says() -> None:
    """Each row of "Not exported" names a private module that has every one of
    its names, none of which any package exports (the NATS ``Follower`` is not
    the exported frame-log ``Follower``)."""
    rows = _private_rows()
    assert len(rows) >= 40, "the page's table of what is not exported is missing"
    packages = [importlib.import_module(package) for package in PACKAGES]
    for module_name, names in rows:
        assert any(module_name.startswith(p + ".") for p in PACKAGES), module_name
        assert module_name.rsplit(".", 1)[1].startswith("_"), f"{module_name} is not private"
        module = importlib.import_module(module_name)
        for name in names:
            assert hasattr(module, name), (module_name, name)
            value = getattr(module, name)
            for package in packages:
                assert getattr(package, name, None) is not value, (package.__name__, name)
