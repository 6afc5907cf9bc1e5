"""The ``kigi-stream`` entry point: a Ctrl-C that comes while the package is
still being imported ends the command as one that comes later does (130, no
traceback). Real processes, real SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

KIGI_STREAM = str(Path(sysconfig.get_path("scripts")) / "kigi-stream")

#: Seconds the interrupted command may take to end: far above what it takes.
END_S = 30.0


@pytest.mark.parametrize(
    "module",
    [
        "kigi_tool_protocol._limits",  # early in the import of the package
        "kigi_tool_runtime._tools._shell",  # in the middle of it
        "kigi_tool_runtime._cli._main",  # the last import, just before main
    ],
)
def test_a_sigint_while_run_is_still_importing_exits_130_without_traceback(
    module: str,
) -> None:
    """SIGINT sent the moment the interpreter reports ``module`` imported (its
    import-time log, ``PYTHONPROFILEIMPORTTIME``, is written as each import
    completes, so the signal lands during or after the package's import and
    always after Python's own SIGINT handler is in place): exit status 130, no
    ``KeyboardInterrupt`` traceback, and the command never started."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    with subprocess.Popen(
        [KIGI_STREAM, "run", "--", "sh", "-c", "echo started; sleep 30"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as proc:
        assert proc.stderr is not None
        seen: list[bytes] = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if line.rsplit(b"|", 1)[-1].strip() == module.encode():
                    proc.send_signal(signal.SIGINT)
                    break
            else:
                pytest.fail(f"{module} was never imported: {b''.join(seen[-5:])!r}")
            rest, tail = proc.communicate(timeout=END_S)
            err = (b"".join(seen) + tail).decode()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, (proc.returncode, err[-2000:])
        assert "Traceback" not in err
        assert "KeyboardInterrupt" not in err
        assert b"started" not in rest


def test_the_entry_point_is_the_kigi_stream_command() -> None:
    """The console script runs the same command as ``python -m kigi_tool_runtime``."""
    done = subprocess.run(
        [KIGI_STREAM, "--version"], capture_output=True, timeout=END_S, check=False
    )
    module = subprocess.run(
        [sys.executable, "-m", "kigi_tool_runtime", "--version"],
        capture_output=True,
        timeout=END_S,
        check=False,
    )
    assert done.returncode == module.returncode == 0
    assert done.stdout == module.stdout


HELD_SIGINT = """
import signal, sys
from kigi_tool_runtime._cli import _run
from kigi_tool_runtime._cli._main import main


class SignalledFirst(_run.StopSignals):
    def __enter__(self):
        # A Ctrl-C in the last moment before the handlers are in place, with
        # the event loop already made: it is held, then taken by them.
        signal.raise_signal(signal.SIGINT)
        return super().__enter__()


_run.StopSignals = SignalledFirst
sys.exit(main(["run", "--", "sh", "-c", "echo started"]))
"""


def test_a_sigint_just_before_runs_handlers_are_in_place_is_held_then_taken() -> None:
    """A SIGINT while ``run``'s event loop is made but its stop signals' handlers
    are not yet in place is held and handed to them: exit 130, no traceback,
    and the command never runs."""
    done = subprocess.run(
        [sys.executable, "-c", HELD_SIGINT], capture_output=True, timeout=END_S, check=False
    )
    err = done.stderr.decode()
    assert done.returncode == 130, err
    assert "Traceback" not in err
    assert b"started" not in done.stdout
    assert "cancelled" in err  # the summary: the call was stopped


def test_the_entry_module_imports_nothing_before_its_handler_is_in_place() -> None:
    """Importing the console script's module (what runs before ``main`` takes
    Ctrl-C) loads neither the package's names, the protocol package nor
    msgspec: the slow part of a start comes after the handler."""
    script = (
        "import sys\n"
        "import kigi_tool_runtime._cli._entry\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kigi', 'msgspec'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=END_S, check=True
    )
    assert done.stdout.split() == [
        "['kigi_tool_runtime',",
        "'kigi_tool_runtime._cli',",
        "'kigi_tool_runtime._cli._entry']",
    ]
