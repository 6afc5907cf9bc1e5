"""A character split across reads is held back at any cap, and holding it never
stalls the event loop: real children write 2-, 3- and 4-byte characters cut at
every index, sleeping past the tick between the pieces, at caps 0 to 4."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from processes import reap

from kigi_tool_protocol import StreamingSpec
from kigi_tool_runtime import OutputStream, ShellArgs, ShellOutcome, ShellTool
from kigi_tool_runtime.testing import byte_sources, collect, schedules
from kigi_tool_runtime.testing._strategies import ScheduleStep, tiny_caps

CLI = [sys.executable, "-m", "kigi_tool_runtime"]
CHARACTERS = ("é", "✓", "😀")
TINY_CAPS = [0, 1, 2, 3, 4]
#: The tool's tick, and the child's pause between the pieces of a character:
#: longer than the tick, so the tool reads the first piece alone and drains.
TICK_S = 0.01
PAUSE_S = 0.03
#: Bounds every call and every process here; far above what any of them needs.
DEADLINE_S = 30.0


def _every_cut() -> list[tuple[bytes, bytes]]:
    """Each character cut at each inner index, as the two writes."""
    cuts = []
    for character in CHARACTERS:
        data = character.encode()
        cuts += [(data[:at], data[at:]) for at in range(1, len(data))]
    return cuts


def _splitter(pause_s: float) -> str:
    """A child that writes every cut of every character as two writes with a
    pause after each, and a newline at the end."""
    pieces = [piece for pair in _every_cut() for piece in pair]
    return (
        "import os, time\n"
        f"for piece in {pieces!r}:\n"
        "    os.write(1, piece)\n"
        f"    time.sleep({pause_s!r})\n"
        "os.write(1, b'\\n')\n"
    )


EXPECTED = "".join((first + rest).decode() for first, rest in _every_cut()) + "\n"


@pytest.mark.parametrize("cap", TINY_CAPS)
def test_the_shell_tool_holds_split_characters_at_tiny_caps(cap: int) -> None:
    """Every cut of every character comes out whole, one character a frame at caps
    below a character, and the call ends (the watchdog fails a loop that spins)."""
    tool = ShellTool(tick=TICK_S, max_delta_bytes=cap)
    got = collect(
        tool,
        ShellArgs(command=[sys.executable, "-c", _splitter(PAUSE_S)]),
        deadline_s=DEADLINE_S,
    )
    outcome = got.result
    assert isinstance(outcome, ShellOutcome)
    assert outcome.exit_code == 0
    assert got.text == EXPECTED
    assert "\ufffd" not in got.text
    for payload in got.payloads:
        assert not payload.gap
        # A cap below one character still carries exactly one whole character.
        assert len(payload.delta.encode()) <= max(cap, 4)
        assert len(payload.delta) >= 1


#: The caps the real `kigi-stream run` is tested at: one below every character.
#: What each of caps 0-4 holds back is tested on the shell tool (above, with
#: the same child) and on ``OutputStream`` itself (below), without a process.
RUN_CAPS = [1]


@pytest.mark.parametrize("cap", RUN_CAPS)
def test_run_prints_split_characters_whole_and_ends_at_tiny_caps(cap: int) -> None:
    """`kigi-stream run --cap N` on the same child ends by itself with the text whole."""
    done = subprocess.run(
        [
            *CLI,
            "run",
            "--cap",
            str(cap),
            "--tick",
            "10",
            "--",
            sys.executable,
            "-c",
            _splitter(PAUSE_S),
        ],
        capture_output=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == EXPECTED


@pytest.mark.parametrize("cap", [0])
def test_run_holding_a_split_character_still_answers_sigterm(cap: int) -> None:
    """While a lone lead byte is held (the rest of the character never comes), the
    event loop runs: SIGTERM stops `run` and its command with 128 + 15. (That a
    held character never makes a drain due, at any cap, so a driver waiting on
    it cannot spin, is tested on ``OutputStream`` below.)"""
    child = "import os, time\nos.write(1, b'\\xf0')\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        [*CLI, "run", "--cap", str(cap), "--tick", "10", "--", sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)  # the byte is read and held; a spinning loop would be stuck now
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        reap(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err


@given(source=byte_sources(), cap=tiny_caps(), data=st.data())
def test_a_drain_always_clears_frame_ready(
    source: bytes, cap: int | None, data: st.DataObject
) -> None:
    """After any drain, ``frame_ready`` is false until new bytes arrive: a caller
    that waits whenever it is false can never spin on a held character. It is
    false until a cap's worth of new bytes (at least one) has been written, and
    when it is true a drain emits at least one frame."""
    spec = StreamingSpec(subkind="held_chunk", max_delta_bytes=cap)
    stream = OutputStream(spec, capacity=max(cap or 0, 1) + 64 * 1024)
    steps: list[ScheduleStep] = data.draw(schedules(source))
    since_drain = 0
    threshold = max(16 * 1024 if cap is None else cap, 1)
    for step in steps:
        if step is None:
            stream.drain()
            since_drain = 0
            assert not stream.frame_ready
        else:
            since_drain += stream.write(step)
            if since_drain < threshold:
                assert not stream.frame_ready
        if stream.frame_ready:
            # Ready means a drain now emits: a held character is not ready.
            assert stream.drain()
            since_drain = 0


@pytest.mark.parametrize("cap", TINY_CAPS)
def test_a_held_character_is_pending_but_not_ready(cap: int) -> None:
    """Written a byte at a time, each of 'é', '✓' and '😀' is ready only once whole
    (and at least a cap long); its leading bytes are pending (held), never ready."""
    stream = OutputStream(StreamingSpec(subkind="held_chunk", max_delta_bytes=cap), capacity=64)
    for character in CHARACTERS:
        data = character.encode()
        for at in range(len(data)):
            stream.write(data[at : at + 1])
            whole = at == len(data) - 1
            assert stream.pending == at + 1
            assert stream.frame_ready == (whole and len(data) >= max(cap, 1)), (character, at)
        frames = stream.drain()
        assert [frame.payload.delta for frame in frames] == [character]  # type: ignore[union-attr]
        assert not stream.frame_ready
