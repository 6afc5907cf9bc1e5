"""The stop signals of ``kigi-stream``: counted, handed over, and the handlers
from before put back."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from kigi_tool_runtime._cli._signals import (
    STOP_SIGNALS,
    Stopped,
    StopSignals,
    raising_stop_signals,
)

#: Generous bound for a signal raised in this process to reach its handler.
SIGNAL_WAIT_S = 10.0


def _custom(number: int, frame: FrameType | None) -> None:
    raise AssertionError(f"the handler from before ran for {number}")


@pytest.fixture
def dispositions() -> Iterator[None]:
    """Set SIGINT ignored and a handler of our own for SIGTERM, as a process
    started in the background with a handler of its own has them; put the
    test run's back after."""
    saved = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _custom)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_the_stop_signals_are_ctrl_c_kill_and_hangup() -> None:
    """SIGINT, SIGTERM and SIGHUP, in that order."""
    assert STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.mark.usefixtures("dispositions")
def test_stop_signals_are_counted_handed_over_and_the_old_handlers_come_back() -> None:
    """Each signal, an ignored SIGINT included, reaches the callback with its
    number and the count already raised; the first gives the exit status; on
    exit the handlers from before are back."""
    seen: list[tuple[int, int]] = []

    async def main() -> StopSignals:
        arrived = asyncio.Event()

        def on_signal(number: int) -> None:
            seen.append((number, stops.count))
            if len(seen) == 3:
                arrived.set()

        with StopSignals(on_signal) as stops:
            assert stops.count == 0
            assert stops.first is None
            assert stops.exit_status() == 0
            assert stops.exit_status(7) == 7
            for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.raise_signal(number)
            await asyncio.wait_for(arrived.wait(), SIGNAL_WAIT_S)
        return stops

    stops = asyncio.run(main())
    assert seen == [(signal.SIGTERM, 1), (signal.SIGINT, 2), (signal.SIGHUP, 3)]
    assert stops.count == 3
    assert stops.first == signal.SIGTERM
    assert stops.exit_status() == 128 + signal.SIGTERM
    assert stops.exit_status(7) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is _custom
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


@pytest.mark.usefixtures("dispositions")
def test_the_old_handlers_come_back_when_the_block_raises() -> None:
    """An error inside the block still puts the handlers from before back."""

    async def main() -> None:
        with StopSignals(lambda number: None):
            raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        asyncio.run(main())
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is _custom


@pytest.mark.usefixtures("dispositions")
@pytest.mark.parametrize(
    ("number", "raised"),
    [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Stopped), (signal.SIGHUP, Stopped)],
)
def test_without_a_loop_each_stop_signal_raises(
    number: signal.Signals, raised: type[BaseException]
) -> None:
    """SIGINT raises KeyboardInterrupt even when it was ignored before, SIGTERM
    and SIGHUP raise Stopped; after the block the handlers from before are back."""
    with pytest.raises(raised), raising_stop_signals():
        signal.raise_signal(number)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is _custom
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
