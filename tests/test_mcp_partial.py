"""SEP-2998 partial results (draft): the wire shapes (``mcp._partial``), and
the official Python client in 2026-07-28 mode, over a real
``kigi-stream serve --mcp`` / ``--mcp-http``, getting them only when it
declares them and folding them exactly (``ProgressFolder.absorb_partial``).
The lines a server writes for calls that declare them or not are checked in
process in test_mcp_lines.py."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_http_server import mcp_http_server
from split_writer import SPLIT, SPLIT_TEXT

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame
from kigi_tool_runtime import Reassembler
from kigi_tool_runtime.mcp import ProgressFolder, declaring_partial_results
from kigi_tool_runtime.mcp._mapping import META_STREAM, notification_from_progress, progress_params
from kigi_tool_runtime.mcp._partial import (
    PartialNote,
    final_params,
    notification_from_partial,
    partial_params,
    partial_result_token,
)
from kigi_tool_runtime.mcp._partial_host import partial_results_extension

PY = sys.executable
SERVE = [PY, "-m", "kigi_tool_runtime", "serve"]
CAPS = "io.modelcontextprotocol/clientCapabilities"
COMMAND = shlex.join([PY, "-c", SPLIT])


# -- the wire shapes ---------------------------------------------------------------


def test_only_a_call_declaring_the_capability_with_a_token_gets_partial_results() -> None:
    """Rule 1: capability and token both, else none; a declared bad token is refused."""
    declared = {CAPS: {"partialResults": {}}, "partialResultToken": "t"}
    assert partial_result_token(declared) == "t"
    assert partial_result_token({**declared, "partialResultToken": 7}) == 7
    assert partial_result_token({"partialResultToken": "t"}) is None
    assert partial_result_token({CAPS: {"partialResults": {}}}) is None
    assert partial_result_token({CAPS: {"partialResults": True}, "partialResultToken": "t"}) is None
    assert partial_result_token({CAPS: {}, "partialResultToken": "t"}) is None
    assert partial_result_token(None) is None
    for bad in (True, None, 1.5, ["t"]):
        with pytest.raises(ValueError, match="partialResultToken"):
            partial_result_token({**declared, "partialResultToken": bad})


def _frame(delta: str, total: int, **flags: Any) -> ToolCallProgressFrame[PartialResultPayload]:
    return ToolCallProgressFrame(
        tool_call_id="c1",
        kind="bash_output_chunk",
        body=PartialResultPayload(delta=delta, total_bytes=total, **flags),
    )


def test_a_partial_result_is_seq_content_and_the_exact_frame() -> None:
    """Rules 2-3: the draft's fields exactly; the final one has no frame."""
    frame = _frame("café", 5)
    params = partial_params("t", 0, frame, "café")
    assert params == {
        "partialResultToken": "t",
        "seq": 0,
        "content": [{"type": "text", "text": "café"}],
        "_meta": {
            "dev.kigi/frame": msgspec.to_builtins(frame),
            "dev.kigi/seq": 0,
        },
    }
    assert final_params("t", 1, "") == {
        "partialResultToken": "t",
        "seq": 1,
        "content": [],
        "final": True,
    }
    closing = final_params("t", 2, "\n[... output truncated at the limit ...]\n")
    assert closing["content"] == [
        {"type": "text", "text": "\n[... output truncated at the limit ...]\n"}
    ]
    with pytest.raises(ValueError, match="seq"):
        partial_params("t", -1, frame, "")
    with pytest.raises(ValueError, match="seq"):
        final_params("t", -1, "")


@given(
    st.lists(
        st.tuples(st.text(max_size=8), st.integers(0, 5), st.booleans()), min_size=1, max_size=8
    )
)
def test_a_partial_result_folds_exactly_as_its_progress_twin(
    parts: list[tuple[str, int, bool]],
) -> None:
    """Rule 5: the same frames through both channels give the same fold: the
    same text, the same gaps, the same report."""
    via_progress, via_partial = Reassembler(), Reassembler()
    total = 0
    for seq, (delta, skipped, gap) in enumerate(parts):
        total += len(delta.encode()) + skipped
        frame = _frame(delta, total, gap=gap)
        twin = notification_from_progress(progress_params("t", seq, frame))
        partial = notification_from_partial(partial_params("t", seq, frame, delta))
        assert not isinstance(twin, tuple)
        assert not isinstance(partial, PartialNote)
        assert partial == twin
        via_progress.appended(twin)
        via_partial.appended(partial)
    ((_, mine),) = via_partial.streams.items()
    ((_, theirs),) = via_progress.streams.items()
    assert mine.text == theirs.text
    assert mine.report(ended=True) == theirs.report(ended=True)


def test_a_partial_result_without_a_frame_is_a_note() -> None:
    assert notification_from_partial(final_params("t", 3, "x")) == PartialNote("t", 3, "x", True)
    other = {"partialResultToken": 5, "seq": 0, "content": [{"type": "text", "text": "a"}]}
    assert notification_from_partial(other) == PartialNote(5, 0, "a", False)
    assert notification_from_partial({"content": "junk", "seq": -1}) == PartialNote(
        None, None, "", False
    )


# The wire of a call declaring partial results, and of calls that do not, is
# checked in process in test_mcp_lines.py; end to end below.


# -- the official Python client, 2026-07-28 ------------------------------------------


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """A ``kigi-stream serve --mcp-http 127.0.0.1:0`` child and its endpoint."""
    with mcp_http_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> Any:
    """A fresh client transport factory for the 2026-07-28 client."""
    if request.param == "stdio":
        params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--mcp"])
        return lambda: stdio_client(params)
    url = request.getfixturevalue("http_url")
    return lambda: streamable_http_client(url)


@pytest.fixture
def http_transport(http_url: str) -> Any:
    """A fresh client transport factory for the 2026-07-28 client, over the
    module's HTTP server."""
    return lambda: streamable_http_client(http_url)


def test_the_2026_client_folds_partial_results_exactly(transport: Any) -> None:
    """Declared per call through the client's transport, received through its
    extension mechanism: the folded text is exact and complete, no progress
    arrives, and the final partial result closes the stream."""
    folder = ProgressFolder()
    progress: list[Any] = []
    seqs: list[int] = []

    def on_partial(params: Mapping[str, Any]) -> None:
        seqs.append(params["seq"])
        folder.absorb_partial(params)

    async def on_message(message: Any) -> None:
        progress.append(message)

    async def body() -> None:
        async with (
            asyncio.timeout(30),
            Client(
                declaring_partial_results(transport()),
                mode="2026-07-28",
                extensions=[partial_results_extension(on_partial)],
                message_handler=on_message,
            ) as client,
        ):
            assert client.protocol_version == "2026-07-28"
            folded = await folder.call_tool(
                client, "bash", {"command": COMMAND}, partial_results=True
            )
            assert folded.text == SPLIT_TEXT
            assert folded.complete
            assert folded.missing == 0
            async with asyncio.timeout(5):
                while not folder.partial_notes:
                    await asyncio.sleep(0.01)

    asyncio.run(body())
    assert seqs == list(range(len(seqs)))
    assert [note.final for note in folder.partial_notes] == [True]
    assert not [m for m in progress if type(m).__name__ == "ProgressNotification"]


def test_the_folders_own_extension_folds_them_too(http_transport: Any) -> None:
    """Over the shared HTTP server (the stdio child is proven by
    test_the_2026_client_folds_partial_results_exactly[stdio])."""
    transport = http_transport
    folder = ProgressFolder()

    async def body() -> None:
        async with (
            asyncio.timeout(30),
            Client(
                declaring_partial_results(transport()),
                mode="2026-07-28",
                extensions=[folder.extension()],
            ) as client,
        ):
            folded = await folder.call_tool(
                client, "bash", {"command": "printf 'one\\n'"}, partial_results=True
            )
            assert folded.text == "one\n"
            assert folded.complete

    asyncio.run(body())


def test_a_2026_client_that_does_not_declare_gets_none(http_transport: Any) -> None:
    """The same client without the declaring transport: its partialResultToken
    alone asks for nothing, so nothing streams (over the shared HTTP server;
    the same call as raw lines: test_mcp_lines's
    test_a_call_that_does_not_declare_gets_no_partial_results)."""
    transport = http_transport
    seen: list[Any] = []

    async def body() -> None:
        async with (
            asyncio.timeout(30),
            Client(
                transport(),
                mode="2026-07-28",
                extensions=[partial_results_extension(seen.append)],
            ) as client,
        ):
            result = await client.call_tool(
                "bash", {"command": "printf x"}, meta={"partialResultToken": "t"}
            )
            assert result.meta is not None
            assert result.meta[META_STREAM]["frames_sent"] == 0

    asyncio.run(body())
    assert seen == []
