"""Tools for the NATS routing test, served by ``kigi-stream serve --nats --tools
routed_tools.py:W1`` (or ``W2``, ``W3``): four tools that each log the call they
run (its id, the tool, the worker's pid) to ``$KIGI_ROUTED_LOG``, then sleep for
``sleep`` seconds and answer with the tool and the pid. The three workers'
tool sets overlap (``beta``, ``gamma``) and differ (``alpha``, ``delta``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import msgspec

from kigi_tool_runtime import Tool, ToolContext


class RoutedArgs(msgspec.Struct):
    sleep: float = 0.0


class _Logged(Tool[RoutedArgs]):
    description = "Log this call, sleep, and say which worker ran it."
    args_type = RoutedArgs

    async def run(self, ctx: ToolContext, args: RoutedArgs) -> Any:
        with open(os.environ["KIGI_ROUTED_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{ctx.call_id} {self.id} {os.getpid()}\n")
        await asyncio.sleep(args.sleep)
        return {"tool": self.id, "pid": os.getpid()}


class Alpha(_Logged):
    id = "alpha"


class Beta(_Logged):
    id = "beta"


class Gamma(_Logged):
    id = "gamma"


class Delta(_Logged):
    id = "delta"


W1 = [Alpha(), Beta()]
W2 = [Beta(), Gamma()]
W3 = [Gamma(), Delta()]
#: Which tools each worker serves.
SERVED = {"W1": {"alpha", "beta"}, "W2": {"beta", "gamma"}, "W3": {"gamma", "delta"}}
