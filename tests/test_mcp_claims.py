"""Tests for ``mcp._claims`` and ``mcp._inflight``: a token, or a request id,
names at most one running call, and what is held is given back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from mcp.shared.dispatcher import coerce_request_id

from kigi_tool_runtime.mcp._claims import Claims
from kigi_tool_runtime.mcp._inflight import InFlight, correlated

KEYS = st.lists(st.sampled_from("abcdef"), min_size=0, max_size=3, unique=True)
IDS = st.one_of(st.integers(0, 4), st.sampled_from(["0", "1", "x", "y"]))
METHODS = st.sampled_from(["tools/call", "ping", "tools/list"])


class ClaimsMachine(RuleBasedStateMachine):
    """``Claims`` against a model: the calls running, each with its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: Claims[str] = Claims()
        self.running: list[list[str]] = []

    @rule(keys=KEYS)
    def claim(self, keys: list[str]) -> None:
        held = {key for call in self.running for key in call}
        answer = self.claims.claim(keys)
        clash = [key for key in keys if key in held]
        if clash:
            assert answer == clash[0]  # the first key held; nothing taken
        else:
            assert answer is None
            self.running.append(keys)

    @precondition(lambda self: self.running)
    @rule(index=st.integers(0, 100))
    def release(self, index: int) -> None:
        self.claims.release(self.running.pop(index % len(self.running)))

    @invariant()
    def held_is_exactly_the_running_calls_keys(self) -> None:
        keys = [key for call in self.running for key in call]
        assert len(keys) == len(set(keys))  # a key names one call
        assert len(self.claims) == len(keys)
        assert all(key in self.claims for key in keys)


TestClaims = ClaimsMachine.TestCase


def _sdk_key(request_id: int | str) -> int | str:
    return coerce_request_id(request_id)


@given(request_id=st.one_of(st.integers(), st.text(), st.integers().map(str)))
def test_ids_are_correlated_as_the_sdk_correlates_them(request_id: int | str) -> None:
    """``_inflight``'s copy of the SDK's id coercion agrees with the SDK's."""
    assert correlated(request_id) == coerce_request_id(request_id)
    assert type(correlated(request_id)) is type(coerce_request_id(request_id))


class InFlightMachine(RuleBasedStateMachine):
    """``InFlight`` against a model: open requests by the SDK's id, each with
    its method."""

    def __init__(self) -> None:
        super().__init__()
        self.inflight = InFlight()
        self.open: dict[int | str, str] = {}

    @rule(request_id=IDS, method=METHODS)
    def forward(self, request_id: int | str, method: str) -> None:
        key = _sdk_key(request_id)
        accepted = self.inflight.forwarded(request_id, method)
        assert accepted == (key not in self.open)  # a reused open id is refused
        if accepted:
            self.open[key] = method

    @rule(request_id=IDS)
    def answer(self, request_id: int | str) -> None:
        self.inflight.answered(request_id)
        self.open.pop(_sdk_key(request_id), None)

    @rule(request_id=IDS)
    def cancel(self, request_id: int | str) -> None:
        self.inflight.cancelled(request_id)
        self.open.pop(_sdk_key(request_id), None)

    @invariant()
    def counts_match(self) -> None:
        assert self.inflight.open == len(self.open)
        assert self.inflight.awaited == sum(m != "tools/call" for m in self.open.values())
        for request_id in ("0", 1, "x"):
            assert self.inflight.is_open(request_id) == (_sdk_key(request_id) in self.open)


TestInFlight = InFlightMachine.TestCase
