"""The sans-IO rule, pinned: each core module imports, in a fresh interpreter
and with no package ``__init__`` run on the way, without loading an event
loop, a process, a socket or a thread module. A core that needs one of them
has grown a driver inside it; move that part out to its driver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The modules that hold the project's logic: the producer, the consumer, the
#: served call, the line splitter, the JSON-RPC cores, the host mappings, and the
#: ``async with`` mixin the call handles share.
CORE_MODULES = (
    "kigi_tool_protocol",
    "kigi_tool_runtime._closing",
    "kigi_tool_runtime._producer._chunk",
    "kigi_tool_runtime._producer._tail",
    "kigi_tool_runtime._producer._deltas",
    "kigi_tool_runtime._producer._output",
    "kigi_tool_runtime._consumer._loss",
    "kigi_tool_runtime._consumer._stream_fold",
    "kigi_tool_runtime._consumer._stream_state",
    "kigi_tool_runtime._consumer._reassembler",
    "kigi_tool_runtime._harness._monitor",
    "kigi_tool_runtime._harness._history",
    "kigi_tool_runtime._call._limits",
    "kigi_tool_runtime._call._live",
    "kigi_tool_runtime._call._outcome",
    "kigi_tool_runtime._call._caller",
    "kigi_tool_runtime._call._buffer",
    "kigi_tool_runtime._call._response",
    "kigi_tool_runtime._call._serving",
    "kigi_tool_runtime._call._queue",
    "kigi_tool_runtime._call._frame_check",
    "kigi_tool_runtime._call._schema",
    "kigi_tool_runtime._call._status",
    "kigi_tool_runtime._call._heartbeat",
    "kigi_tool_runtime._call._flush",
    "kigi_tool_runtime._wire._split",
    "kigi_tool_runtime._wire._rpc_lines",
    "kigi_tool_runtime._transport._rpc_server",
    "kigi_tool_runtime._transport._rpc_client",
    "kigi_tool_runtime._tools._errors",
    "kigi_tool_runtime._tools._result",
    "kigi_tool_runtime._tools._shell_outcome",
    "kigi_tool_runtime.acp._mapping",
    "kigi_tool_runtime.mcp._mapping",
    "kigi_tool_runtime.mcp._queued",
    "kigi_tool_runtime.mcp._hold",
    "kigi_tool_runtime.mcp._inflight",
    "kigi_tool_runtime.mcp._claims",
    "kigi_tool_runtime.mcp._partial",
    "kigi_tool_runtime.nats._protocol",
    "kigi_tool_runtime.langchain._mapping",
    "kigi_tool_runtime.langchain._fold",
    "kigi_tool_runtime.adk._keys",
    "kigi_tool_runtime.adk._folder",
)

FORBIDDEN = ("asyncio", "subprocess", "socket", "threading", "selectors")

# Every package of kigi_tool_runtime is stood in for by an empty module, so
# importing a submodule runs none of the package ``__init__`` files (which
# gather the drivers too) and measures the module's own imports alone.
_PROBE = """
import importlib, pathlib, sys, types
root = pathlib.Path(sys.argv[1]) / "kigi_tool_runtime"
def stand_in(name, path):
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
stand_in("kigi_tool_runtime", root)
for folder in root.iterdir():
    if (folder / "__init__.py").exists():
        stand_in("kigi_tool_runtime." + folder.name, folder)
importlib.import_module(sys.argv[2])
print(" ".join(sorted(set(sys.argv[3:]) & set(sys.modules))))
"""


def _loaded(module: str) -> list[str]:
    """Which of :data:`FORBIDDEN` importing ``module`` loads, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT), module, *FORBIDDEN],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("module", CORE_MODULES)
def test_a_core_module_loads_no_io(module: str) -> None:
    assert _loaded(module) == []


def test_the_probe_sees_a_driver() -> None:
    """The check can fail: the stdio server, a driver, loads asyncio."""
    assert "asyncio" in _loaded("kigi_tool_runtime._transport._server")
