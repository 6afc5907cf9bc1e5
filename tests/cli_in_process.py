"""``kigi-stream ARGS`` run by its ``main`` inside the test process, for the
commands whose work is reading a file (or standard input) and printing
(``check``, ``follow --once``, usage errors, ``--help``): the same exit status,
stdout and stderr bytes as the installed command gives, without starting a
Python process for each. What only a real process shows (signals, closed or
unread pipes, terminals, the entry point itself) stays in real-process tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

from kigi_tool_runtime._cli._main import main


@contextlib.contextmanager
def _standard_streams(stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> Iterator[None]:
    """Descriptors 0-2 and ``sys.stdin/stdout/stderr`` on the given files for
    the block, then both put back as they were."""
    files = (stdin, stdout, stderr)
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved = (sys.stdin, sys.stdout, sys.stderr)
    try:
        for fd, file in enumerate(files):
            os.dup2(file.fileno(), fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved
        for fd, saved_fd in enumerate(saved_fds):
            os.dup2(saved_fd, fd)
            os.close(saved_fd)


def kigi_in_process(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``kigi-stream ARGS`` with ``stdin`` (default: empty) as ``main`` runs it
    here, answered like :func:`subprocess.run`: exit status, stdout, stderr."""
    with (
        tempfile.TemporaryFile() as given,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        given.write(stdin or b"")
        given.seek(0)
        with _standard_streams(given, out, err):
            try:
                status = main(list(args))
            except SystemExit as exc:
                code = exc.code
                status = code if isinstance(code, int) else (0 if code is None else 1)
                if isinstance(code, str):
                    sys.stderr.write(code + "\n")
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["kigi-stream", *args], status, out.read(), err.read())


__all__ = ["kigi_in_process"]
