"""``kigi-stream serve`` whose output is not read holds a bounded amount of
memory: real servers, real files and pipes left unread, figures read from
``/proc``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "kigi_tool_runtime"]

#: Seconds a test waits for the server to settle (stop reading, fill its
#: queues): far above what it takes.
SETTLE_S = 60.0


def _proc_field(pid: int, name: str, key: str) -> int:
    """The number after ``key`` in ``/proc/PID/NAME`` (``status``: kB)."""
    with open(f"/proc/{pid}/{name}") as lines:
        for line in lines:
            if line.startswith(key):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/{name}")


def _settled(pid: int, read: str, key: str, still_s: float = 1.5) -> int:
    """Wait until ``/proc/PID/READ``'s ``key`` has not changed for ``still_s``
    seconds; return it."""
    deadline = time.monotonic() + SETTLE_S
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = _proc_field(pid, read, key)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            return now
        time.sleep(0.1)
    raise AssertionError(f"{key} of {read} never settled (last {last})")


def _fd_reading(pid: int, path: Path) -> int:
    """The descriptor of ``pid`` open on ``path``, once there is one: the
    server reads its requests from a private duplicate of descriptor 0 (its
    descriptor 0 then reads ``/dev/null``)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if fd != "0" and os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return int(fd)
        time.sleep(0.02)
    raise AssertionError(f"the server never moved its input off descriptor 0 ({path})")


def test_serve_stops_reading_a_file_while_its_replies_cannot_be_written(
    tmp_path: Path,
) -> None:
    """A regular file of 64 MB of requests as stdin, stdout a pipe nobody reads:
    the server reads only what it can answer into its bounded queues (a few
    MiB of the file), not the whole file."""
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}\n'
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(line * (64 * 1024 * 1024 // len(line)))
    with (
        requests.open("rb") as stdin,
        subprocess.Popen(
            [*CLI, "serve"], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        ) as server,
    ):
        try:
            offset = _settled(server.pid, f"fdinfo/{_fd_reading(server.pid, requests)}", "pos:")
            rss_kib = _proc_field(server.pid, "status", "VmRSS:")
        finally:
            server.kill()
    print(f"stdin read: {offset / 2**20:.1f} MiB of 64 MiB; RSS {rss_kib / 1024:.0f} MiB")
    assert offset < 8 * 1024 * 1024


#: The flood runs at least this long: past the writer's 1 s stall
#: (``WRITER_STALL_S``), after which full queues drop instead of pausing.
FLOOD_MIN_S = 2.0
#: ... and until the peak has not risen for this long.
LEVEL_S = 1.0


def _peak_once_level(pid: int, base: int) -> int:
    """The highest ``VmRSS`` of ``pid`` (from ``base``) over a flood of at
    least :data:`FLOOD_MIN_S`, once it has not risen for :data:`LEVEL_S`; an
    RSS that keeps growing runs to :data:`SETTLE_S` (then the caller's bound
    fails)."""
    start = time.monotonic()
    peak, since = base, start
    while time.monotonic() - start < SETTLE_S:
        time.sleep(0.1)
        now = _proc_field(pid, "status", "VmRSS:")
        if now > peak:
            peak, since = now, time.monotonic()
        elif time.monotonic() - start >= FLOOD_MIN_S and time.monotonic() - since >= LEVEL_S:
            break
    return peak


#: What the README and ``CALL_QUEUE_BYTES`` say a shell call whose reader stopped
#: holds (about 4.5 MiB), with room for the allocator's own variance.
PER_CALL_KIB = 7 * 1024


@pytest.mark.slow
def test_calls_whose_reader_stopped_hold_about_4_5_mib_each() -> None:
    """Eight calls of ``yes`` on a server whose stdout nobody reads: the
    server's memory grows by about the documented 4.5 MiB per call (its figure
    measured from an idle server's), however long the flood goes on (watched
    past the writer's stall until the peak levels)."""
    calls = 8
    with subprocess.Popen(
        [*CLI, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        try:
            server.stdin.write(b'{"jsonrpc":"2.0","id":"l","method":"tools.list"}\n')
            server.stdin.flush()
            assert server.stdout.readline()  # the server is up and idle
            base = _proc_field(server.pid, "status", "VmRSS:")
            for number in range(calls):
                arguments = {"command": "yes"}
                params = {"tool_id": "bash", "tool_call_id": f"c{number}", "arguments": arguments}
                request = {"jsonrpc": "2.0", "id": number, "method": "tool.call", "params": params}
                server.stdin.write(json.dumps(request).encode() + b"\n")
            server.stdin.flush()
            peak = _peak_once_level(server.pid, base)
            stats = _proc_field(server.pid, "status", "VmRSS:")
        finally:
            server.kill()
    per_call = (peak - base) / calls
    print(
        f"idle {base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, now {stats / 1024:.0f} MiB:"
        f" {per_call / 1024:.1f} MiB per call"
    )
    assert per_call <= PER_CALL_KIB
