"""Shared test configuration: Hypothesis profiles and the conformance data."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _process_time
import pytest
from hypothesis import HealthCheck, settings
from nats_server import NatsServer, running_server

#: The conformance data the tests load, kept inside the repository so that a
#: fresh clone with nothing beside it runs the suite.
CONFORMANCE = Path(__file__).resolve().parent / "conformance"

# "ci" is derandomized so a red run is reproducible; it runs enough examples to
# matter while keeping the whole suite within its time budget on two cores.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


#: The test files of the hosts whose extras are large (FastMCP, Google ADK):
#: without the extra installed they are not collected, so the rest of the
#: suite still runs; CI installs both (the ``test`` extra).
collect_ignore = [
    name
    for name, module in (
        ("test_fastmcp.py", "fastmcp"),
        ("fastmcp_app.py", "fastmcp"),
        ("test_adk.py", "google.adk"),
        ("test_adk_folder.py", "google.adk"),
        ("test_function_tool_fastmcp.py", "fastmcp"),
        ("test_function_tool_adk.py", "google.adk"),
    )
    if not _installed(module)
]


#: What the whole suite took with the README's command (``-n auto`` on two
#: idle cores: 6:14 and 6:35 measured): said as a run starts.
SUITE_TIME = "about 6 to 7 minutes"


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say, as a run starts, what it runs, how long the whole suite takes and
    how to run less."""
    workers = config.getoption("numprocesses", None)
    how = (
        f"in parallel ({workers} workers, pytest-xdist)"
        if workers
        else "in one process (-n auto runs them in parallel)"
    )
    return [
        f"kigi-tool-runtime: the tests run {how}; many start real processes (commands,"
        " servers, clients, nats-server, Node).",
        f"The whole suite takes {SUITE_TIME} with -n auto on 2 cores; -m 'not slow'"
        " leaves out the slowest for a first run.",
    ]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A real nats-server with JetStream for one test, stopped after it."""
    with running_server(tmp_path) as server:
        yield server


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test on a fresh event loop of its own (``asyncio.run``),
    so it cannot leak tasks into another test."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


def pytest_configure(config: pytest.Config) -> None:
    """Count the time of process-starting tests when ``KIGI_PROCESS_TIME`` is set
    (tests/_process_time.py)."""
    _process_time.configure(config)
