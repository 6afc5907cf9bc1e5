"""The package layout's rule, as h11 keeps it: a private module's ``__all__``
lists only what its package exports, so ``__all__`` never advertises a name a
user cannot import from the public surface."""

from __future__ import annotations

import ast
import importlib
import importlib.util
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
    """Producer core, tool model, consumer core, harness pieces, transport and
    CLI are subpackages of their own."""
    modules = set(_private_modules())
    for part in ("_producer", "_tools", "_consumer", "_harness", "_transport", "_cli"):
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


def test_the_harness_pieces_sit_above_the_consumer_core() -> None:
    """The monitor and history repair live in ``_harness``, which builds on the
    consumer core; no consumer module imports a harness one (the core stays
    what a harness uses, not what it is)."""
    import kigi_tool_runtime._consumer as consumer
    import kigi_tool_runtime._harness as harness

    harness_modules = {
        info.name for info in pkgutil.iter_modules(harness.__path__, harness.__name__ + ".")
    }
    assert {"kigi_tool_runtime._harness._monitor", "kigi_tool_runtime._harness._history"} <= (
        harness_modules
    )
    for info in pkgutil.iter_modules(consumer.__path__, consumer.__name__ + "."):
        assert not info.name.endswith(("_monitor", "_history")), info.name
        spec = importlib.util.find_spec(info.name)
        assert spec is not None
        assert spec.origin is not None
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        imported = [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ] + [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        ]
        assert not [name for name in imported if "_harness" in name], info.name


def _foreign_private_reads(module: str) -> list[str]:
    """Each ``x._name`` in ``module`` whose ``x`` is not ``self`` or ``cls``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    return [
        f"{ast.unparse(node.value)}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_a_stream_state_owns_its_data() -> None:
    """The fold's steps read only their own fields; the public view reaches
    another state only through its fold (the one door the reassembler uses)."""
    assert _foreign_private_reads("kigi_tool_runtime._consumer._stream_fold") == []
    reads = _foreign_private_reads("kigi_tool_runtime._consumer._stream_state")
    assert set(reads) == {"state._fold"}
    assert len(reads) <= 3
