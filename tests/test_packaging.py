"""The package as an index would publish it: its extras, and the wheel and
sdist built from this tree (a LICENSE in each, our two packages and nothing
else, an index page's text with no links into the repository), the wheel
installed into a fresh virtual environment where ``kigi-stream`` runs.

Offline: the wheel is built with the test extra's hatchling (no build
isolation, nothing downloaded) and installed with ``--no-index --no-deps``;
its one dependency, msgspec, is copied from this environment."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: Bound on one build, install or run: a hang fails the test, not the suite.
STEP_S = 120.0

#: This environment's pip, to install into another interpreter's environment.
PIP_INTO = (sys.executable, "-m", "pip", "--python")

#: The extras that add an integration (each one a host of its own).
INTEGRATIONS = ("mcp", "nats", "langchain", "pydantic-ai", "acp", "fastmcp", "google-adk")


def test_the_testing_extra_is_hypothesis_alone_and_all_is_every_extra() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert [re.split(r"[<>=\[]", dep)[0] for dep in extras["testing"]] == ["hypothesis"]
    [everything] = extras["all"]
    named = re.fullmatch(r"kigi-tool-runtime\[(.*)\]", everything)
    assert named is not None, everything
    assert set(named[1].split(",")) == {*INTEGRATIONS, "otel", "testing"}
    for suite in ("test", "dev"):  # the suite runs in parallel, and builds the wheel
        names = {re.split(r"[<>=\[]", dep)[0] for dep in extras[suite]}
        assert {"pytest-xdist", "hatchling", "hypothesis"} <= names, suite


def test_the_project_states_who_and_what_and_no_invented_address() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert project["authors"] == [{"name": "kigi-tool-runtime contributors"}]
    assert project["keywords"]
    assert "Typing :: Typed" in project["classifiers"]
    assert "urls" not in project  # the project has no public address yet
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    assert "kigi-tool-runtime contributors" in license_text


def _build(out: Path) -> tuple[Path, Path]:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=STEP_S,
    )
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def test_the_wheel_installs_into_a_fresh_venv_and_serves_a_call(tmp_path: Path) -> None:
    wheel, sdist = _build(tmp_path / "dist")

    with zipfile.ZipFile(wheel) as built:
        names = built.namelist()
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(built.read(metadata_name).decode())
    assert {name.split("/")[0] for name in names} == {
        "kigi_tool_protocol",
        "kigi_tool_runtime",
        metadata_name.split("/")[0],
    }
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Description-Content-Type"] == "text/markdown"
    description = metadata.get_payload()
    assert description.strip() == (ROOT / "docs" / "pypi.md").read_text().strip()
    # Only absolute links render on an index page.
    assert not re.search(r"\]\((?!https?://)", description)
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    assert any(member.endswith("/LICENSE") for member in members)
    assert not any("/_kigi_stream" in member for member in members)

    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=STEP_S
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [*PIP_INTO, str(python), "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=STEP_S,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=STEP_S,
    ).stdout.strip()
    here = Path(msgspec.__file__).parent
    shutil.copytree(here, Path(site) / "msgspec")
    for info in here.parent.glob("msgspec-*.dist-info"):
        shutil.copytree(info, Path(site) / info.name)

    kigi_stream = venv / "bin" / "kigi-stream"
    version = PYPROJECT["project"]["version"]
    shown = subprocess.run(
        [str(kigi_stream), "--version"], capture_output=True, text=True, timeout=STEP_S
    )
    assert (shown.returncode, shown.stdout) == (0, f"kigi-stream {version}\n"), shown.stderr
    ran = subprocess.run(
        [str(kigi_stream), "run", "--", "echo", "from the wheel"],
        capture_output=True,
        text=True,
        timeout=STEP_S,
        cwd=tmp_path,
    )
    assert (ran.returncode, ran.stdout) == (0, "from the wheel\n"), ran.stderr
    assert "0 gaps, not truncated, exit 0" in ran.stderr
    # The installed copy ran, not this tree, and nothing but our packages
    # came with it.
    where = subprocess.run(
        [str(python), "-c", "import kigi_tool_runtime; print(kigi_tool_runtime.__file__)"],
        capture_output=True,
        text=True,
        timeout=STEP_S,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert where.startswith(site)
    top = {path.name for path in Path(site).iterdir()}
    assert "_kigi_stream" not in top
