"""Chunk to progress-line bytes, against the Rust seed in the same run.

A source (ASCII, and mixed 1-4-byte text) is written in 4 KiB writes into a tail
of the newest 64 KiB; after each write every delta due is cut at a 256-byte cap
and turned into the bytes of its ``tool_call_progress`` line (newline included).
These producers do that work side by side over the same source:

- ``drain_lines`` (this SDK's fast path): ``OutputStream.write`` +
  ``drain_lines``, the frames due written straight as their lines by the
  protocol's ``encode_delta_lines``, with no frame struct built;
- ``drain + encode_progress_line``: ``OutputStream.drain`` (frame structs, what a
  tool yields) and each frame written by the protocol's
  ``encode_progress_line``: the path a tool's output takes through the server;
- ``OutputStream alone``: ``drain``'s frames with no line written;
- ``two structs``: the same frames encoded the way the server did before the
  one codec (the body encoded to ``Raw``, then a ``ToolCallProgressFrame`` in a
  ``JsonRpcNotification`` encoded again), for comparison;
- ``seed``: the original Rust ``stream_chunk`` (its text, with only its imports
  replaced) and the ``serde_json`` notification a Rust server writes for each
  item, compiled with ``cargo build --release`` into a temporary directory from
  Debian's packaged crate sources (``librust-serde-json-dev``,
  ``librust-serde-derive-dev``: crates.io is not needed). Without cargo or those
  sources, the seed's line-by-line Python port (``bench_stream_chunk``) stands
  in, and the report says so.

The goal: the fast path (``drain_lines``) reaches at least 0.75 of the seed's
rate. The per-frame path is printed beside it: a frame struct per delta costs
more than the seed's whole line.

Run: ``python benchmarks/bench_progress_line.py`` (``--quick`` for a short run;
``--check`` exits 1 when a goal was missed).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from _goals import Goals, add_check_flag
from bench_stream_chunk import ascii_source, baseline_stream_chunk, mixed_source

from kigi_tool_protocol import (
    JsonRpcNotification,
    StreamingSpec,
    ToolCallProgressFrame,
    encode_progress_line,
    json_codec,
)
from kigi_tool_protocol._methods import METHOD_TOOL_CALL_PROGRESS
from kigi_tool_runtime import OutputStream, TailBuffer

MIB = 1024 * 1024
WRITE_BYTES = 4 * 1024
TAIL_BYTES = 64 * 1024
CAP = 256
CALL_ID = "call-1"
SUBKIND = "bash_output_chunk"
#: The target share of the seed's rate.
GOAL_VS_SEED = 0.75
#: Where Debian installs packaged crate sources.
DEBIAN_CRATES = Path("/usr/share/cargo/registry")
#: Seconds the seed's build may take.
BUILD_TIMEOUT_S = 300

SEED_CARGO_TOML = """\
[package]
name = "seed_chunk_bench"
version = "0.0.0"
edition = "2021"

[dependencies]
serde = { version = "1", features = ["derive"] }
serde_json = "1"

[profile.release]
opt-level = 3
"""

SEED_CARGO_CONFIG = f"""\
[source.crates-io]
replace-with = "debian"
[source.debian]
directory = "{DEBIAN_CRATES}"
[net]
offline = true
"""

# The seed's PartialResultPayload and stream_chunk as written (comments cut),
# StreamingSpec and ToolProgress reduced to the fields they use, and a driver
# that writes each item as the notification line a Rust server sends.
SEED_MAIN_RS = r"""
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::time::Instant;

const DEFAULT_MAX_DELTA_BYTES: usize = 16 * 1024;

pub struct StreamingSpec {
    pub subkind: String,
    pub max_delta_bytes: Option<u32>,
}

pub enum ToolProgress {
    Custom { subkind: String, payload: serde_json::Value },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialResultPayload {
    pub delta: String,
    pub total_bytes: u64,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub gap: bool,
}

fn incomplete_utf8_suffix_len(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => bytes.len() - e.valid_up_to(),
        Err(_) => 0,
    }
}

pub fn stream_chunk(
    spec: &StreamingSpec,
    tail: &[u8],
    total: u64,
    last_total: &mut u64,
    truncated: bool,
) -> Option<ToolProgress> {
    if total <= *last_total {
        return None;
    }
    let new = total - *last_total;
    let tail_len = tail.len() as u64;
    let (delta_bytes, gap) = if new <= tail_len {
        (&tail[(tail_len - new) as usize..], false)
    } else {
        (tail, true)
    };
    let cap = spec
        .max_delta_bytes
        .map_or(DEFAULT_MAX_DELTA_BYTES, |c| c as usize);
    let mut cut = delta_bytes.len().min(cap);
    while cut > 0 && incomplete_utf8_suffix_len(&delta_bytes[..cut]) > 0 {
        cut -= 1;
    }
    if cut == 0 && !delta_bytes.is_empty() {
        cut = delta_bytes.len().min(4);
        while cut < delta_bytes.len() && incomplete_utf8_suffix_len(&delta_bytes[..cut]) > 0 {
            cut += 1;
        }
    }
    if cut == 0 {
        return None;
    }
    let delta = String::from_utf8_lossy(&delta_bytes[..cut]).into_owned();
    let consumed = cut as u64;
    *last_total = if gap {
        total - (delta_bytes.len() as u64 - consumed.min(delta_bytes.len() as u64))
    } else {
        *last_total + consumed
    };
    let payload = PartialResultPayload {
        delta,
        total_bytes: total,
        truncated,
        gap,
    };
    Some(ToolProgress::Custom {
        subkind: spec.subkind.clone(),
        payload: serde_json::to_value(&payload).expect("PartialResultPayload always serializes"),
    })
}

#[derive(Serialize)]
struct Frame<'a> {
    tool_call_id: &'a str,
    kind: &'a str,
    body: &'a serde_json::Value,
}

#[derive(Serialize)]
struct Notification<'a> {
    jsonrpc: &'static str,
    seq: u64,
    method: &'static str,
    params: Frame<'a>,
}

fn run(source: &[u8], spec: &StreamingSpec, write: usize, tail_bytes: usize) -> (u64, u64) {
    let mut last_total: u64 = 0;
    let mut seq: u64 = 0;
    let mut out_bytes: u64 = 0;
    let mut line: Vec<u8> = Vec::with_capacity(1024);
    let mut total = 0usize;
    while total < source.len() {
        total = (total + write).min(source.len());
        let tail = &source[total.saturating_sub(tail_bytes)..total];
        while let Some(ToolProgress::Custom { subkind, payload }) =
            stream_chunk(spec, tail, total as u64, &mut last_total, false)
        {
            line.clear();
            let note = Notification {
                jsonrpc: "2.0",
                seq,
                method: "tool_call_progress",
                params: Frame { tool_call_id: "call-1", kind: &subkind, body: &payload },
            };
            serde_json::to_writer(&mut line, &note).expect("serializes");
            line.push(b'\n');
            out_bytes += line.len() as u64;
            seq += 1;
        }
    }
    (seq, out_bytes)
}

fn main() {
    // Arguments: cap, write size, tail size, repeats; the source on stdin.
    // Prints the best time in seconds, the frames and the line bytes.
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let spec = StreamingSpec {
        subkind: "bash_output_chunk".to_string(),
        max_delta_bytes: Some(args[0] as u32),
    };
    let mut source = Vec::new();
    std::io::stdin().read_to_end(&mut source).expect("stdin");
    let mut best = f64::INFINITY;
    let mut result = (0, 0);
    for _ in 0..args[3] {
        let started = Instant::now();
        result = run(&source, &spec, args[1], args[2]);
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!("{} {} {}", best, result.0, result.1);
}
"""


# -- The seed, compiled ---------------------------------------------------------


def build_seed(workdir: Path) -> tuple[Path | None, str]:
    """The seed's binary built under ``workdir``, or None and why not."""
    cargo = shutil.which("cargo")
    if cargo is None:
        return None, "cargo is not installed"
    wanted = ("serde_json-", "serde-", "serde_derive-")
    present = [entry.name for entry in DEBIAN_CRATES.iterdir()] if DEBIAN_CRATES.is_dir() else []
    missing = [name for name in wanted if not any(p.startswith(name) for p in present)]
    if missing:
        return None, (
            f"Debian's crate sources lack {', '.join(n.rstrip('-') for n in missing)}"
            " (apt-get install librust-serde-json-dev librust-serde-derive-dev)"
        )
    (workdir / "src").mkdir(parents=True)
    (workdir / ".cargo").mkdir()
    (workdir / "Cargo.toml").write_text(SEED_CARGO_TOML)
    (workdir / ".cargo" / "config.toml").write_text(SEED_CARGO_CONFIG)
    (workdir / "src" / "main.rs").write_text(SEED_MAIN_RS)
    env = {**os.environ, "CARGO_TARGET_DIR": str(workdir / "target")}
    try:
        done = subprocess.run(
            [cargo, "build", "--release", "--quiet"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"cargo build took longer than {BUILD_TIMEOUT_S} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"cargo build failed: {last}"
    return workdir / "target" / "release" / "seed_chunk_bench", "built"


def run_seed(binary: Path, source: bytes, repeats: int) -> tuple[float, int, int]:
    """(best seconds, frames, line bytes) of the compiled seed over ``source``."""
    done = subprocess.run(
        [str(binary), str(CAP), str(WRITE_BYTES), str(TAIL_BYTES), str(repeats)],
        input=source,
        capture_output=True,
        timeout=600,
        check=True,
    )
    seconds, frames, size = done.stdout.split()
    return float(seconds), int(frames), int(size)


# -- The Python producers -------------------------------------------------------


def run_output_stream(source: bytes) -> tuple[int, int]:
    """This SDK: OutputStream + encode_progress_line. Returns (frames, line bytes)."""
    stream = OutputStream(StreamingSpec(subkind=SUBKIND, max_delta_bytes=CAP), capacity=TAIL_BYTES)
    encode = encode_progress_line
    view = memoryview(source)
    seq = 0
    size = 0
    for start in range(0, len(view), WRITE_BYTES):
        stream.write(view[start : start + WRITE_BYTES])
        for item in stream.drain():
            size += len(encode(CALL_ID, item.subkind, item.payload, seq=seq))
            seq += 1
    for item in stream.finish():
        size += len(encode(CALL_ID, item.subkind, item.payload, seq=seq))
        seq += 1
    return seq, size


def run_drain_lines(source: bytes) -> tuple[int, int]:
    """The fast path: OutputStream.drain_lines. Returns (frames, line bytes)."""
    stream = OutputStream(StreamingSpec(subkind=SUBKIND, max_delta_bytes=CAP), capacity=TAIL_BYTES)
    view = memoryview(source)
    seq = 0
    size = 0
    for start in range(0, len(view), WRITE_BYTES):
        stream.write(view[start : start + WRITE_BYTES])
        data, frames = stream.drain_lines(CALL_ID, seq=seq)
        size += len(data)
        seq += frames
    data, frames = stream.finish_lines(CALL_ID, seq=seq)
    return seq + frames, size + len(data)


def run_chunk_only(source: bytes) -> tuple[int, int]:
    """OutputStream alone, no line written: the ceiling any encoder can reach."""
    stream = OutputStream(StreamingSpec(subkind=SUBKIND, max_delta_bytes=CAP), capacity=TAIL_BYTES)
    view = memoryview(source)
    frames = 0
    for start in range(0, len(view), WRITE_BYTES):
        stream.write(view[start : start + WRITE_BYTES])
        frames += len(stream.drain())
    frames += len(stream.finish())
    return frames, 0


def run_two_structs(source: bytes) -> tuple[int, int]:
    """The same frames encoded twice over, through the two wire structs."""
    stream = OutputStream(StreamingSpec(subkind=SUBKIND, max_delta_bytes=CAP), capacity=TAIL_BYTES)
    encode = json_codec.encode
    view = memoryview(source)
    seq = 0
    size = 0

    def line(kind: str, payload: object) -> bytes:
        frame: ToolCallProgressFrame[msgspec.Raw] = ToolCallProgressFrame(
            tool_call_id=CALL_ID, kind=kind, body=msgspec.Raw(encode(payload))
        )
        note = JsonRpcNotification(seq=seq, method=METHOD_TOOL_CALL_PROGRESS, params=frame)
        return encode(note) + b"\n"

    for start in range(0, len(view), WRITE_BYTES):
        stream.write(view[start : start + WRITE_BYTES])
        for item in stream.drain():
            size += len(line(item.subkind, item.payload))
            seq += 1
    for item in stream.finish():
        size += len(line(item.subkind, item.payload))
        seq += 1
    return seq, size


def run_seed_port(source: bytes) -> tuple[int, int]:
    """The seed's Python port (stand-in when the seed cannot be built)."""
    spec = StreamingSpec(subkind=SUBKIND, max_delta_bytes=CAP)
    buffer = TailBuffer(TAIL_BYTES)
    encode = json_codec.encode
    last_total = 0
    view = memoryview(source)
    seq = 0
    size = 0
    for start in range(0, len(view), WRITE_BYTES):
        buffer.write(view[start : start + WRITE_BYTES])
        while True:
            item, last_total = baseline_stream_chunk(
                spec, buffer.tail(), buffer.total, last_total, buffer.truncated
            )
            if item is None:
                break
            frame = ToolCallProgressFrame(
                tool_call_id=CALL_ID, kind=item.subkind, body=item.payload
            )
            note = JsonRpcNotification(seq=seq, method=METHOD_TOOL_CALL_PROGRESS, params=frame)
            size += len(encode(note)) + 1
            seq += 1
    return seq, size


def best_of(repeats: int, work: Callable[[], tuple[int, int]]) -> tuple[float, int, int]:
    best = float("inf")
    frames = size = 0
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        frames, size = work()
        best = min(best, time.perf_counter() - started)
    return best, frames, size


def _rate(source_bytes: int, seconds: float) -> str:
    return f"{source_bytes / seconds / MIB:8.1f} MiB/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (2 MiB, 2 repeats)")
    add_check_flag(parser)
    args = parser.parse_args(argv)
    size = 2 * MIB if args.quick else 16 * MIB
    repeats = 2 if args.quick else 5
    goals = Goals()
    with tempfile.TemporaryDirectory(prefix="kigi-seed-") as tmp:
        binary, why = build_seed(Path(tmp))
        if binary is None:
            print(f"seed: not built ({why}); its Python port stands in as the baseline")
        else:
            print("seed: the Rust stream_chunk + serde_json, built with cargo --release")
        print(
            f"{size // MIB} MiB per source, {WRITE_BYTES} B writes, cap {CAP} B, best of {repeats}"
        )
        for name, make in (("ascii", ascii_source), ("mixed", mixed_source)):
            source = make(size)
            if binary is not None:
                seed = run_seed(binary, source, repeats)
                seed_name = "seed (Rust)"
            else:
                seed = best_of(repeats, lambda source=source: run_seed_port(source))
                seed_name = "seed (Python port)"
            fast = best_of(repeats, lambda source=source: run_drain_lines(source))
            ours = best_of(repeats, lambda source=source: run_output_stream(source))
            old = best_of(repeats, lambda source=source: run_two_structs(source))
            bare = best_of(repeats, lambda source=source: run_chunk_only(source))
            if (fast[1], fast[2]) != (ours[1], ours[2]):
                raise SystemExit(f"{name}: drain_lines wrote {fast[1:]}, drain {ours[1:]}")
            print(f"\n{name}: {ours[1]} frames, {ours[2]} line bytes")
            for label, (seconds, frames, _) in (
                (seed_name, seed),
                ("drain_lines (the fast path)", fast),
                ("drain + encode_progress_line", ours),
                ("drain + two structs", old),
                ("drain alone (frames, no line)", bare),
            ):
                print(f"  {label:<38} {_rate(len(source), seconds)}  ({frames} frames)")
            share = seed[0] / fast[0]
            print(
                f"  share of the seed's rate: {share:.2f} (drain + encode_progress_line:"
                f" {seed[0] / ours[0]:.2f}, two structs: {seed[0] / old[0]:.2f},"
                f" drain alone: {seed[0] / bare[0]:.2f})"
            )
            goals.record(f"{name}: drain_lines vs {seed_name}", share, GOAL_VS_SEED)
    return goals.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
