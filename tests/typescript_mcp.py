"""The official TypeScript MCP client, installed with npm into a temporary
directory and driven by Node through ``tests/mcp_ts/driver.mjs``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

#: The TypeScript SDK release the tests drive: the one whose client drops a
#: notification read together with its call's response (typescript-sdk #2580).
TS_SDK = "@modelcontextprotocol/sdk@1.32.2"

DRIVER = Path(__file__).resolve().parent / "mcp_ts" / "driver.mjs"


def install_ts_sdk(directory: Path) -> Path:
    """Install :data:`TS_SDK` into ``directory`` with the driver beside it;
    return the driver's path there (Node resolves the SDK from it)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("Node.js 20 and npm are needed to drive the TypeScript MCP client")
    (directory / "package.json").write_text('{"name": "kigi-ts-driver", "private": true}\n')
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", TS_SDK],
        cwd=directory,
        check=True,
        capture_output=True,
        timeout=300,
    )
    driver = directory / DRIVER.name
    shutil.copyfile(DRIVER, driver)
    return driver


def run_driver(
    driver: Path, calls: list[dict[str, Any]], server: list[str], *, timeout: float = 90
) -> list[dict[str, Any]]:
    """Run the driver's ``calls`` against the stdio ``server`` command; one
    record per call (see the driver)."""
    plan = json.dumps({"tool": "bash", "calls": calls})
    node = shutil.which("node") or "node"
    done = subprocess.run(
        [node, str(driver), plan, "--", *server],
        cwd=driver.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the TypeScript driver failed ({done.returncode}): {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
