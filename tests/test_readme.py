"""The README's code is kept true: its Python blocks run, and its commands do
what it says."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```(?P<lang>\w*)\n(?P<body>.*?)```", re.DOTALL)


def _blocks(lang: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return [m["body"] for m in _BLOCK.finditer(text) if m["lang"] == lang]


def test_readme_has_the_two_commands() -> None:
    """The README gives the install-and-run command and the test command."""
    commands = _blocks("sh")
    assert any("kigi-stream run" in c and "pip install" in c for c in commands)
    assert "python -m pip install -e '.[test]' && python -m pytest\n" in commands


#: What each Python block of the README prints when it works, in README order.
_EXPECTED_OUTPUT = (
    (
        "call-1/echo_chunk: 15 bytes in 4 frames (total 15), no gaps",
        "unknown field `offset`",
    ),
    ("echo and bash keep the streaming contract",),
)


def _run_block(body: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_readme_walkthrough_runs() -> None:
    """Define → Stream → Reassemble runs as written, reassembles the text whole
    and shows the rejected frame."""
    out = _run_block(_blocks("python")[0])
    for line in _EXPECTED_OUTPUT[0]:
        assert line in out


def test_readme_fuzzing_section_runs() -> None:
    """The fuzzing section runs as written: the kit passes the example tool and
    the shell tool."""
    blocks = _blocks("python")
    assert len(blocks) == len(_EXPECTED_OUTPUT), "a README Python block has no expected output"
    out = _run_block(blocks[1])
    for line in _EXPECTED_OUTPUT[1]:
        assert line in out


def test_readme_main_job_command_streams_whole_characters() -> None:
    """The README's ``kigi-stream run`` command, run as written, prints the
    command's output whole and a summary line that reports no loss."""
    (command,) = (c for c in _blocks("sh") if "kigi-stream run" in c and "pip install" in c)
    run = command[command.index("kigi-stream run") :].strip()
    argv = shlex.split(run)
    argv[argv.index("python3")] = sys.executable
    done = subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", *argv[1:]],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == "grüße ✓ 😀 " * 20 + "\n"
    assert "\ufffd" not in done.stdout.decode("utf-8")
    summary = done.stderr.decode("utf-8")
    assert "341 bytes" in summary
    assert "0 gaps" in summary
    assert "exit 0" in summary


def test_readme_cli_example_reports_the_loss(tmp_path: Path) -> None:
    """The CLI section's ``run --json`` into ``check`` example, run as written:
    a 4 KiB tail overflows, and ``check`` reports the gaps it finds as loss
    while the log itself stays valid."""
    (example,) = (c for c in _blocks("sh") if "kigi-stream check" in c)
    lines = [line.split("#")[0].strip() for line in example.splitlines() if line.strip()]
    run_line, check_line = lines
    run_argv, log_name = run_line.split(">")
    argv = shlex.split(run_argv)
    argv[argv.index("python3")] = sys.executable
    log = tmp_path / log_name.strip()
    with log.open("wb") as out:
        ran = subprocess.run(
            [sys.executable, "-m", "kigi_tool_runtime", *argv[1:]],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    assert ran.returncode == 0, ran.stderr
    check_argv = shlex.split(check_line)
    assert check_argv == ["kigi-stream", "check", log.name]
    checked = subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", "check", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 streams" in checked.stdout
    assert re.search(r"[1-9]\d* gaps? \(", checked.stdout), checked.stdout
