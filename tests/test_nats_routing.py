"""Calls routed by tool over a real NATS JetStream server: workers with
different tools share one deployment, each call runs once on a worker that has
its tool, a worker killed mid-call ends its call, a tool no worker serves ends
its call with ``tool_not_found``, and a deployment of the earlier layout is
refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nats", reason="the 'nats' extra is not installed (pip install '.[nats]')")

import nats.js.errors
from bounded import run_within
from nats.js.api import RetentionPolicy, StreamConfig
from nats_server import NatsServer
from processes import reap
from routed_tools import SERVED

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import Output, RemoteToolError, ShellTool, tool
from kigi_tool_runtime.nats import NatsClient, Worker, connect

PREFIX = "kr"
TOOLS_FILE = Path(__file__).with_name("routed_tools.py")


def _worker(url: str, name: str, log: Path, stderr: Path, prefix_option: str) -> Any:
    """``kigi-stream serve --nats`` serving the tools ``routed_tools.<name>``."""
    env = dict(os.environ, KIGI_ROUTED_LOG=str(log))
    with open(stderr, "wb") as err:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats", url),
                *("--tools", f"{TOOLS_FILE}:{name}", prefix_option, PREFIX),
                *("--max-in-flight", "4"),
            ],
            stderr=err,
            env=env,
        )


async def _until(what: str, check: Any, seconds: float = 30.0) -> None:
    """Wait for ``await check()`` to be true; fail naming ``what`` after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.1)


def _log(log: Path) -> list[tuple[str, str, int]]:
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(call, tool, int(pid)) for call, tool, pid in rows]


def test_three_workers_route_sixty_calls_a_kill_and_an_unserved_tool(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Three ``serve --nats`` workers with overlapping and distinct tool sets
    (``--nats-prefix`` and its alias ``--prefix``) share one deployment: 60
    mixed calls each run exactly once, on a worker that has the call's tool.
    A worker SIGKILLed mid-call ends that call ``connection_lost`` and it is
    not run again; the calls of a tool it shared still run; its own tool, now
    served by nobody, and a tool never served end ``tool_not_found`` naming
    the tool."""
    log = tmp_path / "calls.log"
    names = ("W1", "W2", "W3")
    options = ("--nats-prefix", "--nats-prefix", "--prefix")
    workers = {
        name: _worker(nats_server.url, name, log, tmp_path / f"{name}.err", option)
        for name, option in zip(names, options, strict=True)
    }
    tools_of_pid = {proc.pid: SERVED[name] for name, proc in workers.items()}

    async def main() -> None:
        client = NatsClient(
            await connect(nats_server.url),
            prefix=PREFIX,
            lease=3.0,
            owns_connection=True,
            # Only a tool that nobody serves waits it out (the others answer
            # at once): what the unserved calls below wait for.
            serves_wait=0.5,
        )
        async with client:

            async def all_served() -> bool:
                answers = [await client.served(tool) for tool in ("alpha", "delta")]
                # W2 serves only shared tools: wait for its own line on stderr.
                started = (tmp_path / "W2.err").read_bytes()
                return all(answers) and b"takes calls" in started

            await _until("the three workers serve their tools", all_served)
            tools = ("alpha", "beta", "gamma", "delta")
            calls = [
                await client.call(tools[n % 4], {"sleep": 0.2}, tool_call_id=f"mixed-{n}")
                for n in range(60)
            ]
            results = await asyncio.gather(*(call.result() for call in calls))
            for n, result in enumerate(results):
                assert isinstance(result, ToolCallResult)
                value = result.output.value
                assert value["tool"] == tools[n % 4]
                assert value["tool"] in tools_of_pid[value["pid"]], value
            ran = _log(log)
            assert sorted(call for call, _, _ in ran) == sorted(f"mixed-{n}" for n in range(60))
            assert all(tool in tools_of_pid[pid] for _, tool, pid in ran)

            # Only W1 serves alpha: kill it while it runs an alpha call.
            slow = await client.call("alpha", {"sleep": 60}, tool_call_id="killed")

            async def started() -> bool:
                return any(call == "killed" for call, _, _ in _log(log))

            await _until("W1 started the call", started)
            os.kill(workers["W1"].pid, signal.SIGKILL)
            with pytest.raises(RemoteToolError) as lost:
                await slow.result()
            assert lost.value.wire.code == "connection_lost", lost.value.message
            assert [row for row in _log(log) if row[0] == "killed"] == [
                ("killed", "alpha", workers["W1"].pid)
            ]

            # beta, which W1 shared with W2, still runs; alpha is served by nobody now.
            after = await (await client.call("beta", {}, tool_call_id="after")).result()
            assert after.output.value["pid"] == workers["W2"].pid
            unserved_tools = ("alpha", "omega")
            unserved_calls = await asyncio.gather(
                *(client.call(t, {}, tool_call_id=f"unserved-{t}") for t in unserved_tools)
            )
            for tool, call in zip(unserved_tools, unserved_calls, strict=True):
                with pytest.raises(RemoteToolError) as unserved:
                    await call.result()
                assert unserved.value.wire.code == "tool_not_found"
                assert f"no worker serves tool {tool!r}" in unserved.value.message
            assert not any(call.startswith("unserved") for call, _, _ in _log(log))

    try:
        run_within(main(), 100)
    finally:
        for proc in workers.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                reap(proc)


def test_a_call_no_worker_serves_ends_within_the_bound(nats_server: NatsServer) -> None:
    """With a worker serving only ``bash``, a call of ``python`` is never
    submitted: it ends ``tool_not_found`` naming the tool once the caller has
    asked for its ``serves_wait`` (0.5 s; bounded here at twice that plus a margin),
    and the calls stream holds no message for it."""

    async def main() -> None:
        worker_nc = await connect(nats_server.url)
        worker = Worker(worker_nc, [ShellTool(tick=0.01)], prefix=PREFIX)
        task = asyncio.create_task(worker.run())
        client = NatsClient(
            await connect(nats_server.url),
            prefix=PREFIX,
            lease=3.0,
            owns_connection=True,
            serves_wait=0.5,
        )
        try:
            async with client:
                await _until("the worker serves bash", lambda: _is(client.served("bash")))
                call = await client.call("python", {"code": "print(1)"}, tool_call_id="nope")
                with pytest.raises(RemoteToolError) as caught:
                    async with asyncio.timeout(2 * 0.5 + 5):
                        await call.result()
                assert caught.value.wire.code == "tool_not_found"
                assert "no worker serves tool 'python'" in caught.value.message
                info = await client.connection.jetstream().stream_info("KR_CALLS")
                assert info.state.messages == 0
                assert worker.statistics().calls_run == 0
        finally:
            worker.stop()
            await task
            await worker_nc.drain()

    run_within(main(), 60)


async def _is(answer: Any) -> bool:
    return bool(await answer)


def test_an_earlier_layout_is_refused_with_how_to_move_on(nats_server: NatsServer) -> None:
    """A calls stream of the earlier layout (one subject ``<prefix>.calls``) is
    neither used nor changed: a worker's run and a caller's call raise an
    error that names the stream and says how to move on."""

    async def main() -> None:
        nc = await connect(nats_server.url)
        try:
            js = nc.jetstream()
            old = StreamConfig(
                name="KR_CALLS", subjects=["kr.calls"], retention=RetentionPolicy.WORK_QUEUE
            )
            await js.add_stream(old)
            worker = Worker(nc, [ShellTool()], prefix=PREFIX)
            with pytest.raises(RuntimeError, match=r"KR_CALLS has the earlier layout.*stream rm"):
                await worker.run()
            client = NatsClient(nc, prefix=PREFIX)
            with pytest.raises(RuntimeError, match="earlier layout"):
                await client.call("bash", {"command": "true"})
            assert (await js.stream_info("KR_CALLS")).config.subjects == ["kr.calls"]
        finally:
            await nc.drain()

    run_within(main(), 30)


def test_a_queued_call_whose_tools_last_worker_left_ends_unserved(
    nats_server: NatsServer,
) -> None:
    """A call queued behind a busy worker, which then stops, is asked about
    again a lease later: no worker serves its tool, so it ends
    ``tool_not_found`` with its cancel written; a worker that comes later
    takes it and does not run it."""

    async def main() -> None:
        first_nc = await connect(nats_server.url)
        first = Worker(
            first_nc, [ShellTool(tick=0.01)], prefix=PREFIX, max_in_flight=1, heartbeat=0.2
        )
        first_run = asyncio.create_task(first.run())
        client = NatsClient(
            await connect(nats_server.url),
            prefix=PREFIX,
            # Five of the worker's heartbeats: what the queued call waits for.
            lease=1.0,
            owns_connection=True,
            serves_wait=0.5,
        )
        later_nc = await connect(nats_server.url)
        later: Worker | None = None
        later_run: asyncio.Task[Any] | None = None
        try:
            async with client:
                busy = await client.call("bash", {"command": "sleep 30"}, tool_call_id="busy")

                async def running() -> bool:
                    return first.statistics().calls_run == 1

                await _until("the first worker runs the busy call", running)
                queued = await client.call("bash", {"command": "echo never"}, tool_call_id="q")
                first.stop()
                await first_run
                with pytest.raises(RemoteToolError) as gone:
                    async with asyncio.timeout(30):
                        await queued.result()
                assert gone.value.wire.code == "tool_not_found", gone.value.message
                assert "no worker serves tool 'bash'" in gone.value.message
                with pytest.raises(RemoteToolError):
                    await busy.result()
                later = Worker(later_nc, [ShellTool(tick=0.01)], prefix=PREFIX)
                later_run = asyncio.create_task(later.run())

                async def emptied() -> bool:
                    info = await client.connection.jetstream().stream_info("KR_CALLS")
                    return info.state.messages == 0

                await _until("the later worker takes the queued call", emptied)
                assert later.statistics().calls_run == 0
        finally:
            first.stop()
            if later is not None and later_run is not None:
                later.stop()
                await later_run
            await first_nc.drain()
            await later_nc.drain()

    run_within(main(), 90)


async def _nap(out: Output, sleep: float = 0.0) -> str:
    """Sleep for `sleep` seconds."""
    await asyncio.sleep(sleep)
    return "rested"


def test_a_worker_with_more_tools_than_slots_pulls_on_every_tool(
    nats_server: NatsServer,
) -> None:
    """A worker with six tools and two slots has a pull waiting on each of
    its six tools while a slot is free (so a call of any of them is taken as
    it comes, not when its turn among the tools comes round); twenty-four
    concurrent calls across them all run once each, never more than two at
    a time."""
    tools = [tool(name=f"nap-{n}")(_nap) for n in range(6)]

    async def main() -> None:
        worker_nc = await connect(nats_server.url)
        worker = Worker(worker_nc, tools, prefix=PREFIX, max_in_flight=2, heartbeat=0.2)
        running = asyncio.create_task(worker.run())
        client = NatsClient(await connect(nats_server.url), prefix=PREFIX, owns_connection=True)
        try:
            async with client:
                js = client.connection.jetstream()
                subjects = worker.subjects

                async def all_pulled() -> bool:
                    for made in tools:
                        consumer = subjects.tool_consumer(made.id)
                        try:
                            info = await js.consumer_info(subjects.calls_jetstream, consumer)
                        except nats.js.errors.NotFoundError:
                            return False
                        if info.num_waiting < 1:
                            return False
                    return True

                await _until("a pull waits on every tool", all_pulled, seconds=20)
                calls = [
                    await client.call(f"nap-{n % 6}", {"sleep": 0.05}, tool_call_id=f"nap-{n}")
                    for n in range(24)
                ]
                for call in calls:
                    assert (await call.result()).output.value == "rested"
                stats = worker.statistics()
                assert stats.calls_run == 24
                assert stats.peak_in_flight == 2
        finally:
            worker.stop()
            await running
            await worker_nc.drain()

    run_within(main(), 90)
