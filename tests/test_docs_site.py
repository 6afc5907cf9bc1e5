"""The documentation site keeps up with the code: the CLI page shows each
command's help exactly as the parser prints it, every public class and
function has a docstring for the generated API reference, and every page is
in the site's navigation.

Run as a script (``python tests/test_docs_site.py``) to rewrite the CLI
page's help blocks from the parser after an option changed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
from pathlib import Path

import pytest
from docs_pages import DOCS, ROOT, pages
from test_public_api import PACKAGES

from kigi_tool_runtime._cli._parser import build_parser

CLI_PAGE = DOCS / "cli.md"
COMMANDS = ("run", "serve", "follow", "check")
_HELP_BLOCK = re.compile(r"```text\n(usage: kigi-stream (\w+) .*?)```", re.DOTALL)


def _help_texts() -> dict[str, str]:
    """Each command's ``--help``, formatted for an 80-column terminal."""
    os.environ["COLUMNS"] = "80"
    parser = build_parser()
    (commands,) = (
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    return {name: commands.choices[name].format_help() for name in COMMANDS}


def test_the_cli_page_shows_each_commands_help_as_the_parser_prints_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    shown = {m[2]: m[1] for m in _HELP_BLOCK.finditer(CLI_PAGE.read_text(encoding="utf-8"))}
    expected = _help_texts()
    assert sorted(shown) == sorted(expected), "a command's help block is missing"
    for name in COMMANDS:
        assert shown[name] == expected[name], (
            f"docs/cli.md's help of `kigi-stream {name}` is stale:"
            " run `python tests/test_docs_site.py` to rewrite it"
        )


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_class_and_function_has_a_docstring(package: str) -> None:
    """The generated reference shows each public name's own docstring: a class or
    function without one would render as a bare signature."""
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        own = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
        if not (own and own.strip()):
            missing.append(name)
    assert missing == [], f"{package}: no docstring of its own"


def test_every_page_is_in_the_navigation() -> None:
    """A page left out of ``mkdocs.yml``'s nav is not reachable from the site."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    listed = set(re.findall(r"([\w./-]+\.md)\s*$", nav, re.MULTILINE))
    # docs/pypi.md is the package index's text (mkdocs.yml excludes it).
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")} - {"pypi.md"}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "nav entries with no page"


def test_the_index_pages_code_is_the_sites() -> None:
    """``docs/pypi.md`` (the package index's text, not a page of the site, so
    not run itself) shows only Python that a page of the site shows, and runs
    there."""
    index_page = (DOCS / "pypi.md").read_text(encoding="utf-8")
    site = "\n".join(path.read_text(encoding="utf-8") for path in pages())
    for body in re.findall(r"```python\n(.*?)```", index_page, re.DOTALL):
        assert body in site, body


def write_cli_help() -> None:
    """Rewrite the CLI page's help blocks from the parser."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    helps = _help_texts()
    text = _HELP_BLOCK.sub(lambda m: f"```text\n{helps[m[2]]}```", text)
    CLI_PAGE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    write_cli_help()
