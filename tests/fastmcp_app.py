"""A FastMCP app of a user's: its own tool (``add``), and kigi shell tools
added with :func:`add_kigi_tools`. Run as ``python fastmcp_app.py stdio`` or
``python fastmcp_app.py http PORT`` (streamable HTTP on 127.0.0.1).

Tools: ``bash`` (the shell tool as ``serve --mcp`` serves it),
``bash_small_tail`` (a 4 KiB tail and 1 KiB deltas, so a flood loses bytes), and
``bash_cap0`` .. ``bash_cap4`` (deltas capped at 0-4 bytes, 10 ms ticks), and
the function tools of tests/function_tools.py as they are."""

from __future__ import annotations

import sys
from typing import Any

from fastmcp import FastMCP
from function_tools import TOOLS as FUNCTION_TOOLS

from kigi_tool_runtime import ShellTool, Tool
from kigi_tool_runtime.fastmcp import add_kigi_tools

SMALL_TAIL = 4096


def _shell(tool_id: str, **options: Any) -> Tool[Any]:
    named = type(f"Shell_{tool_id}", (ShellTool,), {"id": tool_id})
    tool: Tool[Any] = named(**options)
    return tool


def app() -> FastMCP[Any]:
    mcp: FastMCP[Any] = FastMCP("a user's app")

    @mcp.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    tools = [
        ShellTool(),
        _shell("bash_small_tail", tail_capacity=SMALL_TAIL, max_delta_bytes=1024),
        *(_shell(f"bash_cap{cap}", max_delta_bytes=cap, tick=0.01) for cap in range(5)),
        *FUNCTION_TOOLS,
    ]
    add_kigi_tools(mcp, tools)
    return mcp


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        app().run(transport="stdio", show_banner=False)
    else:
        app().run(
            transport="http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            show_banner=False,
            log_level="warning",
        )
