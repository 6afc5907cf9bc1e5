"""Follower: a live tail of an append-only frame log, resumable from an offset,
with bounded memory for over-long lines."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import StreamingSpec
from kigi_tool_runtime import DeltaStreamer, Follower, Reassembler, TailBuffer
from kigi_tool_runtime._consumer._reassembler import DEFAULT_MAX_RECORD_BYTES
from kigi_tool_runtime._transport._file_follow import READ_BLOCK_BYTES, read_from
from kigi_tool_runtime._wire._split import OversizedLine
from kigi_tool_runtime.testing import damaged_frame_logs, frame_logs
from kigi_tool_runtime.testing._consumer_strategies import progress_line

KIND = "bash_output_chunk"


def frame(delta: str, total: int, seq: int | None = None) -> bytes:
    return progress_line("c1", KIND, {"delta": delta, "total_bytes": total}, seq)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


@given(
    st.one_of(
        frame_logs().map(lambda log: list(log.lines)),
        damaged_frame_logs().map(lambda damaged: damaged[0]),
    ),
    st.data(),
)
def test_follower_fed_in_pieces_equals_the_whole_file_fold(
    lines: list[bytes], data: st.DataObject
) -> None:
    """Appending the log to a real file in arbitrary pieces (cut mid-line and
    mid-character) and polling after each gives the fold of the whole file; so
    does a second follower that reconnects from a saved offset."""
    blob = b"".join(one + b"\n" for one in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=12)))
    reconnect_after = data.draw(st.integers(0, len(cuts) + 1))
    whole = Reassembler.fold([one for one in lines if one])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frames.jsonl"
        follower = Follower(path)
        saved: tuple[int, Reassembler] | None = None
        start = 0
        for number, end in enumerate([*cuts, len(blob)]):
            append(path, blob[start:end])
            start = end
            follower.poll()
            if number == reconnect_after:
                # A viewer that disconnects keeps its offset and its fold.
                saved = (follower.offset, Reassembler.fold([]).absorb(follower.reassembler))
        assert follower.offset == len(blob)
        assert follower.reassembler == whole
        if saved is not None:
            offset, before = saved
            resumed = Follower(path, offset)
            resumed.poll()
            assert before.absorb(resumed.reassembler) == whole


def test_partial_last_line_is_left_for_the_next_read(tmp_path: Path) -> None:
    """A line the writer is still writing is not returned, and the offset stays
    at its start until its newline lands."""
    path = tmp_path / "log"
    first, second = frame("ab", 2), frame("cd", 4)
    path.write_bytes(first + b"\n" + second[:10])
    lines, offset = read_from(path)
    assert (lines, offset) == ([first], len(first) + 1)
    again, same = read_from(path, offset)
    assert (again, same) == ([], offset)
    append(path, second[10:] + b"\n")
    rest, end = read_from(path, offset)
    assert (rest, end) == ([second], path.stat().st_size)


def test_absent_file_has_no_lines_yet(tmp_path: Path) -> None:
    """A log the tool has not created yet reads as nothing, at the same offset."""
    assert read_from(tmp_path / "missing", 0) == ([], 0)
    follower = Follower(tmp_path / "missing")
    assert follower.poll().records == 0


def test_a_shrunk_log_is_refused(tmp_path: Path) -> None:
    """An append-only log shorter than the saved offset was replaced: an error."""
    path = tmp_path / "log"
    path.write_bytes(b"x\n")
    with pytest.raises(ValueError, match="shorter than the saved offset 10"):
        read_from(path, 10)


def test_a_log_replaced_by_a_longer_one_is_refused(tmp_path: Path) -> None:
    """A log rotated under its path is reported even when the new file is already
    past the offset (reading on would start mid-line in another file); a log
    that is only appended to, or that appears after a poll, is read."""
    path = tmp_path / "log"
    follower = Follower(path)
    assert follower.poll().records == 0  # absent yet: nothing to compare with
    path.write_bytes(frame("a", 1, 0) + b"\n")
    assert follower.poll().records == 1
    append(path, frame("b", 2, 1) + b"\n")
    assert [item.text for item in follower.poll_appended()] == ["b"]
    rotated = tmp_path / "new"
    rotated.write_bytes(b"".join(frame(c, 1, 0) + b"\n" for c in "xyz"))
    rotated.replace(path)
    for read in (follower.poll, follower.poll_appended):
        with pytest.raises(ValueError, match="it was replaced or rotated"):
            read()
    assert follower.reassembler.stream("c1", KIND) is not None
    assert follower.reassembler.records == 2


def test_a_log_truncated_in_place_and_grown_past_the_offset_is_refused(
    tmp_path: Path,
) -> None:
    """copytruncate rotation keeps the file (same device and inode): a log
    truncated and rewritten past the saved offset before the next poll is
    told by the bytes before the offset, and refused instead of read from
    mid-line; a follower resumed at an offset checks from its first read on."""
    path = tmp_path / "log"
    path.write_bytes(frame("a", 1, 0) + b"\n" + frame("b", 2, 1) + b"\n")
    follower = Follower(path)
    assert follower.poll().records == 2
    resumed = Follower(path, follower.offset)
    assert resumed.poll().records == 0
    append(path, frame("c", 3, 2) + b"\n")
    assert [item.text for item in follower.iter_appended()] == ["c"]
    with open(path, "r+b") as handle:  # truncate in place, as copytruncate does
        handle.truncate(0)
        handle.write(b"".join(frame(c * 3, 3, 0) + b"\n" for c in "xyzw"))
    assert path.stat().st_size > follower.offset
    for reader in (follower, resumed):
        for read in (reader.poll, reader.poll_appended):
            with pytest.raises(ValueError, match="truncated and rewritten"):
                read()
    assert follower.reassembler.records == 3


def test_follow_from_an_offset_reports_no_missing_prefix(tmp_path: Path) -> None:
    """A follower resumed at an offset with a fresh reassembler did not see the
    start: the frames before the offset are not reported as a lost prefix; one
    started at 0 reports a log whose first frames are missing."""
    path = tmp_path / "log"
    first = frame("abc", 3, 0) + b"\n"
    path.write_bytes(first + frame("def", 6, 1) + b"\n" + frame("g", 7, 2) + b"\n")
    resumed = Follower(path, len(first))
    resumed.poll()
    assert resumed.reassembler.anomalies == ()
    assert resumed.reassembler.stream("c1", KIND).report().complete  # type: ignore[union-attr]
    path.write_bytes(frame("def", 6, 1) + b"\n" + frame("g", 7, 2) + b"\n")
    started = Follower(path)
    started.poll()
    assert [a.kind for a in started.reassembler.anomalies] == ["seq_gap"]
    report = started.reassembler.stream("c1", KIND).report()  # type: ignore[union-attr]
    assert (report.lost_bytes, report.complete) == (3, False)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    """Negative offsets, empty limits and non-positive intervals are caller errors."""
    with pytest.raises(ValueError, match="offset must not be negative, got -1"):
        read_from(tmp_path / "x", -1)
    with pytest.raises(ValueError, match="max_line_bytes must be at least 1, got 0"):
        read_from(tmp_path / "x", 0, max_line_bytes=0)
    with pytest.raises(ValueError, match="offset must not be negative"):
        Follower(tmp_path / "x", -5)
    with pytest.raises(ValueError, match="max_line_bytes must be at least 1"):
        Follower(tmp_path / "x", max_line_bytes=0)
    with pytest.raises(ValueError, match="seq_scope must be 'call' or 'connection', got 'hub'"):
        Follower(tmp_path / "x", seq_scope="hub")  # type: ignore[arg-type]

    async def first() -> None:
        async for _ in Follower(tmp_path / "x").follow(0):
            pass

    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        asyncio.run(first())


def test_empty_lines_are_skipped(tmp_path: Path) -> None:
    """Blank lines between frames are not records."""
    path = tmp_path / "log"
    path.write_bytes(b"\n\n" + frame("a", 1) + b"\n\n")
    lines, offset = read_from(path)
    assert lines == [frame("a", 1)]
    assert offset == path.stat().st_size


def test_empty_lines_are_kept_on_request(tmp_path: Path) -> None:
    """keep_empty returns blank lines as b"" (so lines can be numbered), with
    the same offset as skipping them."""
    path = tmp_path / "log"
    path.write_bytes(b"\n\n" + frame("a", 1) + b"\n\n" + frame("b", 2))
    lines, offset = read_from(path, keep_empty=True)
    assert lines == [b"", b"", frame("a", 1), b""]
    assert offset == read_from(path)[1] == path.stat().st_size - len(frame("b", 2))


def test_a_20_mib_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    """A 20 MiB line comes back as an OversizedLine with its size, once it ends;
    while it is incomplete nothing is returned and the offset waits at it."""
    path = tmp_path / "log"
    size = 20 * 1024 * 1024
    head = frame("a", 1) + b"\n"
    with open(path, "wb") as handle:
        handle.write(head)
        handle.write(b"x" * size)
    lines, offset = read_from(path)
    assert (lines, offset) == ([frame("a", 1)], len(head))
    append(path, b"\n" + frame("b", 2) + b"\n")
    lines, offset = read_from(path, offset)
    assert lines == [OversizedLine(size, DEFAULT_MAX_RECORD_BYTES, b"x" * 1024), frame("b", 2)]
    assert offset == path.stat().st_size
    folded = Reassembler.fold([frame("a", 1), *lines])
    assert [a.kind for a in folded.anomalies] == ["undecodable"]
    assert f"line of {size} bytes exceeds the frame limit" in folded.anomalies[0].detail
    state = folded.stream("c1", KIND)
    assert state is not None
    assert state.text == "ab"


def test_line_limit_is_hit_exactly(tmp_path: Path) -> None:
    """A line of exactly the limit is returned; one byte more is skipped."""
    path = tmp_path / "log"
    path.write_bytes(b"a" * 10 + b"\n" + b"b" * 11 + b"\n")
    lines, _ = read_from(path, max_line_bytes=10)
    assert lines == [b"a" * 10, OversizedLine(11, 10, b"b" * 10)]


def test_lines_longer_than_a_read_block_come_back_whole(tmp_path: Path) -> None:
    """A frame spanning several reads is reassembled into one line."""
    long = frame("y" * (3 * READ_BLOCK_BYTES), 3 * READ_BLOCK_BYTES)
    path = tmp_path / "log"
    path.write_bytes(frame("a", 1) + b"\n" + long + b"\n")
    lines, _ = read_from(path)
    assert lines == [frame("a", 1), long]


def test_follower_counts_seq_per_call_unless_told_the_connection(tmp_path: Path) -> None:
    """Two calls numbered each from 0, interleaved, follow cleanly by default;
    a follower told the log is a hub's reads the same seqs as repeats; a given
    reassembler keeps its own scope."""
    path = tmp_path / "frames.jsonl"
    path.write_bytes(
        b"".join(
            progress_line(call, KIND, {"delta": call, "total_bytes": total}, seq) + b"\n"
            for seq, total in ((0, 1), (1, 2))
            for call in ("x", "y")
        )
    )
    server = Follower(path)
    server.poll()
    assert server.reassembler.seq_scope == "call"
    assert server.reassembler.anomalies == ()
    assert [state.text for state in server.reassembler.streams.values()] == ["xx", "yy"]
    hub = Follower(path, seq_scope="connection")
    hub.poll()
    assert [(a.kind, a.index) for a in hub.reassembler.anomalies] == [
        ("seq_repeated", 1),
        ("seq_repeated", 3),
    ]
    given = Follower(path, reassembler=Reassembler(seq_scope="connection"))
    given.poll()
    assert given.reassembler == hub.reassembler


def test_poll_appended_answers_per_record(tmp_path: Path) -> None:
    """Line mode: each record's append comes back in order, gap first."""
    path = tmp_path / "log"
    gap = progress_line("c1", KIND, {"delta": "z", "total_bytes": 10, "gap": True})
    path.write_bytes(frame("ab", 2) + b"\n" + gap + b"\n")
    follower = Follower(path)
    printed = "".join(added.render("<{lost}>") for added in follower.poll_appended())
    assert printed == "ab<1-7>z"  # the gap run may go on: at least 1 byte
    assert follower.poll_appended() == []


def test_records_are_numbered_as_an_editor_numbers_lines(tmp_path: Path) -> None:
    """poll_numbered gives each record its line number counted from where
    reading began, blank lines included; lines_read says how many complete
    lines were read, so the next record's number is lines_read + 1, also after
    a partial last line is completed."""
    path = tmp_path / "log"
    path.write_bytes(frame("ab", 2) + b"\n\n" + frame("cd", 4) + b"\n" + frame("e", 5)[:7])
    follower = Follower(path)
    assert follower.lines_read == 0
    numbered = follower.poll_numbered()
    assert [(number, added.text) for number, added in numbered] == [(1, "ab"), (3, "cd")]
    assert follower.lines_read == 3
    with path.open("ab") as log:
        log.write(frame("e", 5)[7:] + b"\n")
    assert [(n, added.text) for n, added in follower.poll_numbered()] == [(4, "e")]
    assert follower.lines_read == 4
    assert follower.poll_numbered() == []


def test_follow_yields_new_records_as_a_writer_appends(tmp_path: Path) -> None:
    """The async follower picks up what a real writer process appends."""
    path = tmp_path / "log"
    path.write_bytes(frame("a", 1, seq=0) + b"\n")
    writer = (
        "import sys, time\n"
        "time.sleep(0.05)\n"
        "with open(sys.argv[1], 'ab') as f:\n"
        f"    f.write({frame('b', 2, seq=1)!r} + b'\\n')\n"
    )

    async def run() -> Reassembler:
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", writer, str(path))
        follower = Follower(path)
        seen = 0
        async for fresh in follower.follow(0.01):
            seen += fresh.records
            if seen == 2:
                break
        await child.wait()
        return follower.reassembler

    folded = asyncio.run(run())
    state = folded.stream("c1", KIND)
    assert state is not None
    assert state.text == "ab"
    assert folded.anomalies == ()


@pytest.mark.slow
def test_a_100_mb_stream_through_a_log_arrives_whole(tmp_path: Path) -> None:
    """100 MB of tool output, streamed by the real core at the default cap,
    written to a log in pieces as a server would and followed as it grows,
    reassembles byte for byte with no loss reported."""
    spec = StreamingSpec(subkind=KIND)
    buffer = TailBuffer(256 * 1024)
    streamer = DeltaStreamer(spec)
    # Latin-1 text keeps the reassembled str at one byte per character.
    piece = ("0123456789abcdef" * 4096 + "é\n").encode()
    repeats = (100 * 1024 * 1024) // len(piece) + 1
    path = tmp_path / "frames.jsonl"
    follower = Follower(path)
    seq = 0
    with open(path, "ab") as log:
        for number in range(repeats):
            buffer.write(piece)
            frames = streamer.drain_buffer(buffer)
            if number == repeats - 1:
                frames += streamer.finish_buffer(buffer)
            for progress in frames:
                log.write(progress_line("c1", KIND, progress.payload, seq) + b"\n")
                seq += 1
            if number % 128 == 0:
                log.flush()
                follower.poll()
    follower.poll()
    state = follower.reassembler.stream("c1", KIND)
    assert state is not None
    report = state.report()
    assert report.complete
    assert report.total_bytes == len(piece) * repeats
    assert report.text_bytes == report.total_bytes
    text = state.text
    assert text is not None
    assert len(text) == len(piece.decode()) * repeats
    assert text[: len(piece.decode())] == piece.decode()
    assert text.count("é\n") == repeats
    assert text.endswith(piece.decode())


#: A read of a file that never ends, and a follower polling it: each must
#: return (with nothing: its size is 0) instead of reading forever.
ENDLESS_FILE = """
import asyncio
from kigi_tool_runtime import Follower
from kigi_tool_runtime._transport._file_follow import read_from
print(read_from("/dev/zero"))
follower = Follower("/dev/zero")
print(follower.poll().records, follower.offset)

async def follow() -> None:
    async def polls() -> None:
        async for _ in follower.follow(0.01):
            pass
    try:
        await asyncio.wait_for(polls(), 0.3)  # the loop runs, so the timeout fires
    except TimeoutError:
        print("still polling")

asyncio.run(follow())
"""


def test_a_read_ends_at_the_size_the_file_had() -> None:
    """A read stops at the size the file had when it began: a file that never
    ends (/dev/zero, size 0) gives no lines at once, and a follower polling it
    keeps yielding to the event loop."""
    done = subprocess.run(
        [sys.executable, "-c", ENDLESS_FILE], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["([], 0)", "0 0", "still polling"]


def test_lines_of_only_whitespace_are_blank(tmp_path: Path) -> None:
    """A line of JSON whitespace holds no value: skipped like an empty line
    (kept as b"" on request, so line numbers stay right), however long."""
    path = tmp_path / "log"
    path.write_bytes(b" \n\t \r\n" + frame("a", 1) + b"\n" + b" " * 200_000 + b"\n x\n")
    lines, offset = read_from(path)
    assert lines == [frame("a", 1), b" x"]
    assert offset == path.stat().st_size
    kept, _ = read_from(path, keep_empty=True)
    assert kept == [b"", b"", frame("a", 1), b"", b" x"]


def test_watch_yields_each_polls_records_in_numbered_batches(tmp_path: Path) -> None:
    """``watch`` (the loop ``kigi-stream follow`` runs) yields what each poll
    appends, numbered by line, in batches of at most ``batch``; ``once`` stops
    after the first poll, and without it a later poll picks up new lines."""
    log = tmp_path / "log.jsonl"
    append(log, b"".join(frame(c, i + 1, i) + b"\n" for i, c in enumerate("abcde")))
    batches = list(Follower(log).watch(0.01, once=True, batch=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [number for b in batches for number, _ in b] == [1, 2, 3, 4, 5]
    assert "".join(added.text or "" for b in batches for _, added in b) == "abcde"

    follower = Follower(log)
    polls = follower.watch(0.01, batch=100)
    assert len(next(polls)) == 5
    append(log, frame("f", 6, 5) + b"\n")
    (number, added), *rest = next(polls)  # after a sleep, the next poll
    assert (number, added.text, rest) == (6, "f", [])

    with pytest.raises(ValueError, match="interval must be positive"):
        next(Follower(log).watch(0))
    with pytest.raises(ValueError, match="batch must be at least 1"):
        next(Follower(log).watch(1, batch=0))
