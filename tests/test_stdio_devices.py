"""``kigi-stream serve`` (and ``--mcp``) with ``/dev/null`` as its input or its
output, a device the event loop cannot watch: it serves, or ends at once at
end of input, with no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]
LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}\n'


@pytest.mark.parametrize("mode", [[], ["--mcp"]], ids=["stdio", "mcp"])
def test_dev_null_as_input_ends_at_once_without_a_traceback(mode: list[str]) -> None:
    with open("/dev/null", "rb") as null:
        done = subprocess.run(
            [*SERVE, *mode], stdin=null, capture_output=True, timeout=30, check=False
        )
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr


def test_dev_null_as_output_still_serves() -> None:
    with open("/dev/null", "wb") as null:
        done = subprocess.run(
            SERVE, input=LIST, stdout=null, stderr=subprocess.PIPE, timeout=30, check=False
        )
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr
