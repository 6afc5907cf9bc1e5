"""``mcp._hold`` (which responses wait for the host to read) and ``mcp._unread``
(how many written bytes the reader has not read, on real pipes and sockets)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_runtime.mcp._hold import POLL_S, SPIN_S, ResponseHold, poll_delay
from kigi_tool_runtime.mcp._unread import probe_for_fd, unread_probe, wait_until_read


@given(st.lists(st.sampled_from(["note", "response", "request", "caught_up"])))
def test_a_response_waits_exactly_when_a_notification_was_written_since_the_host_caught_up(
    events: list[str],
) -> None:
    """Rule 1 against a model: a response must wait iff a notification was
    written after the last catch-up; other messages never wait."""
    hold = ResponseHold(enabled=True)
    unread = False
    for event in events:
        if event == "caught_up":
            hold.caught_up(in_time=True)
            unread = False
            continue
        assert hold.must_wait(is_response=event == "response") == (event == "response" and unread)
        assert not hold.must_wait(is_response=False)
        hold.wrote(is_notification=event == "note")
        unread = unread or event == "note"


def test_a_disabled_hold_never_waits_and_counts_what_gave_up() -> None:
    """Rule 3: without a probe nothing is held; Rule 2's give-ups are counted."""
    off = ResponseHold(enabled=False)
    off.wrote(is_notification=True)
    assert not off.must_wait(is_response=True)
    on = ResponseHold(enabled=True)
    on.wrote(is_notification=True)
    on.caught_up(in_time=False)
    assert (on.held, on.gave_up) == (1, 1)
    assert not on.must_wait(is_response=True)


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


def test_waiting_ends_when_the_reader_has_read_or_the_limit_passes() -> None:
    """Rule 2 of ``_unread``: caught up once read; False past the limit."""

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
            async with asyncio.timeout(10):
                assert not await wait_until_read(sink, probe, 0.05)
                loop.call_later(0.05, os.read, read_fd, 10)
                assert await wait_until_read(sink, probe, 5.0)
            transport.close()
        finally:
            os.close(read_fd)
            os.close(write_fd)

    asyncio.run(body())


def test_a_probe_that_fails_ends_the_wait_as_if_read() -> None:
    """Rule 1 of ``_unread``: a probe answering ``None`` (it failed after it
    was made) ends a wait at once, caught up, whatever the limit."""

    class Sink:
        transport = None

    async def body() -> None:
        async with asyncio.timeout(10):
            assert await wait_until_read(Sink(), lambda: None, 60.0)

    asyncio.run(body())
