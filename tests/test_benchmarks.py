"""The benchmark scripts' reporting: which goals were met, ``--check``, and no
figure printed as ``nan`` or below zero. (Their figures are never asserted.)"""

from __future__ import annotations

import importlib.util
import runpy
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kigi_tool_protocol import PartialResultPayload, json_codec

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_goals_say_which_were_met_and_check_fails_on_a_miss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every goal is printed met or MISSED; only --check turns a miss into exit 1."""
    goals_module = _load("_goals")
    goals = goals_module.Goals()
    assert goals.record("speed-up", 3.5, 3.0)
    assert not goals.record("share", 0.4, 0.5)
    assert goals.record("memory", 2.0, 16.0, at_most=True)
    assert not goals.record("unmeasured", float("nan"), 1.0)
    assert goals.finish(check=False) == 0
    out = capsys.readouterr().out
    assert "goals: 2 of 4 met" in out
    assert "met  speed-up: 3.50 (goal >= 3)" in out
    assert "MISSED  share: 0.40 (goal >= 0.5)" in out
    assert "met  memory: 2.00 (goal <= 16)" in out
    assert "n/a  unmeasured: not measured" in out
    assert "nan" not in out
    assert goals.finish(check=True) == 1
    met = goals_module.Goals()
    met.record("speed-up", 3.5, 3.0)
    assert met.finish(check=True) == 0


def _run_as_script(script: Path, *args: str) -> int:
    """Run ``script`` as ``python script ARGS`` would, in this process: its
    ``__main__`` block with that argv and its directory first on the path;
    the exit status it ends with."""
    argv, path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        return 1  # a message: Python prints it and exits 1
    finally:
        sys.argv, sys.path[:] = argv, path
    return 0


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_every_benchmark_takes_check_and_quick(
    script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each benchmark offers --quick and --check (its --help, run as the script
    runs, in this process)."""
    assert _run_as_script(script, "--help") == 0
    helped = capsys.readouterr().out
    assert "--quick" in helped
    assert "--check" in helped


def test_a_benchmark_runs_as_a_script_of_its_own() -> None:
    """A benchmark script runs with ``python benchmarks/bench_X.py`` from
    anywhere (its helpers found beside it): one real process."""
    helped = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_codec.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=BENCHMARKS.parent.parent,
    ).stdout
    assert "--quick" in helped
    assert "--check" in helped


def test_the_slicing_logic_cost_is_never_printed_negative() -> None:
    """A core faster than the floor (noise) reads ~0 ns per frame, never a negative figure."""
    bench = _load("bench_stream_chunk")
    assert bench._logic_ns(-0.002, 1000) == "~0"
    assert bench._logic_ns(0.0, 1000) == "~0"
    assert bench._logic_ns(0.002, 1000) == "2,000"


@pytest.mark.slow
def test_check_stream_benchmark_prints_no_nan(capsys: pytest.CaptureFixture[str]) -> None:
    """The check_stream benchmark's gap case (no oracle) prints n/a, not `nanms`,
    and the run ends with its goals (a --quick run of the script, in process)."""
    assert _run_as_script(BENCHMARKS / "bench_check_stream.py", "--quick") == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert " n/a " in out
    assert "\ngoals: " in out


def test_progress_line_benchmark_falls_back_to_the_seed_port_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without cargo the seed is not built and the reason is given; the Python
    producers the benchmark times write the same lines, and on ASCII cut the
    same frames as the seed's port (on mixed text the seed splits a character
    that straddles two writes, its known defect, and cuts more)."""
    bench = _load("bench_progress_line")
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.build_seed(tmp_path / "seed") == (None, "cargo is not installed")
    for source in (bench.ascii_source(20_000), bench.mixed_source(20_000)):
        ours = bench.run_output_stream(source)
        assert bench.run_two_structs(source) == ours
    ascii_text = bench.ascii_source(20_000)
    assert bench.run_seed_port(ascii_text)[0] == bench.run_output_stream(ascii_text)[0]


@given(text=st.text(st.characters(exclude_categories=["Cs"]), max_size=64))
@settings(max_examples=300)
def test_the_floor_ways_round_json_give_what_they_replace(text: str) -> None:
    """bench_transport_floor's two ways round the JSON passes, when they take a
    delta at all, give msgspec's bytes and decoded text exactly (a way that
    gave less would time less work than it replaces)."""
    floor = _load("bench_transport_floor")
    data = text.encode()
    escaped = floor.escape_utf8(data)
    assert escaped is None or escaped == json_codec.encode(text)
    body = json_codec.encode(PartialResultPayload(delta=text, total_bytes=len(data)))
    unescaped = floor.unescape_utf8(body)
    assert unescaped is None or unescaped == (text, len(data))
    if all(ch >= " " or ch in "\t\n\r" for ch in text):
        assert escaped is not None  # only a control byte is left to msgspec
    if "\\" not in text and all(ch >= " " or ch in "\t\n\r\b\f" for ch in text):
        assert unescaped is not None  # only \u and \/ escapes are left to msgspec
