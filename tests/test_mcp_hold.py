"""``mcp._hold`` (which responses wait for the host to read) and ``mcp._unread``
(how many written bytes the reader has not read, on real pipes and sockets)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from mcp_raw import INITIALIZE, INITIALIZED, bash_call

from kigi_tool_runtime.mcp._hold import POLL_S, RESPONSE_HOLD_S, SPIN_S, ResponseHold, poll_delay
from kigi_tool_runtime.mcp._unread import buffered, probe_for_fd, unread_probe

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve", "--mcp"]

CALLS = st.sampled_from("abc")
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("note"), CALLS, st.integers(1, 50)),
        st.tuples(st.just("response"), CALLS, st.integers(1, 50)),
        st.tuples(st.just("other"), st.none(), st.integers(1, 50)),
        st.tuples(st.just("read"), st.none(), st.integers(0, 120)),
        st.tuples(st.just("look"), st.none(), st.just(0)),
        st.tuples(st.just("wait"), st.none(), st.integers(0, 700)),
    ),
    max_size=60,
)


@given(events=EVENTS)
def test_each_response_waits_for_its_own_calls_notifications_alone(
    events: list[tuple[str, str | None, int]],
) -> None:
    """Rules 1-3 against a model of the output: a response is held exactly
    when a notification of its own call is not known read; a look releases
    every held response whose call's notifications the host has read, at
    once, whatever else is held (no response waits behind another), and any
    held for ``RESPONSE_HOLD_S``; nothing else is ever held."""
    hold: ResponseHold[int] = ResponseHold(enabled=True)
    now = 0.0
    written = host_read = known_read = 0
    last_note: dict[str, int] = {}
    held: dict[int, tuple[str, float]] = {}  # response number: call, since
    for number, (kind, call, size) in enumerate(events):
        if call is not None and any(c == call for c, _ in held.values()):
            continue  # a call whose response waits sends nothing more
        if kind == "note" and call is not None:
            written += size
            hold.wrote(size, call=call, is_notification=True)
            last_note[call] = written
        elif kind == "response" and call is not None:
            must = last_note.get(call, 0) > known_read
            assert hold.must_look(call) == must
            assert hold.hold(number, call, now) == must
            if must:
                held[number] = (call, now)
            else:
                written += size
                hold.wrote(size, call=call, is_notification=False)
        elif kind == "other":
            written += size
            hold.wrote(size, call=None, is_notification=False)
        elif kind == "read":
            host_read = min(written, host_read + size)
        elif kind == "wait":
            now += size / 1000
        else:
            going = hold.release(written - host_read, now)
            known_read = host_read
            expected = [
                n
                for n, (c, since) in held.items()
                if last_note[c] <= host_read or now - since >= RESPONSE_HOLD_S
            ]
            assert going == expected
            for n in going:
                held.pop(n)
        assert hold.holding == len(held)
    assert hold.gave_up <= hold.held


def test_a_disabled_hold_never_waits_and_counts_what_gave_up() -> None:
    """Rule 4: without a probe nothing is held; Rule 3's give-ups are counted."""
    off: ResponseHold[str] = ResponseHold(enabled=False)
    off.wrote(10, call="a", is_notification=True)
    assert not off.hold("response", "a", 0.0)
    on: ResponseHold[str] = ResponseHold(enabled=True)
    on.wrote(10, call="a", is_notification=True)
    assert on.hold("response", "a", 0.0)
    assert on.release(10, RESPONSE_HOLD_S / 2) == []
    assert on.release(10, RESPONSE_HOLD_S) == ["response"]
    assert (on.held, on.gave_up) == (1, 1)
    assert on.release(None, 0.0) == []  # a failed probe: all read
    on.wrote(5, call="b", is_notification=True)
    assert not on.hold("late", "a", 0.0)  # a's notifications are done with


def test_the_next_look_follows_the_newest_hold() -> None:
    """Rule 5: bare yields while the newest hold is within SPIN_S."""
    hold: ResponseHold[str] = ResponseHold(enabled=True)
    hold.wrote(10, call="a", is_notification=True)
    hold.wrote(10, call="b", is_notification=True)
    assert hold.hold("ra", "a", 0.0)
    assert hold.next_look(1.0) == POLL_S
    assert hold.hold("rb", "b", 1.0)
    assert hold.next_look(1.0) == 0.0
    assert hold.release(10, 1.0) == ["ra"]  # a's note is read; b's is not


def test_the_poll_schedule_yields_first_then_polls_each_millisecond() -> None:
    """Rule 4: bare yields within SPIN_S, then POLL_S."""
    assert poll_delay(0.0) == 0.0
    assert poll_delay(SPIN_S / 2) == 0.0
    assert poll_delay(SPIN_S) == POLL_S
    assert poll_delay(0.5) == POLL_S


def test_a_pipe_reports_the_bytes_its_reader_has_not_read() -> None:
    read_fd, write_fd = os.pipe()
    try:
        probe = probe_for_fd(write_fd)
        assert probe is not None
        assert probe() == 0
        os.write(write_fd, b"x" * 100)
        assert probe() == 100
        os.read(read_fd, 60)
        assert probe() == 40
        os.read(read_fd, 40)
        assert probe() == 0
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_unix_socket_reports_bytes_until_its_peer_has_read_them_all() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        probe = probe_for_fd(ours.fileno())
        assert probe is not None
        assert probe() == 0
        ours.send(b"y" * 100)
        assert probe()
        theirs.recv(60)
        assert probe()
        theirs.recv(40)
        assert probe() == 0


def test_files_and_tcp_have_no_probe(tmp_path: Path) -> None:
    """Rule 3: nothing is held on an output whose reading cannot be seen."""
    with open(tmp_path / "out", "wb") as file:
        assert probe_for_fd(file.fileno()) is None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        assert probe_for_fd(tcp.fileno()) is None
    assert unread_probe(object()) is None


def test_an_asyncio_pipe_writer_reports_what_its_reader_has_not_read() -> None:
    """Rule 2 of ``_unread``: the writer's own buffer plus the pipe's bytes."""

    async def body() -> None:
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", closefd=False)
            )
            sink = asyncio.StreamWriter(transport, protocol, None, loop)
            probe = unread_probe(sink)
            assert probe is not None
            sink.write(b"z" * 10)
            await sink.drain()
            assert (buffered(sink), probe()) == (0, 10)
            os.read(read_fd, 4)
            assert probe() == 6
            transport.close()
        finally:
            os.close(read_fd)
            os.close(write_fd)

    asyncio.run(body())


#: The host's pause between two reads in the slow-host test.
HOST_PAUSE_S = 0.3

#: Calls of the slow-host test, all ending at once.
TOGETHER = 20


def test_calls_that_end_together_are_answered_in_a_read_or_two_of_a_slow_host(
    tmp_path: Path,
) -> None:
    """``serve --mcp`` with a host that reads once every 0.3 s: twenty calls
    that end together are all answered within a few of its reads (held one
    after another, each response would cost a read of its own: twenty), and
    no read carries a call's response with a notification of that call."""
    go = tmp_path / "go"
    command = f"echo started; while [ ! -e {go} ]; do sleep 0.01; done; echo done"
    with subprocess.Popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        out = proc.stdout.fileno()

        def send(message: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()

        send(INITIALIZE)
        assert json.loads(proc.stdout.readline())["id"] == 0
        send(INITIALIZED)
        for n in range(1, TOGETHER + 1):
            send(bash_call(n, command, f"t{n}"))
        started = 0
        while started < TOGETHER:
            started += (
                json.loads(proc.stdout.readline())["params"]["message"] == "started"
            )  # status mode: the newest line
        go.touch()
        reads: list[list[dict[str, Any]]] = []
        rest = b""
        answered = 0
        while answered < TOGETHER:
            assert len(reads) < 200, "the calls were never all answered"
            time.sleep(HOST_PAUSE_S)
            data = os.read(out, 16 * 1024 * 1024)  # one read, as a host makes it
            assert data, "the server closed its output"
            *lines, rest = (rest + data).split(b"\n")
            reads.append([json.loads(line) for line in lines])
            answered += sum("id" in message for message in reads[-1])
        for messages in reads:
            tokens = {m["params"]["progressToken"] for m in messages if "method" in m}
            assert not tokens & {f"t{m['id']}" for m in messages if "id" in m}
        # Held per call: one read takes every "done", the next every response
        # (a loaded machine may spread the ends over a few more). Held one
        # after another they took nine reads here, twenty in smaller reads.
        assert len(reads) <= 5, [len(messages) for messages in reads]
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
