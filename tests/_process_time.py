"""How much of the suite's time goes to tests that start a process.

Off by default. Set ``KIGI_PROCESS_TIME`` to a directory and run pytest: every
test that starts a subprocess (``subprocess.Popen``, which asyncio's
subprocesses use too) during its setup, call or teardown is counted as
process-starting, and the run ends with a line giving the count and the summed
durations of process-starting tests beside all tests.

Rule 1. Each pytest process (the controller or an xdist worker) appends its
tests to a file of its own in that directory, so parallel runs aggregate: the
summary, printed by the process that is not a worker, reads every file there
that this run wrote.

Rule 2. A test's duration is the sum of its setup, call and teardown phases as
pytest reports them; the call phase alone is given beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

ENV = "KIGI_PROCESS_TIME"


class ProcessTime:
    """The plugin: marks tests that spawn, writes one JSON line per test."""

    def __init__(self, directory: Path, run: str) -> None:
        self.directory = directory
        self.run = run
        self.current: str | None = None
        self.spawned: set[str] = set()
        self.durations: dict[str, list[float]] = {}
        self._original = subprocess.Popen.__init__

    def install(self) -> None:
        original = self._original
        plugin = self

        def __init__(popen: Any, *args: Any, **kwargs: Any) -> None:
            if plugin.current is not None:
                plugin.spawned.add(plugin.current)
            original(popen, *args, **kwargs)

        subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Give each xdist worker the run's name (an xdist hook)."""
        node.workerinput["process_time_run"] = self.run

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        """Print the summary once, from the process that is not a worker."""
        if hasattr(config, "workerinput"):
            return
        for line in summary(self.directory, self.run):
            terminalreporter.write_line(line)

    def pytest_unconfigure(self) -> None:
        subprocess.Popen.__init__ = self._original  # type: ignore[method-assign]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        self.current = item.nodeid
        yield
        self.current = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid != self.current:
            return  # an xdist worker's report, relayed to the controller
        phases = self.durations.setdefault(report.nodeid, [0.0, 0.0])
        phases[0] += report.duration
        if report.when == "call":
            phases[1] += report.duration
        if report.when == "teardown":
            name = os.environ.get("PYTEST_XDIST_WORKER", "main")
            line = {
                "nodeid": report.nodeid,
                "total": phases[0],
                "call": phases[1],
                "spawned": report.nodeid in self.spawned,
            }
            with (self.directory / f"{self.run}-{name}.jsonl").open("a") as out:
                out.write(json.dumps(line) + "\n")


def summary(directory: Path, run: str) -> list[str]:
    """The lines the run ends with: counts and durations, spawning vs all."""
    tests: list[dict[str, Any]] = []
    for path in sorted(directory.glob(f"{run}-*.jsonl")):
        tests.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    spawning = [test for test in tests if test["spawned"]]
    total = sum(test["total"] for test in tests)
    spawn_total = sum(test["total"] for test in spawning)
    call = sum(test["call"] for test in tests)
    spawn_call = sum(test["call"] for test in spawning)
    share = spawn_total / total if total else 0.0
    slowest = sorted(spawning, key=lambda test: test["total"], reverse=True)[:25]
    lines = [
        f"process-starting tests: {len(spawning)} of {len(tests)};"
        f" {spawn_total:.1f} s of {total:.1f} s summed test time ({share:.0%});"
        f" call phase {spawn_call:.1f} s of {call:.1f} s",
        "slowest process-starting tests:",
    ]
    lines.extend(f"  {test['total']:7.2f} s  {test['nodeid']}" for test in slowest)
    return lines


def configure(config: pytest.Config) -> None:
    """Register the plugin when ``KIGI_PROCESS_TIME`` names a directory (called
    from the suite's ``pytest_configure``)."""
    where = os.environ.get(ENV)
    if not where:
        return
    directory = Path(where)
    directory.mkdir(parents=True, exist_ok=True)
    workerinput = getattr(config, "workerinput", None)
    run = workerinput["process_time_run"] if workerinput else uuid.uuid4().hex[:8]
    plugin = ProcessTime(directory, run)
    plugin.install()
    config.pluginmanager.register(plugin, "kigi-process-time")
