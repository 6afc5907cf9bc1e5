"""The project's documentation as the tests read it: the README and every page
of the site under ``docs/``, so a code block is found (and run) wherever it
lives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"```(?P<lang>\w*)\n(?P<body>.*?)```", re.DOTALL)


def pages() -> list[Path]:
    """The README, then every Markdown page of the site, in a stable order
    (``docs/pypi.md``, the package index's text, is not one: it repeats
    them)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if p.name != "pypi.md")]


def page(name: str) -> str:
    """The text of one page: ``README.md`` or a path under ``docs/``."""
    path = README if name == "README.md" else DOCS / name
    return path.read_text(encoding="utf-8")


def all_text() -> str:
    """Every page's text, one after another."""
    return "\n".join(path.read_text(encoding="utf-8") for path in pages())


def blocks(lang: str, text: str | None = None) -> list[str]:
    """The bodies of the fenced blocks of ``lang`` in ``text`` (every page when
    ``None``)."""
    source = all_text() if text is None else text
    return [m["body"] for m in _BLOCK.finditer(source) if m["lang"] == lang]
