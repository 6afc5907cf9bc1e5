"""``--tools MODULE:ATTR``: the tools a spec names, and a one-line error for
every way it can be wrong, from the loader and from ``kigi-stream serve``."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from kigi_tool_runtime import ShellTool
from kigi_tool_runtime._cli._tools_spec import ToolSpecError, load_spec, load_tools

TOOLS_PY = """\
import msgspec
from kigi_tool_runtime import Tool

class Args(msgspec.Struct):
    name: str = "you"

class Hello(Tool[Args]):
    id = "hello"
    args_type = Args
    async def run(self, ctx, args):
        return {"greeting": "hello " + args.name}

class Bye(Tool[Args]):
    id = "bye"
    args_type = Args
    def run(self, ctx, args):
        return "bye"

class Bash(Tool[Args]):
    id = "bash"
    args_type = Args
    def run(self, ctx, args):
        return "not the shell"

class Holder:
    tools = (Hello(), Bye())

ONE = Hello()
TOOLS = [Hello(), Bye()]
TWICE = [Hello(), Hello()]
HOLDER = Holder()
BASH = [Bash()]
NUMBER = 3
EMPTY = []
MIXED = [Hello(), "bye"]
CLASSES = [Hello]
def make():
    return TOOLS
def make_nothing():
    return None
def fails():
    raise RuntimeError("cannot\\nmake them")
def exits():
    raise SystemExit(4)
"""


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory holding a tools module under a name of this test's own, as
    the current directory; the modules and path entries it adds are undone."""
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _module(directory: Path, source: str) -> str:
    """Write ``source`` as a module with a name no other test uses; its name."""
    name = f"user_tools_{directory.name.replace('-', '_')}"
    (directory / f"{name}.py").write_text(source)
    return name


@pytest.mark.parametrize(
    ("attribute", "ids"),
    [
        ("ONE", ["hello"]),
        ("TOOLS", ["hello", "bye"]),
        ("HOLDER.tools", ["hello", "bye"]),
        ("make", ["hello", "bye"]),
        ("Hello", ["hello"]),
    ],
)
def test_a_spec_names_a_tool_a_list_or_a_callable(
    tools_dir: Path, attribute: str, ids: list[str]
) -> None:
    """A Tool, a list or tuple of tools (at a dotted path), a function returning
    them, or a tool class (called with no arguments) are each served."""
    name = _module(tools_dir, TOOLS_PY)
    assert [tool.id for tool in load_spec(f"{name}:{attribute}")] == ids


def test_a_module_may_be_a_path_to_a_file(tools_dir: Path) -> None:
    """``path/to/file.py:ATTR`` runs that file, relative or absolute, and a
    second spec of the same file does not run it again."""
    (tools_dir / "sub").mkdir()
    (tools_dir / "sub" / "helper_for_file.py").write_text(TOOLS_PY)
    (tools_dir / "sub" / "entry.py").write_text(
        "from helper_for_file import TOOLS\nRUNS = []\nRUNS.append(1)\n"
    )
    assert [tool.id for tool in load_spec("sub/entry.py:TOOLS")] == ["hello", "bye"]
    absolute = tools_dir / "sub" / "entry.py"
    assert [tool.id for tool in load_spec(f"{absolute}:TOOLS")] == ["hello", "bye"]
    (entry,) = (m for m in sys.modules.values() if getattr(m, "__file__", None) == str(absolute))
    assert entry.RUNS == [1]


def test_load_tools_keeps_the_order_and_adds_the_shell_tool(tools_dir: Path) -> None:
    """Every spec's tools in order, then the extra ones (the shell tool)."""
    name = _module(tools_dir, TOOLS_PY)
    tools = load_tools([f"{name}:ONE", "tools.py:Bye"], [ShellTool()])
    assert [tool.id for tool in tools] == ["hello", "bye", "bash"]


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["{m}:TWICE"], "two tools have the id 'hello' (both in {m}:TWICE)"),
        (
            ["{m}:ONE", "tools.py:TOOLS"],
            "two tools have the id 'hello' (in {m}:ONE and in tools.py",
        ),
    ],
)
def test_two_tools_with_one_id_are_refused(tools_dir: Path, specs: list[str], message: str) -> None:
    """One id twice, in one spec or across two, is an error naming both."""
    name = _module(tools_dir, TOOLS_PY)
    with pytest.raises(ToolSpecError) as refused:
        load_tools([spec.format(m=name) for spec in specs])
    assert message.format(m=name) in str(refused.value)


def test_a_tool_named_like_the_shell_tool_is_refused_beside_it(tools_dir: Path) -> None:
    """A user's ``bash`` served with ``--shell`` would hide one of the two."""
    name = _module(tools_dir, TOOLS_PY)
    with pytest.raises(ToolSpecError, match=r"'bash' \(in .*:BASH and in --shell\)"):
        load_tools([f"{name}:BASH"], [ShellTool()])
    assert [tool.id for tool in load_tools([f"{name}:BASH"])] == ["bash"]


#: Each bad spec (``{m}`` is the test's module) and what its error says.
BAD_SPECS = [
    ("{m}", "expected MODULE:ATTR"),
    ("{m}:", "expected MODULE:ATTR"),
    (":TOOLS", "expected MODULE:ATTR"),
    ("no_such_module_anywhere:TOOLS", "no module named 'no_such_module_anywhere'"),
    ("no_such_package_anywhere.sub:TOOLS", "no module named 'no_such_package_anywhere'"),
    ("{m}:MISSING", "{m} has no attribute 'MISSING'"),
    ("{m}:HOLDER.missing", "{m}:HOLDER has no attribute 'missing'"),
    ("{m}:NUMBER", "NUMBER is an int, not a Tool, a list of tools or a function returning them"),
    ("{m}:EMPTY", "EMPTY is an empty list: no tools"),
    ("{m}:MIXED", "item 1 of MIXED is a str, not a Tool"),
    ("{m}:CLASSES", "item 0 of CLASSES is the class Hello, not a Tool (a tool class: list an"),
    ("{m}:make_nothing", "make_nothing() returned None, not a Tool"),
    ("{m}:fails", "calling fails() raised RuntimeError: cannot make them"),
    ("{m}:exits", "calling exits() raised SystemExit: 4"),
    ("missing_file.py:TOOLS", "'missing_file.py' does not exist"),
    ("sub_dir/:TOOLS", "'sub_dir/' is not a file"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_each_bad_spec_is_one_line_naming_it(tools_dir: Path, spec: str, message: str) -> None:
    """Every way a spec is wrong is a ToolSpecError of one line that names the
    spec and what is wrong."""
    (tools_dir / "sub_dir").mkdir()
    name = _module(tools_dir, TOOLS_PY)
    spec = spec.format(m=name)
    with pytest.raises(ToolSpecError) as refused:
        load_spec(spec)
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith((f"--tools {spec}:", f"--tools {spec!r}:"))
    assert message.format(m=name) in text


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import a_dependency_nobody_has\n", "ModuleNotFoundError: No module named"),
        ("def broken(:\n", "SyntaxError: "),
        ("raise ValueError('bad\\nconfig')\n", "ValueError: bad config"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ],
)
def test_a_module_that_does_not_import_says_why(tools_dir: Path, source: str, message: str) -> None:
    """A module whose import fails (a missing dependency, a syntax error, an
    exception, even ``sys.exit``) is one line naming the module and the error."""
    name = _module(tools_dir, source)
    for spec in (f"{name}:TOOLS", f"{name}.py:TOOLS"):
        with pytest.raises(ToolSpecError) as refused:
            load_spec(spec)
        text = str(refused.value)
        assert "\n" not in text
        assert "does not import" in text
        assert message in text
    assert name not in sys.modules


def _serve(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tools", "nowhere_module:TOOLS"), "no module named 'nowhere_module'"),
        (("--tools", "tools:MISSING"), "tools has no attribute 'MISSING'"),
        (("--tools", "tools:NUMBER"), "NUMBER is an int"),
        (("--tools", "tools:TWICE"), "two tools have the id 'hello'"),
        (("--tools", "tools:BASH", "--shell"), "two tools have the id 'bash'"),
        (("--tools", "broken.py:TOOLS"), "module 'broken.py' does not import: NameError"),
        (("--tools", "tools:TWICE", "--mcp"), "two tools have the id"),
        (("--tools", "tools:TWICE", "--mcp-http", "127.0.0.1:0"), "two tools have the id"),
        (("--tools", "tools:TWICE", "--nats", "nats://127.0.0.1:1"), "two tools have the id"),
    ],
)
def test_serve_refuses_a_bad_spec_in_one_line_with_status_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """``kigi-stream serve --tools`` with a bad spec, on every host, exits 2
    with one line on stderr naming it, no traceback, before serving."""
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    (tmp_path / "broken.py").write_text("undefined_name\n")
    done = _serve(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("kigi-stream serve: error: ")
    assert message in line
    assert "Traceback" not in done.stderr


def test_serve_runs_a_users_tool_and_the_shell_tool_only_when_asked(tmp_path: Path) -> None:
    """``serve --tools`` lists and calls the user's tools and not bash; with
    ``--shell`` bash is there too; without ``--tools``, bash alone."""
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    listing = '{"jsonrpc":"2.0","id":1,"method":"tools.list"}\n'
    call = (
        '{"jsonrpc":"2.0","id":2,"method":"tool.call","params":{"tool_call_id":"c1",'
        '"tool_id":"hello","arguments":{"name":"kigi"}}}\n'
    )

    def served(*args: str) -> tuple[list[str], list[dict[str, object]]]:
        done = _serve(*args, cwd=tmp_path, stdin=listing + call)
        assert done.returncode == 0, done.stderr
        replies = [json.loads(line) for line in done.stdout.splitlines()]
        (tools,) = (reply for reply in replies if reply.get("id") == 1)
        return [tool["id"] for tool in tools["result"]["tools"]], replies  # type: ignore[index]

    ids, replies = served("--tools", "tools:TOOLS")
    assert ids == ["hello", "bye"]
    (result,) = (reply for reply in replies if reply.get("id") == 2)
    assert result["result"]["output"]["value"] == {"greeting": "hello kigi"}  # type: ignore[index]
    assert served("--tools", "tools.py:ONE", "--shell")[0] == ["hello", "bash"]
    assert served()[0] == ["bash"]


def test_the_installed_command_imports_a_module_from_the_current_directory(
    tmp_path: Path,
) -> None:
    """The ``kigi-stream`` script (whose own directory, not the current one,
    starts ``sys.path``) finds ``--tools tools:TOOLS`` in the current directory,
    as ``python -m`` would."""
    script = Path(sysconfig.get_path("scripts")) / "kigi-stream"
    if not script.exists():
        pytest.skip("the kigi-stream script is not installed beside this interpreter")
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    done = subprocess.run(
        [str(script), "serve", "--tools", "tools:ONE"],
        input='{"jsonrpc":"2.0","id":1,"method":"tools.list"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (reply,) = (json.loads(line) for line in done.stdout.splitlines())
    assert [tool["id"] for tool in reply["result"]["tools"]] == ["hello"]
