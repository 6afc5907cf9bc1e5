"""The README's code is kept true: its Python blocks run, and its commands do
what it says."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from docs_pages import all_text, blocks

#: Where `pip install` put the `kigi-stream` command for this interpreter: the
#: README's commands run with it first on PATH, as in an activated venv.
_SCRIPTS = sysconfig.get_path("scripts")


def _blocks(lang: str) -> list[str]:
    return blocks(lang)


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": _SCRIPTS + os.pathsep + os.environ.get("PATH", "")}


#: The README's test command, which CI (``.ci/run``) runs as written: in
#: parallel, the slowest tests listed at the end.
TEST_COMMAND = (
    ".venv/bin/python -m pip install -e '.[test]'"
    " && .venv/bin/python -m pytest -n auto --durations=30"
)


def test_readme_has_the_two_commands() -> None:
    """The README gives the install-and-run command, and a test command that
    names the extra so it resolves from the clone, does not need the venv to be
    active, runs in parallel, and is the one CI runs."""
    commands = _blocks("sh")
    assert any("kigi-stream run" in c and "pip install" in c for c in commands)
    install = next(c for c in commands if "kigi-stream run" in c and "pip install" in c)
    assert install.startswith("python3 -m venv .venv && ")
    assert TEST_COMMAND + "\n" in commands
    assert "pip install 'kigi-tool-runtime[test]'" not in all_text()
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{TEST_COMMAND}\n" in ci


#: What each Python block of the README prints when it works, found by a line
#: of its code; every block must have an entry.
_EXPECTED_OUTPUT = {
    'await out.run("echo lift-off")': (
        "{'to': {'type': 'integer', 'default': 3}}\n1\n2\n3\nlift-off\n",
        "'1\\n2\\n3\\nlift-off\\n0'\n",
        "invalid_params error (-32602): invalid arguments for tool 'count': Expected `int`,"
        " got `str` at `$.to`",
    ),
    # Served from a file by test_quickstart_tool_is_served_as_written.
    "async def shout(": ("shouting\nHI THERE\n",),
    "def count_plain(": ("1\n2\n'1\\n2\\ncounted'\n",),
    "# 1. Define:": (
        "call-1/echo_chunk: 15 bytes in 4 frames (total 15), no gaps",
        "unknown field `offset`",
    ),
    "Client.spawn(": (
        "tools: ['bash']\none\ntwo\nexit code: 0\nc1/bash_output_chunk: 8 bytes in ",
        "(total 8), no gaps\nfailed: timeout\n",
    ),
    "fuzz_streaming_tool(": ("echo and bash keep the streaming contract",),
    "ProgressFolder(on_appended": (
        "grüße ✓ 😀\n",
        "bash_output_chunk: 17 bytes in",
        "no gaps",
        "exit code 0",
    ),
    # An ACP agent: run by tests/test_acp.py against the SDK's client.
    "AcpToolCalls(conn)": ("agent",),
    # Run as files, by tests/test_serve_tools.py: a user's tools.py, and the
    # program serving it with serve_stdio.
    "TOOLS = [Count()]": (),
    "serve_stdio(TOOLS)": (),
    # The NATS wire's request digest: run by tests/test_nats_protocol.py.
    "def request_digest(": (),
    # Needs the langchain extra: run by tests/test_langchain.py.
    "ToolEventFolder()": ("grüße ✓ 😀", "bash_output_chunk: 17 bytes in", "complete: True"),
    # Run by tests/test_pydantic_ai.py (it needs the pydantic-ai extra).
    "KigiToolset([ShellTool()])": (
        "grüße ✓ 😀\nthe command said: grüße ✓ 😀\n",
        "/bash_output_chunk: 17 bytes in",
        "no gaps",
        "exit code 0 complete True",
    ),
    "declaring_partial_results(stdio_client": (
        "partial results\n",
        "bash_output_chunk: 16 bytes in 2 frames (total 16), no gaps",
        "final: [True]",
    ),
    # Run by tests/test_fastmcp.py (it needs the fastmcp extra).
    "add_kigi_tools(mcp, [ShellTool()])": ("live: hi", "[exit code 0; 3 bytes of output"),
    # Run by tests/test_adk.py (it needs the google-adk extra).
    "KigiAdkTool(ShellTool())]": ("live: grüße\n", "grüße | complete: True"),
    # Needs a NATS server: run by tests/test_nats.py against a real one.
    "NatsClient.connect(": ("grüße from a worker", "exit code 0", "True True"),
}


def _inactive_env() -> dict[str, str]:
    """The environment of `.venv/bin/python example.py` typed in a shell where
    the venv is not active: its `kigi-stream` is not on PATH."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    kept = [entry for entry in path if entry and Path(entry).resolve() != Path(_SCRIPTS).resolve()]
    return {**os.environ, "PATH": os.pathsep.join(kept)}


def _run_block(body: str) -> str:
    """Run a README Python block as the reader would run it, venv active or
    not: in this process (as ``python example.py``'s ``__main__``), with the
    inactive venv's PATH; what it printed."""
    saved_path = os.environ.get("PATH")
    out, saved_stdout = io.StringIO(), sys.stdout
    os.environ["PATH"] = _inactive_env()["PATH"]
    sys.stdout = out
    try:
        exec(compile(body, "<README block>", "exec"), {"__name__": "__main__"})
    finally:
        sys.stdout = saved_stdout
        if saved_path is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = saved_path
    return out.getvalue()


def _block_with(marker: str) -> str:
    (block,) = (body for body in _blocks("python") if marker in body)
    return block


def test_every_python_block_has_its_expected_output() -> None:
    """No README Python block goes unrun."""
    for body in _blocks("python"):
        assert sum(marker in body for marker in _EXPECTED_OUTPUT) == 1, body[:200]


def test_readme_function_tool_runs() -> None:
    """The first example runs as written: a function tool of a few lines shows
    its schema, streams its lines and a command's, gives the model the output
    then the value, and refuses a mistyped argument by name."""
    out = _run_block(_block_with('await out.run("echo lift-off")'))
    for part in _EXPECTED_OUTPUT['await out.run("echo lift-off")']:
        assert part in out, out


def test_quickstart_tool_is_served_as_written(tmp_path: Path) -> None:
    """The quickstart's tool, saved as it says and served with the command it
    gives, streams its line and the command's, and returns the exit code."""
    (tmp_path / "quick_tools.py").write_text(_block_with("async def shout("), encoding="utf-8")
    script = (
        "import asyncio, sys\n"
        "from kigi_tool_runtime import CallProgress, Client\n"
        "async def main():\n"
        "    serve = [sys.executable, '-m', 'kigi_tool_runtime', 'serve',\n"
        "             '--tools', 'quick_tools.py:shout']\n"
        "    async with await Client.spawn(serve) as client:\n"
        "        call = client.call('shout', {'words': ['hi', 'there']}, keep_text=True)\n"
        "        async for item in call:\n"
        "            if not isinstance(item, CallProgress):\n"
        "                print(item.output.value)\n"
        "        print(call.reassembler.stream(call.tool_call_id, 'output_chunk').text, end='')\n"
        "asyncio.run(asyncio.wait_for(main(), 60))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n" + _EXPECTED_OUTPUT["async def shout("][0], done.stdout


def test_plain_function_tool_runs() -> None:
    """The writing-tools page's plain ``def`` tool runs as written: its lines
    stream, then the model reads the output and the returned text."""
    out = _run_block(_block_with("def count_plain("))
    assert out == _EXPECTED_OUTPUT["def count_plain("][0], out


def test_readme_walkthrough_runs() -> None:
    """Define → Stream → Reassemble runs as written, prints the frames as
    readable JSON lines, reassembles the text whole and shows the rejected frame."""
    out = _run_block(_block_with("# 1. Define:"))
    for line in _EXPECTED_OUTPUT["# 1. Define:"]:
        assert line in out
    frames = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    deltas = [frame["params"]["body"]["delta"] for frame in frames]
    assert deltas == ["caf", "é ", "✓ done", "\n"]
    assert "b'" not in out


def test_readme_client_example_runs() -> None:
    """The Client example runs as written against `kigi-stream serve`: it lists
    the tools, prints the call's text and result, and a timed-out call's error."""
    out = _run_block(_block_with("Client.spawn("))
    for part in _EXPECTED_OUTPUT["Client.spawn("]:
        assert part in out, out


def test_readme_fuzzing_section_runs() -> None:
    """The fuzzing section runs as written: the kit passes the example tool and
    the shell tool."""
    out = _run_block(_block_with("fuzz_streaming_tool("))
    for line in _EXPECTED_OUTPUT["fuzz_streaming_tool("]:
        assert line in out


def _session_messages(lines: list[str]) -> dict[Any, Any]:
    """A serve session's messages keyed by what identifies them, with what may
    vary (timing, how output met the ticks) taken out."""
    keyed: dict[Any, Any] = {}
    text: dict[str, str] = {}
    for line in lines:
        message = json.loads(line)
        if message.get("method") == "tool_call_progress":
            params = message["params"]
            call = params["tool_call_id"]
            text[call] = text.get(call, "") + params["body"]["delta"]
            continue
        value = message.get("result", {}).get("output", {}).get("value")
        if isinstance(value, dict):
            value.pop("duration_ms")
        keyed[("id", message["id"])] = message
    keyed["text"] = text
    return keyed


def test_readme_serve_session_runs_as_shown() -> None:
    """The serve section's session, run as written, prints what the README shows
    (timing aside): the call's progress and result, the cancel's answer and the
    cancelled call's error."""
    (session,) = (c for c in _blocks("sh") if "| kigi-stream serve\n" in c)
    (shown,) = (t for t in _blocks("text") if '"kind":"bash_output_chunk"' in t)
    done = subprocess.run(
        ["bash", "-c", session],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = done.stdout.splitlines()
    seqs = [json.loads(line)["seq"] for line in got if '"seq"' in line]
    assert seqs == list(range(len(seqs)))
    assert _session_messages(got) == _session_messages(shown.splitlines())


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
    # The summary the README shows is the one printed, frames and time aside;
    # the frames are at least the count it shows.
    shown = re.search(r"`(kigi-stream: 341 bytes, .*? s)`", all_text())
    assert shown is not None
    shape = r"(\d+) frames, (.*), \d+\.\d\d s"
    printed = re.fullmatch(r"kigi-stream: 341 bytes, " + shape, summary.strip())
    promised = re.fullmatch(r"kigi-stream: 341 bytes, " + shape, shown[1])
    assert printed is not None, summary
    assert promised is not None, shown[1]
    assert printed[2] == promised[2]
    assert int(printed[1]) >= int(promised[1]) == -(-341 // 64)


def test_readme_cli_example_reports_the_loss(tmp_path: Path) -> None:
    """The CLI section's ``run --json`` into ``check`` example, run as written:
    a 4 KiB tail overflows, and ``check`` reports the gaps it finds as loss
    while the log itself stays valid."""
    (example,) = (c for c in _blocks("sh") if "kigi-stream check frames.jsonl" in c)
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
    assert "1 stream," in checked.stdout
    assert re.search(r"[1-9]\d* gaps? \(", checked.stdout), checked.stdout


def test_readme_pipe_into_check_runs() -> None:
    """The README's `run --json ... | kigi-stream check -` runs as written and
    passes, reading the frames from standard input."""
    (pipeline,) = (c for c in _blocks("sh") if "| kigi-stream check -" in c)
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run-1/bash_output_chunk: 8 bytes in " in done.stdout
    assert done.stdout.endswith("1 stream, 0 other messages: ok\n")


def test_readme_mcp_host_section_runs() -> None:
    """The MCP host example runs as written (it needs the mcp extra, which the
    test extra installs): the folded text arrives whole and nothing is lost."""
    out = _run_block(_block_with("ProgressFolder(on_appended"))
    for line in _EXPECTED_OUTPUT["ProgressFolder(on_appended"]:
        assert line in out, out


def test_readme_mcp_partial_results_section_runs() -> None:
    """The SEP-2998 example runs as written: the official client in 2026-07-28
    mode folds the partial results whole and sees the final one."""
    out = _run_block(_block_with("declaring_partial_results(stdio_client"))
    for line in _EXPECTED_OUTPUT["declaring_partial_results(stdio_client"]:
        assert line in out, out
