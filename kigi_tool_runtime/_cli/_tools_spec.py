"""``kigi-stream serve --tools MODULE:ATTR``: the tools a user names on the
command line, loaded as ``uvicorn module:app`` loads an app.

Rule 1. ``MODULE`` is a path to a Python file when it ends in ``.py`` or holds
        a ``/``: the file is run as a module named after it, its directory
        first on ``sys.path`` so its sibling modules import. Otherwise it is a
        dotted module name, imported with the current directory on
        ``sys.path`` (as ``python -m`` has it).
Rule 2. ``ATTR`` is a dotted attribute path in that module, naming a
        :class:`Tool`, a list or tuple of tools, or a callable (a function, a
        tool class) that, called with no arguments, returns one of those.
Rule 3. Every way a spec can be wrong (no ``:``, a module that does not import,
        a missing attribute, a value of the wrong kind, a callable that raises,
        no tools at all, two tools with one id across every spec and the shell
        tool) is one :class:`ToolSpecError` whose message is one line naming
        the spec and what is wrong; nothing else escapes but
        ``KeyboardInterrupt``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from .._tools._tool import Tool

__all__ = ()


class ToolSpecError(ValueError):
    """Raised when a ``--tools MODULE:ATTR`` spec names no usable tools; the
    message is one line naming the spec and what is wrong."""


def load_tools(specs: Sequence[str], extra: Iterable[Tool[Any]] = ()) -> list[Tool[Any]]:
    """The tools ``specs`` name, in order, followed by ``extra`` (the shell
    tool, when served too).

    Raises:
        ToolSpecError: a spec is malformed or names no usable tools, or two
            tools share an id.
    """
    tools: list[Tool[Any]] = []
    origin: dict[str, str] = {}
    named = [(spec, tool) for spec in specs for tool in load_spec(spec)]
    named.extend(("--shell", tool) for tool in extra)
    for spec, tool in named:
        first = origin.get(tool.id)
        if first is not None:
            where = f"both in {spec}" if first == spec else f"in {first} and in {spec}"
            raise ToolSpecError(f"two tools have the id {tool.id!r} ({where})")
        origin[tool.id] = spec
        tools.append(tool)
    return tools


def load_spec(spec: str) -> list[Tool[Any]]:
    """The tools one ``MODULE:ATTR`` spec names (see the module's rules).

    Raises:
        ToolSpecError: see Rule 3.
    """
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise ToolSpecError(
            f"--tools {spec!r}: expected MODULE:ATTR (a module or a .py file, a colon, and"
            " the name of a tool, a list of tools or a function returning them)"
        )
    module = _import(spec, module_name)
    value: Any = module
    for depth, part in enumerate(attribute.split(".")):
        try:
            value = getattr(value, part)
        except AttributeError:
            owner = (
                module_name
                if depth == 0
                else f"{module_name}:{'.'.join(attribute.split('.')[:depth])}"
            )
            raise ToolSpecError(f"--tools {spec}: {owner} has no attribute {part!r}") from None
        except Exception as exc:  # a property or module __getattr__ that fails
            raise ToolSpecError(
                f"--tools {spec}: reading {part!r} raised {_one_line(exc)}"
            ) from None
    if not isinstance(value, Tool | list | tuple) and callable(value):
        try:
            value = value()
        except (Exception, SystemExit) as exc:
            raise ToolSpecError(
                f"--tools {spec}: calling {attribute}() raised {_one_line(exc)}"
            ) from None
        what = f"{attribute}() returned"
    else:
        what = f"{attribute} is"
    if isinstance(value, Tool):
        return [value]
    if not isinstance(value, list | tuple):
        raise ToolSpecError(
            f"--tools {spec}: {what} {_kind(value)}, not a Tool, a list of tools or a"
            " function returning them"
        )
    if not value:
        raise ToolSpecError(f"--tools {spec}: {what} an empty {type(value).__name__}: no tools")
    for position, item in enumerate(value):
        if not isinstance(item, Tool):
            hint = ""
            if _is_tool_class(item):
                hint = f" (a tool class: list an instance, {item.__name__}())"
            raise ToolSpecError(
                f"--tools {spec}: item {position} of {attribute} is {_kind(item)}, not a Tool{hint}"
            )
    return list(value)


def _import(spec: str, name: str) -> ModuleType:
    """Import ``name``, a dotted module name or a path to a ``.py`` file (Rule 1)."""
    try:
        if name.endswith(".py") or os.sep in name or "/" in name:
            return _import_file(spec, name)
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(name)
    except ToolSpecError:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name
        if missing is not None and (name == missing or name.startswith(missing + ".")):
            # The module itself (or its package), not something it imports.
            raise ToolSpecError(f"--tools {spec}: no module named {missing!r}") from None
        raise ToolSpecError(
            f"--tools {spec}: module {name!r} does not import: {_one_line(exc)}"
        ) from None
    except (Exception, SystemExit) as exc:
        raise ToolSpecError(
            f"--tools {spec}: module {name!r} does not import: {_one_line(exc)}"
        ) from None


def _import_file(spec: str, path: str) -> ModuleType:
    if not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        raise ToolSpecError(f"--tools {spec}: {path!r} {what}")
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__file__", None) == path:
            return loaded  # named by an earlier spec: run once
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem
    if not stem.isidentifier() or stem in sys.modules:
        # A name of its own that shadows no module already imported.
        name = f"_kigi_tools_{len(sys.modules)}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ToolSpecError(f"--tools {spec}: {path!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    # Registered before it runs, as an import would: a Struct's annotations
    # and a dataclass resolve their names through sys.modules.
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _is_tool_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, Tool)


def _kind(value: Any) -> str:
    """``value``'s type as a noun: ``"an int"``, ``"None"``, ``"the class Foo"``."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"


def _one_line(exc: BaseException) -> str:
    """``exc`` as ``Type: message`` on one line (a syntax error with its place)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        text = f"{exc.msg} ({exc.filename}, line {exc.lineno})"
    else:
        text = str(exc)
    text = " ".join(text.split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
