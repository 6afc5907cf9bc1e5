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

import pytest
from typescript_mcp import install_ts_sdk, run_driver

# Slow: an npm install first (one per run, whichever workers run them).
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


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK, installed once per run: in the directory every pytest-xdist
    worker's temporary root shares, under a lock, by the first worker that
    needs it (a module fixture was set up again whenever a worker ran another
    module's test in between: an npm install each time)."""
    base = tmp_path_factory.getbasetemp()
    # A worker's root is popen-gwN inside the run's own; without workers, the
    # run's own root is the base itself (its parent holds other runs').
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with (shared / "ts-mcp.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        where = shared / "ts-mcp"
        if not (where / "installed").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            driver = install_ts_sdk(where)
            (where / "installed").write_text(str(driver))
        return Path((where / "installed").read_text())


def test_every_notification_of_200_one_write_calls_reaches_the_typescript_client(
    driver: Path,
) -> None:
    """200 calls of one write each: the client's onprogress sees every
    notification the result announces, and their messages are the output."""
    records = run_driver(driver, [{"command": "printf 'one write\\n'", "repeat": 200}], SERVE)
    assert len(records) == 200
    assert all(not record["isError"] for record in records)
    assert [record["sent"] for record in records] == [1] * 200
    assert [record["notes"] for record in records] == [1] * 200
    assert {record["text"] for record in records} == {"one write\n"}


def test_600_bytes_in_7_byte_pieces_reach_the_typescript_client_whole(driver: Path) -> None:
    """The case of the report: 600 bytes in 7-byte pieces, 10 ms apart, three
    runs; every notification arrives and the messages concatenate to the 600
    bytes (none of the last ones short)."""
    command = shlex.join([sys.executable, "-c", PIECES])
    records = run_driver(driver, [{"command": command, "repeat": 3}], SERVE)
    assert len(records) == 3
    for record in records:
        assert record["sent"] >= 2
        assert record["notes"] == record["sent"]
        assert record["text"] == PIECES_TEXT
        assert "exit code 0" in record["result"]


def test_a_call_with_one_write_and_an_error_reach_the_typescript_client(driver: Path) -> None:
    """A single one-write call gets its only notification; a failing command
    streams its output and ends as an ordinary result with its exit code."""
    records = run_driver(
        driver,
        [{"command": "printf 'only'"}, {"command": "printf 'bad\\n' >&2; exit 3"}],
        SERVE,
    )
    assert [(record["notes"], record["sent"], record["text"]) for record in records] == [
        (1, 1, "only"),
        (1, 1, "bad\n"),
    ]
    assert "exit code 3" in records[1]["result"]
