"""What every host's split-character call of the function tools
(tests/function_tools.py, ``split-N``) must give, checked on a caller's
``call`` object: the stdio client's and the NATS client's read the same way."""

from __future__ import annotations

from typing import Any

from function_tools import SPLIT_PARTS, SPLIT_TEXT

from kigi_tool_protocol import ToolCallResult
from kigi_tool_runtime import CallProgress
from kigi_tool_runtime.testing import check_stream

#: The caps the function tools are made for (``split-0`` to ``split-4``).
CAPS = range(5)
#: The arguments of a split call, and the bytes its child writes.
SPLIT_ARGUMENTS = {"parts": SPLIT_PARTS}
SOURCE = SPLIT_TEXT.encode()


async def check_split_call(call: Any, cap: int) -> None:
    """Read ``call`` of ``split-{cap}`` to its end: one result, the command's
    exit code 0; the frames capped at ``cap`` and lossless over the source; the
    reassembled text exact."""
    frames, results = [], []
    async for item in call:
        if isinstance(item, CallProgress):
            frames.append(item.frame)
        elif isinstance(item, ToolCallResult):
            results.append(item)
    (result,) = results
    value: Any = result.output.value
    assert value["exit_code"] == 0
    check_stream(frames, SOURCE, cap=cap, lossless=True)
    state = call.reassembler.stream(call.tool_call_id, "output_chunk")
    assert state is not None
    assert state.text == SPLIT_TEXT
