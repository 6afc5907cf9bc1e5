"""The version of the installed distribution, read from its metadata (one
source of truth: ``pyproject.toml``)."""

from __future__ import annotations

from typing import Final

__all__ = ()

#: The distribution that ships both packages.
DISTRIBUTION: Final = "kigi-tool-runtime"


def installed_version() -> str:
    """The installed ``kigi-tool-runtime`` version, or ``"0+unknown"`` when the
    packages are imported from a source tree that was never installed."""
    # Imported here: importlib.metadata loads threads and sockets, which
    # importing the wire types must not.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
