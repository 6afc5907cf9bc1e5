"""The final flush every line-batching server shares: its sans-IO decisions
(``_call/_flush``, property-tested over any run of looks) and the thin driver
(``_call/_writer``'s ``LineOutput``) on a scripted sink and clock."""

from __future__ import annotations

import asyncio

import pytest
from bounded import run_within
from hypothesis import given, settings
from hypothesis import strategies as st

from kigi_tool_runtime._call._flush import FinalFlush
from kigi_tool_runtime._call._writer import LineOutput

_STEPS = st.lists(
    st.tuples(st.floats(0, 3, allow_nan=False), st.booleans()), min_size=1, max_size=40
)


@settings(max_examples=300)
@given(
    started=st.floats(0, 1e6, allow_nan=False),
    budget=st.floats(0, 20, allow_nan=False),
    stall=st.floats(0.01, 5, allow_nan=False),
    steps=_STEPS,
)
def test_the_flush_never_waits_past_its_budget_nor_through_a_stall(
    started: float, budget: float, stall: float, steps: list[tuple[float, bool]]
) -> None:
    """Whatever the looks (time passing, the output's verdict), each wait is
    positive, at most ``stall_s``, ends by ``started + budget_s``; a stalled
    look or one at the budget's end gives up (Rules 1 to 3)."""
    flush = FinalFlush(started, budget_s=budget, stall_s=stall)
    now = started
    for late, stalled in steps:
        delay = flush.wait_for(now, stalled)
        if stalled or now >= started + budget:
            assert delay is None
            return
        assert delay is not None
        assert 0 < delay <= stall
        assert now + delay <= started + budget + 1e-6
        now += delay + late * delay  # a wait ends when asked, or later


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="stall_s"):
        FinalFlush(0.0, stall_s=0)
    with pytest.raises(ValueError, match="budget_s"):
        FinalFlush(0.0, budget_s=-1)


class _Transport:
    def __init__(self) -> None:
        self.buffered = 0

    def get_write_buffer_size(self) -> int:
        return self.buffered


class _StuckSink:
    """A sink whose reader stopped: ``drain`` never returns."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.written = bytearray()

    def write(self, data: bytes | bytearray) -> None:
        self.written += data
        self.transport.buffered += len(data)

    async def drain(self) -> None:
        await asyncio.Event().wait()


def test_the_output_is_stalled_only_while_a_send_does_not_move() -> None:
    """A pending send is stalled once no byte moved for ``stall_s``; a buffer
    that shrinks is a move; a finished send is not stalled (Rule 2)."""

    async def main() -> None:
        sink = _StuckSink()
        clock = [0.0]
        output = LineOutput(sink, lambda: clock[0], stall_s=1.0)
        assert not output.stalled(0.0)
        send = asyncio.ensure_future(output.send(b"line\n"))
        await asyncio.sleep(0)
        assert sink.written == b"line\n"
        assert not output.stalled(0.5)
        sink.transport.buffered -= 1  # the reader took a byte
        assert not output.stalled(1.2)
        assert output.stalled(2.3)
        send.cancel()
        await asyncio.wait({send})

    run_within(main(), 30)


def test_the_final_flush_gives_up_on_a_stalled_output_and_waits_for_a_moving_one() -> None:
    """``final_flush`` returns False once the pending send stalls, and True
    when the writer finishes (Rule 3)."""

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        sink = _StuckSink()
        output = LineOutput(sink, loop.time, stall_s=0.05)
        writer = asyncio.ensure_future(output.send(b"x\n"))

        async def wait(seconds: float) -> None:
            await asyncio.wait({writer}, timeout=seconds)

        await asyncio.sleep(0)
        gave_up = await output.final_flush(loop.time(), writer.done, wait)
        writer.cancel()
        await asyncio.wait({writer})

        done = asyncio.ensure_future(asyncio.sleep(0.01))

        async def wait_done(seconds: float) -> None:
            await asyncio.wait({done}, timeout=seconds)

        finished = await LineOutput(sink, loop.time).final_flush(loop.time(), done.done, wait_done)
        return gave_up, finished

    gave_up, finished = run_within(main(), 30)
    assert gave_up is False
    assert finished is True


class _ListSink:
    """A sink that records each write, and fails from write ``fail_at`` on."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.writes: list[bytes] = []
        self.drained = 0
        self.fail_at = fail_at

    def write(self, data: bytes | bytearray) -> None:
        if self.fail_at is not None and len(self.writes) >= self.fail_at:
            raise BrokenPipeError("the reader went away")
        self.writes.append(bytes(data))

    async def drain(self) -> None:
        self.drained += 1


@settings(max_examples=100)
@given(
    batches=st.lists(st.binary(max_size=8), max_size=12),
    fail_at=st.none() | st.integers(0, 12),
)
def test_the_writer_loop_writes_each_batch_in_order_then_stops(
    batches: list[bytes], fail_at: int | None
) -> None:
    """The one writer loop (``_call/_writer`` Rule 1): every non-empty batch
    gathered is written and drained before the next is asked for, in order;
    ``None`` ends it; a failing output ends it broken, nothing written after."""

    async def main() -> tuple[bool, _ListSink, LineOutput]:
        sink = _ListSink(fail_at)
        output = LineOutput(sink, asyncio.get_running_loop().time)
        pending = list(batches)
        asked = []

        async def gather() -> bytes | None:
            asked.append(sink.drained)
            return pending.pop(0) if pending else None

        ok = await output.run(gather)
        # each ask came after the previous batch was drained
        assert asked == sorted(asked)
        return ok, sink, output

    ok, sink, output = run_within(main(), 30)
    wanted = [batch for batch in batches if batch]
    if fail_at is None or fail_at >= len(wanted):
        assert ok
        assert not output.broken
        assert sink.writes == wanted
        assert sink.drained == len(wanted)
    else:
        assert not ok
        assert output.broken
        assert sink.writes == wanted[:fail_at]
