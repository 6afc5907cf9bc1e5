"""``kigi-stream serve --mcp`` driven over stdio by the official TypeScript MCP
client (``@modelcontextprotocol/sdk``, run by Node). That client drops a
progress notification it reads together with its call's response; the server
holds each response until the host has read what came before it, so every
notification reaches it (``mcp._hold``)."""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typescript_mcp import DRIVER, TS_SDK, install_ts_sdk, run_driver

# Slow: an npm install first (once per checkout and SDK release).
pytestmark = pytest.mark.slow

# Delta mode: these tests join the messages into the output, as an appending
# host does (status mode's messages are pinned in test_mcp_heartbeat and
# test_mcp_live_message).
SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp", "--mcp-message", "delta"]

# 600 bytes in 7-byte pieces, 10 ms apart: many small notifications, the last
# one written just before the call ends.
PIECES = (
    "import sys, time\n"
    "data = bytes(48 + i % 75 for i in range(600))\n"
    "for i in range(0, 600, 7):\n"
    "    sys.stdout.buffer.write(data[i : i + 7]); sys.stdout.flush(); time.sleep(0.01)\n"
)
PIECES_TEXT = bytes(48 + i % 75 for i in range(600)).decode()


#: What each test reads from the one driver run (:func:`records`): its calls.
PLANS: dict[str, list[dict[str, Any]]] = {
    "one_write_200": [{"command": "printf 'one write\\n'", "repeat": 200}],
    "pieces": [{"command": shlex.join([sys.executable, "-c", PIECES]), "repeat": 3}],
    "one_and_error": [{"command": "printf 'only'"}, {"command": "printf 'bad\\n' >&2; exit 3"}],
}


@pytest.fixture(scope="session")
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK, installed once per checkout and SDK release: in pytest's cache
    directory (in the run's temporary root when the cache is off), under a
    lock, by the first process that needs it; the driver script is copied
    afresh every run."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        shared = cache.mkdir("ts-mcp-" + TS_SDK.rsplit("@", 1)[1])
    else:
        # A worker's root is popen-gwN inside the run's own; without workers,
        # the run's own root is the base itself (its parent holds other runs').
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with (shared / "ts-mcp.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        where = shared / "ts-mcp"
        installed = where / "installed"
        if not (installed.exists() and installed.read_text() == TS_SDK):
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            install_ts_sdk(where)
            installed.write_text(TS_SDK)
        script = where / DRIVER.name
        shutil.copyfile(DRIVER, script)
        return script


@pytest.fixture(scope="module")
def records(driver: Path) -> dict[str, list[dict[str, Any]]]:
    """One server and one client for every test of the module: the calls of
    :data:`PLANS` in one driver run, each test's records under its name."""
    calls = [call for plan in PLANS.values() for call in plan]
    every = run_driver(driver, calls, SERVE)
    split: dict[str, list[dict[str, Any]]] = {}
    for name, plan in PLANS.items():
        count = sum(call.get("repeat", 1) for call in plan)
        split[name], every = every[:count], every[count:]
    assert every == []
    return split


def test_every_notification_of_200_one_write_calls_reaches_the_typescript_client(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    """200 calls of one write each: the client's onprogress sees every
    notification the result announces, and their messages are the output."""
    calls = records["one_write_200"]
    assert len(calls) == 200
    assert all(not record["isError"] for record in calls)
    assert [record["sent"] for record in calls] == [1] * 200
    assert [record["notes"] for record in calls] == [1] * 200
    assert {record["text"] for record in calls} == {"one write\n"}


def test_600_bytes_in_7_byte_pieces_reach_the_typescript_client_whole(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    """The case of the report: 600 bytes in 7-byte pieces, 10 ms apart, three
    runs; every notification arrives and the messages concatenate to the 600
    bytes (none of the last ones short)."""
    calls = records["pieces"]
    assert len(calls) == 3
    for record in calls:
        assert record["sent"] >= 2
        assert record["notes"] == record["sent"]
        assert record["text"] == PIECES_TEXT
        assert "exit code 0" in record["result"]


def test_a_call_with_one_write_and_an_error_reach_the_typescript_client(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    """A single one-write call gets its only notification; a failing command
    streams its output and ends as an ordinary result with its exit code."""
    calls = records["one_and_error"]
    assert [(record["notes"], record["sent"], record["text"]) for record in calls] == [
        (1, 1, "only"),
        (1, 1, "bad\n"),
    ]
    assert "exit code 3" in calls[1]["result"]
