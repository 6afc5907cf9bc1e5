"""Encode and decode rates of one ``tool_call_progress`` notification carrying a
16 KiB delta: the protocol codec against ``json.dumps``/``json.loads`` plus the
same validation written by hand, measured in the same run.

    python benchmarks/bench_codec.py [--quick] [--check]

Prints frames/s and MB/s for each, and the codec's speed-up (goal: >= 3x on
both), then which goals were met; ``--check`` exits 1 when one was missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from _goals import Goals, add_check_flag

import kigi_tool_protocol as kp
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS

#: The delta size under test: the bash tool's per-frame cap.
DELTA_BYTES = 16 * 1024
#: The codec's goal: at least this many times the stdlib's rate, both ways.
GOAL_SPEEDUP = 3.0
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

FRAME_TYPE = kp.JsonRpcNotification[kp.ToolCallProgressFrame[kp.PartialResultPayload]]
PARAMS_BY_METHOD = {METHOD_TOOL_CALL_PROGRESS: kp.ToolCallProgressFrame[kp.PartialResultPayload]}


def _fill(line: str, size: int) -> str:
    """Repeat numbered ``line`` up to ``size`` UTF-8 bytes, cut on a character boundary."""
    pieces, total, n = [], 0, 0
    while total < size:
        piece = line.format(n=n)
        pieces.append(piece)
        total += len(piece.encode())
        n += 1
    return "".join(pieces).encode()[:size].decode("utf-8", "ignore")


#: What the delta holds. Decoding cost is dominated by building the delta str, so
#: the content decides the figures: plain log lines, and coloured terminal output
#: with tabs, quotes, backslashes and non-ASCII (escape-heavy, the worst case).
PROFILES = {
    "ascii-log": "2026-11-30T19:{n:05d}Z INFO worker-3 compiled src/module_{n}.py in 12ms\n",
    "ansi-terminal": (
        '\x1b[32mok\x1b[0m  src/kigi/módulo_{n}.py\tpassed in 0.{n}s — ✓ "quoted" \\path\r\n'
    ),
}


def _notification(delta: str) -> Any:
    payload = kp.PartialResultPayload(delta=delta, total_bytes=1_048_576 + len(delta.encode()))
    frame = kp.ToolCallProgressFrame(
        tool_call_id="0195b1a2-7c3e-7def-8abc-0123456789ab", kind="bash_output_chunk", body=payload
    )
    return kp.JsonRpcNotification(
        session_id="sess_abc", method=METHOD_TOOL_CALL_PROGRESS, params=frame
    )


def _as_dict(delta: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "session_id": "sess_abc",
        "method": "tool_call_progress",
        "params": {
            "tool_call_id": "0195b1a2-7c3e-7def-8abc-0123456789ab",
            "kind": "bash_output_chunk",
            "body": {
                "delta": delta,
                "total_bytes": 1_048_576 + len(delta.encode()),
                "truncated": False,
                "gap": False,
            },
        },
    }


def _stdlib_encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def _fail(path: str, reason: str) -> None:
    raise ValueError(f"{reason} at {path}")


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass; floats are rejected


def _check_keys(
    obj: Any, path: str, allowed: set[str], required: set[str], *, strict: bool
) -> None:
    if type(obj) is not dict:
        _fail(path, "expected an object")
    missing = required - obj.keys()
    if missing:
        _fail(path, f"missing {sorted(missing)}")
    if strict and obj.keys() - allowed:
        _fail(path, f"unknown fields {sorted(obj.keys() - allowed)}")


def _stdlib_decode(data: bytes) -> dict[str, Any]:
    """json.loads, then the checks the typed decoder makes, by hand."""
    message: dict[str, Any] = json.loads(data)
    _check_keys(
        message,
        "$",
        {"jsonrpc", "session_id", "seq", "method", "params"},
        {"jsonrpc", "method", "params"},
        strict=False,
    )
    if message["jsonrpc"] != "2.0" or type(message["jsonrpc"]) is not str:
        _fail("$.jsonrpc", 'expected "2.0"')
    session = message.get("session_id")
    if session is not None and (type(session) is not str or not session):
        _fail("$.session_id", "expected a non-empty str")
    seq = message.get("seq")
    if seq is not None and not (_is_int(seq) and 0 <= seq <= U64_MAX):
        _fail("$.seq", "expected a u64")
    if type(message["method"]) is not str:
        _fail("$.method", "expected a str")
    params = message["params"]
    _check_keys(
        params,
        "$.params",
        {"tool_call_id", "kind", "body", "dropped_count"},
        {"tool_call_id", "kind", "body"},
        strict=False,
    )
    call_id = params["tool_call_id"]
    if type(call_id) is not str or not call_id:
        _fail("$.params.tool_call_id", "expected a non-empty str")
    if type(params["kind"]) is not str:
        _fail("$.params.kind", "expected a str")
    dropped = params.get("dropped_count")
    if dropped is not None and not (_is_int(dropped) and 0 <= dropped <= U32_MAX):
        _fail("$.params.dropped_count", "expected a u32")
    body = params["body"]
    _check_keys(
        body,
        "$.params.body",
        {"delta", "total_bytes", "truncated", "gap"},
        {"delta", "total_bytes"},
        strict=True,
    )
    if type(body["delta"]) is not str:
        _fail("$.params.body.delta", "expected a str")
    total = body["total_bytes"]
    if not (_is_int(total) and 0 <= total <= U64_MAX):
        _fail("$.params.body.total_bytes", "expected a u64")
    for flag in ("truncated", "gap"):
        if type(body.setdefault(flag, False)) is not bool:
            _fail(f"$.params.body.{flag}", "expected a bool")
    return message


def _measure(
    rows: list[tuple[str, Callable[[], Any]]], iterations: int, rounds: int
) -> list[float]:
    """Best seconds per call of each row. Rounds interleave the rows, so a burst of
    load from another process hits every row alike instead of skewing one ratio."""
    best = [float("inf")] * len(rows)
    for _ in range(rounds):
        for index, (_, fn) in enumerate(rows):
            start = time.perf_counter()
            for _ in range(iterations):
                fn()
            best[index] = min(best[index], (time.perf_counter() - start) / iterations)
    return best


def _run(profile: str, iterations: int, rounds: int) -> tuple[float, float]:
    delta = _fill(PROFILES[profile], DELTA_BYTES)
    message, as_dict = _notification(delta), _as_dict(delta)
    data = kp.json_codec.encode(message)
    # Same bytes both ways, and both decoders accept them: the comparison is fair.
    assert data == _stdlib_encode(as_dict), "stdlib and codec bytes differ"
    assert kp.json_codec.decode(data, FRAME_TYPE) == message
    assert _stdlib_decode(data) == as_dict
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("encode  kigi json_codec.encode", lambda: kp.json_codec.encode(message)),
        ("encode  json.dumps", lambda: _stdlib_encode(as_dict)),
        ("decode  kigi json_codec.decode (typed)", lambda: kp.json_codec.decode(data, FRAME_TYPE)),
        (
            "decode  kigi decode_message (by method)",
            lambda: kp.decode_message(data, params=PARAMS_BY_METHOD),
        ),
        ("decode  json.loads + checks by hand", lambda: _stdlib_decode(data)),
    ]
    seconds = _measure(rows, iterations, rounds)
    size_mb = len(data) / 1e6
    print(f"\n[{profile}] frame {len(data)} bytes, delta {len(delta.encode())} bytes of UTF-8")
    for (name, _), per_call in zip(rows, seconds, strict=True):
        print(f"  {name:42} {1 / per_call:>9,.0f} frames/s {size_mb / per_call:>7,.0f} MB/s")
    encode_ratio, decode_ratio = seconds[1] / seconds[0], seconds[4] / seconds[2]
    print(f"  encode speed-up vs json.dumps:              {encode_ratio:4.1f}x")
    print(f"  decode speed-up vs json.loads + checks:     {decode_ratio:4.1f}x")
    print(f"  decode_message speed-up vs the same:        {seconds[4] / seconds[3]:4.1f}x")
    return encode_ratio, decode_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (less stable figures)")
    add_check_flag(parser)
    args = parser.parse_args()
    iterations, rounds = (200, 3) if args.quick else (2000, 9)
    print(f"{iterations} calls x {rounds} interleaved rounds, best round per row")
    goals = Goals()
    for profile in PROFILES:
        encode_ratio, decode_ratio = _run(profile, iterations, rounds)
        goals.record(f"[{profile}] encode speed-up vs json.dumps", encode_ratio, GOAL_SPEEDUP)
        goals.record(f"[{profile}] decode speed-up vs json.loads", decode_ratio, GOAL_SPEEDUP)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
