"""A real ``kigi-stream serve --mcp-http 127.0.0.1:0`` child for tests: started,
its endpoint read from its first line on stderr, and stopped (SIGTERM, then
SIGKILL after 15 s) when the test is done."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from processes import stop

SERVE = [sys.executable, "-m", "kigi_tool_runtime", "serve"]


@contextmanager
def mcp_http_server(*extra: str, cwd: Path | None = None) -> Iterator[str]:
    """Serve over streamable HTTP on a free loopback port (``extra`` are more
    ``serve`` options, ``cwd`` its working directory); yield the endpoint URL."""
    proc = subprocess.Popen(
        [*SERVE, "--mcp-http", "127.0.0.1:0", *extra], stderr=subprocess.PIPE, cwd=cwd
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        match = re.search(r"http://127\.0\.0\.1:\d+/mcp", line)
        assert match, line
        yield match.group()
    finally:
        stop(proc, grace=15)
