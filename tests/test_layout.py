"""The package layout's rule, as h11 keeps it: a private module's ``__all__``
lists only what its package exports, so ``__all__`` never advertises a name a
user cannot import from the public surface."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import kigi_tool_protocol
import kigi_tool_runtime

#: The public packages; every other module under them is private.
PUBLIC = (
    "kigi_tool_protocol",
    "kigi_tool_runtime",
    "kigi_tool_runtime.langchain",
    "kigi_tool_runtime.acp",
    "kigi_tool_runtime.adk",
    "kigi_tool_runtime.fastmcp",
    "kigi_tool_runtime.mcp",
    "kigi_tool_runtime.nats",
    "kigi_tool_runtime.pydantic_ai",
    "kigi_tool_runtime.testing",
)


def _private_modules() -> list[str]:
    names = []
    for package in (kigi_tool_protocol, kigi_tool_runtime):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name not in PUBLIC and not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


def _home(name: str) -> ModuleType:
    """The nearest public package above the module ``name``."""
    homes = [public for public in PUBLIC if name.startswith(public + ".")]
    return importlib.import_module(max(homes, key=len))


def test_the_runtime_is_laid_out_as_its_pipeline() -> None:
    """Producer core, tool model, consumer core, transport and CLI are
    subpackages of their own."""
    modules = set(_private_modules())
    for part in ("_producer", "_tools", "_consumer", "_transport", "_cli"):
        assert f"kigi_tool_runtime.{part}" in modules


@pytest.mark.parametrize("name", _private_modules())
def test_a_private_modules_all_lists_only_what_its_package_exports(name: str) -> None:
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", ())
    home = _home(name)
    exported = set(home.__all__)
    assert not set(listed) - exported, (
        f"{name}.__all__ lists {sorted(set(listed) - exported)}, which {home.__name__}"
        " does not export"
    )
    for public in listed:
        assert getattr(home, public) is getattr(module, public)
