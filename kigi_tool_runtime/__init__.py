"""The kigi tool runtime: stream tool output as capped, UTF-8-complete deltas,
and reassemble it knowing exactly what was lost.

The names are loaded on first use (PEP 562): ``import kigi_tool_runtime`` alone
is cheap, and the first name asked for loads them all (``_exports``), so a
submodule imported on its own (the ``kigi-stream`` entry point) does not pay
for the rest of the package first.
"""

# Every name imported here is private: ``dir()`` of the package lists only
# what it exports.
import importlib as _importlib
import typing as _typing
from types import ModuleType as _ModuleType

if _typing.TYPE_CHECKING:
    from kigi_tool_protocol import __version__ as __version__

    from ._exports import *  # noqa: F403
    from ._exports import __all__ as __all__


def _load() -> _ModuleType:
    # importlib, not `from . import _exports`: that form looks the name up on
    # this package first, which would call __getattr__ again.
    return _importlib.import_module(f"{__name__}._exports")


def __getattr__(name: str) -> _typing.Any:
    if name == "__version__":
        #: The installed distribution's version (from its metadata; the
        #: protocol package ships in the same distribution).
        from kigi_tool_protocol import __version__ as value
    elif name == "__all__" or (not name.startswith("_") and name in _load().__all__):
        value = getattr(_load(), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_load().__all__, "__all__", "__version__"})
