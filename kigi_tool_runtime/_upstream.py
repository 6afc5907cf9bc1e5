"""The fence around a dependency's internals: the one check each host's
``_privates`` module makes before it reads a name the dependency keeps private.

Invariants:

Rule 1. A host reads a dependency's private names only in its ``_privates``
        module, and only after :meth:`Upstream.usable` says yes: the installed
        version is inside the range this package's extra pins (its
        ``Requires-Dist``, read with ``importlib.metadata``), or that range
        cannot be read (this package is not installed, only imported).
Rule 2. Outside the range, or where a private name is gone or has another
        shape (:meth:`Upstream.degrade`), one ``RuntimeWarning`` per package
        and degradation names the package, its version and what degrades,
        and the host takes its fallback, which is always bounded: never
        silent slowness or unbounded memory.
Rule 3. Version ranges are compared on release numbers (``2.13.0rc1`` is
        ``2.13.0``): the pins are all ``>=``/``<`` bounds of releases.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
import warnings
from enum import Enum
from typing import Final

__all__: tuple[str, ...] = ()

#: This package's distribution name, whose extras pin the dependencies.
DISTRIBUTION: Final = "kigi-tool-runtime"

_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_CLAUSE = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*([^,\s]+)\s*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Unseen(Enum):
    """What a ``_privates`` reader gives when the internal it reads cannot be
    read (Rule 2): the host then takes its bounded fallback."""

    UNSEEN = "unseen"


#: The one value of :class:`Unseen`.
UNSEEN: Final = Unseen.UNSEEN


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The release numbers of ``version`` (``"2.13.0rc1"`` -> ``(2, 13, 0)``;
    ``()`` when it has none)."""
    found = _RELEASE.match(version.strip().lstrip("vV"))
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` is inside ``specifier`` (``">=1.2,<2"``; an empty
    specifier holds every version) (Rule 3)."""
    have = release(version)
    for clause in filter(None, (part.strip() for part in specifier.split(","))):
        found = _CLAUSE.fullmatch(clause)
        if found is None:
            continue  # a clause this reading does not know never refuses
        op, text = found.groups()
        mine, bound = _padded(have, release(text.rstrip(".*")))
        if op in ("==", "===") and text.endswith(".*"):
            prefix = release(text[:-2])
            ok = have[: len(prefix)] == prefix
        elif op == "~=":
            upper = release(text)[:-1]
            ok = mine >= bound and have[: len(upper)] == upper
        else:
            ok = {
                "==": mine == bound,
                "===": mine == bound,
                "!=": mine != bound,
                "<=": mine <= bound,
                ">=": mine >= bound,
                "<": mine < bound,
                ">": mine > bound,
            }[op]
        if not ok:
            return False
    return True


def pinned(package: str, extra: str, requires: list[str] | None = None) -> str | None:
    """The specifier ``extra`` pins ``package`` to in this package's metadata
    (``requires``: its ``Requires-Dist`` lines, read when not given), or
    ``None`` when not found."""
    if requires is None:
        try:
            requires = importlib.metadata.requires(DISTRIBUTION) or []
        except importlib.metadata.PackageNotFoundError:
            return None
    want = _normal(package)
    marker = re.compile(r"extra\s*==\s*['\"]" + re.escape(_normal(extra)) + r"['\"]")
    for line in requires:
        requirement, _, markers = line.partition(";")
        if not marker.search(markers):
            continue
        name = _NAME.match(requirement.strip())
        if name is None or _normal(name.group()) != want:
            continue
        rest = requirement.strip()[name.end() :]
        if rest.startswith("["):
            rest = rest[rest.find("]") + 1 :]
        return rest.strip().strip("()").strip()
    return None


def installed(package: str) -> str | None:
    """The installed version of ``package``, or ``None``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


class Upstream:
    """One dependency whose internals a host reads (Rules 1-2): ``package``
    as installed, against the range ``extra`` pins."""

    __slots__ = ("_lock", "_said", "_usable", "extra", "package")

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        self._usable: bool | None = None
        self._said: set[str] = set()
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return installed(self.package) or "(not installed)"

    def usable(self, what_degrades: str) -> bool:
        """Whether the installed version is inside the pinned range (Rule 1);
        if not, say once that ``what_degrades`` (Rule 2)."""
        if self._usable is None:
            version, spec = installed(self.package), pinned(self.package, self.extra)
            self._usable = version is None or spec is None or satisfies(version, spec)
        if not self._usable:
            spec = pinned(self.package, self.extra)
            self.degrade(
                what_degrades,
                f"is outside the range {spec} that kigi-tool-runtime[{self.extra}] pins",
            )
        return self._usable

    def degrade(self, what_degrades: str, why: str) -> None:
        """Say once per degradation that ``why`` (a private is gone, a range
        is left), ``what_degrades`` (Rule 2)."""
        with self._lock:
            if what_degrades in self._said:
                return
            self._said.add(what_degrades)
        warnings.warn(
            f"{self.package} {self.version} {why}; {what_degrades}"
            " (docs/upstream.md says what kigi-tool-runtime reads there, and why)",
            RuntimeWarning,
            stacklevel=3,
        )

    def forget(self) -> None:
        """Check the version again and say each degradation again (tests)."""
        with self._lock:
            self._usable = None
            self._said.clear()
