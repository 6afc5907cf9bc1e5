"""The public surface of ``kigi_tool_runtime`` and ``kigi_tool_runtime.testing``."""

from __future__ import annotations

import inspect
import types

import pytest

import kigi_tool_runtime as kr


def _public(module: types.ModuleType) -> set[str]:
    """Names a user can reach that are neither private nor submodules."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
    }


@pytest.mark.parametrize("module_name", ["kigi_tool_runtime", "kigi_tool_runtime.testing"])
def test_all_is_complete_and_leaks_nothing(module_name: str) -> None:
    """__all__ is a tuple naming every public attribute exactly once, each of
    which exists, and nothing private is exported."""
    module = __import__(module_name, fromlist=["__all__"])
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert len(exported) == len(set(exported))
    assert _public(module) == set(exported)
    assert not [name for name in exported if name.startswith("_")]


def test_public_objects_come_from_private_modules() -> None:
    """Every exported class and function is defined in one of the package's own
    ``_modules`` (or the protocol package), so the curated ``__init__`` is the
    only public path to it."""
    for name in kr.__all__:
        value = getattr(kr, name)
        module = getattr(value, "__module__", None)
        if isinstance(value, type) or inspect.isfunction(value):
            assert module is not None
            assert module.startswith(("kigi_tool_runtime._", "kigi_tool_protocol.")), (
                name,
                module,
            )


def test_version_comes_from_the_package_metadata() -> None:
    """Both packages' ``__version__`` is the installed distribution's version."""
    from importlib.metadata import version

    import kigi_tool_protocol as kp

    assert kr.__version__ == kp.__version__ == version("kigi-tool-runtime")


def test_the_testing_kit_without_hypothesis_names_the_test_extra() -> None:
    """Importing ``kigi_tool_runtime.testing`` where Hypothesis is missing is an
    ImportError that says how to install it: the ``testing`` extra, which
    installs Hypothesis alone."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "sys.modules['hypothesis'] = None  # as if it were not installed\n"
        "import kigi_tool_runtime  # the runtime itself does not need it\n"
        "assert kigi_tool_runtime.ShellTool and kigi_tool_runtime.__all__\n"
        "try:\n"
        "    import kigi_tool_runtime.testing\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("ImportError kigi_tool_runtime.testing needs Hypothesis")
    assert "pip install 'kigi-tool-runtime[testing]'" in done.stdout
