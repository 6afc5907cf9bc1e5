"""The sans-IO side of the NATS transport: subjects, messages, and the ledger's
loss accounting across stream sequences (no server)."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

pytest.importorskip("nats", reason="the 'nats' extra is not installed (pip install '.[nats]')")

from hypothesis import given
from hypothesis import strategies as st

from kigi_tool_protocol import (
    DecodeError,
    StreamingSpec,
    ToolCallParams,
    ToolCallProgressFrame,
    ToolCallResult,
    encode_progress_line,
    progress_to_frame,
)
from kigi_tool_protocol._tool_call import ToolOutputText
from kigi_tool_protocol._tool_error import CancelledWire
from kigi_tool_runtime import OutputStream, Reassembler, RemoteToolError
from kigi_tool_runtime._wire._rpc_lines import result_line, wire_error_line
from kigi_tool_runtime.nats import FollowPosition, Subjects
from kigi_tool_runtime.nats._protocol import (
    FRAMES_HEADER,
    TOTALS_HEADER,
    CallLedger,
    Claim,
    calls_layout_problem,
    decide_start,
    decide_unstarted,
    decode_end,
    decode_submit,
    encode_claim,
    encode_submit,
    route,
    unserved_message,
)

CALL = "c1"
KIND = "bash_output_chunk"
SPEC = StreamingSpec(subkind=KIND, max_delta_bytes=7)

# One message of the frames stream: (stream sequence, kind, data, headers).
Message = tuple[int, str, bytes, dict[str, str]]


def make_messages(pieces: list[bytes], others: list[int]) -> tuple[list[Message], bytes]:
    """A call's messages as a worker writes them (claim, progress lines, end with
    its headers), at stream sequences that skip ``others[i]`` sequences (other
    calls' messages) before message i."""
    stream = OutputStream(SPEC, capacity=1 << 20)
    lines: list[bytes] = []
    total = 0
    for piece in pieces:
        stream.write(piece)
        for item in stream.drain():
            frame = progress_to_frame(CALL, item)
            lines.append(encode_progress_line(CALL, frame.kind, frame.body, seq=len(lines)))
            total = frame.body.total_bytes
    for item in stream.finish():
        frame = progress_to_frame(CALL, item)
        lines.append(encode_progress_line(CALL, frame.kind, frame.body, seq=len(lines)))
        total = frame.body.total_bytes
    totals = {KIND: [total, len(lines)]}
    end_headers = {FRAMES_HEADER: str(len(lines)), TOTALS_HEADER: json.dumps(totals)}
    end = result_line(
        CALL, None, ToolCallResult(tool_call_id=CALL, output=ToolOutputText(value="ok"))
    )
    bodies: list[tuple[str, bytes, dict[str, str]]] = [
        ("claim", encode_claim(Claim(worker="w")), {}),
        *(("progress", line, {}) for line in lines),
        ("end", end, end_headers),
    ]
    messages: list[Message] = []
    seq = 0
    for index, (kind, data, headers) in enumerate(bodies):
        seq += 1 + (others[index % len(others)] if others else 0)
        messages.append((seq, kind, data, headers))
    return messages, b"".join(pieces)


def feed(ledger: CallLedger, messages: list[Message]) -> CallLedger:
    for seq, kind, data, headers in messages:
        ledger.feed(seq, kind, data, headers)  # type: ignore[arg-type]
    return ledger


pieces_strategy = st.lists(
    st.text(min_size=1, max_size=12).map(lambda s: s.encode()), min_size=1, max_size=12
)
others_strategy = st.lists(st.integers(0, 3), max_size=5)


@given(pieces_strategy, others_strategy, st.data())
def test_resume_at_any_message_folds_like_one_ledger(
    pieces: list[bytes], others: list[int], data: st.DataObject
) -> None:
    """A ledger resumed at another's position, its fold absorbed into the first's,
    equals one ledger fed every message (whatever other calls' sequences lie
    between), and the text is the source, complete."""
    messages, source = make_messages(pieces, others)
    whole = feed(CallLedger(CALL), messages)
    cut = data.draw(st.integers(0, len(messages)))
    first = feed(CallLedger(CALL), messages[:cut])
    second = feed(
        CallLedger(CALL, position=first.position, reassembler=first.reassembler.spawn()),
        messages[cut:],
    )
    assert first.reassembler.absorb(second.reassembler) == whole.reassembler
    stream = whole.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert stream.text == source.decode()
    assert whole.reassembler.reports()[0].complete
    assert isinstance(whole.outcome, ToolCallResult)
    assert whole.frames_lost == 0


@given(pieces_strategy, others_strategy, st.data())
def test_a_discarded_range_is_a_reported_and_marked_loss(
    pieces: list[bytes], others: list[int], data: st.DataObject
) -> None:
    """Messages the stream discarded while a follower was away (a range of stream
    sequences, at the head or mid-stream) are counted: a gap where they were,
    bounds that hold the bytes really lost, an incomplete report; and the
    loss never goes unreported when a progress frame was among them."""
    messages, source = make_messages(pieces, others)
    at = data.draw(st.integers(0, len(messages) - 1))
    upto = data.draw(st.integers(at + 1, len(messages)))
    ledger = feed(CallLedger(CALL), messages[:at])
    dropped = messages[at:upto]
    first_kept = messages[upto][0] if upto < len(messages) else messages[-1][0] + 1
    ledger.jetstream_starts_at(first_kept)
    feed(ledger, messages[upto:])
    lost_frames = sum(1 for m in dropped if m[1] == "progress")
    lost_bytes = 0
    for _, kind, body, _ in dropped:
        if kind == "progress":
            delta = json.loads(body)["params"]["body"]["delta"]
            lost_bytes += len(delta.encode())
    stream = ledger.reassembler.stream(CALL, KIND)
    if lost_frames == 0:
        assert ledger.frames_lost == 0
        if stream is not None:
            assert ledger.reassembler.reports()[0].complete or stream.text == source.decode()
        return
    assert ledger.frames_lost == lost_frames or upto == len(messages)
    if upto == len(messages):
        # The end itself was discarded: nothing can say what came after.
        return
    assert stream is not None
    report = ledger.reassembler.reports()[0]
    assert not report.complete
    if lost_bytes:
        assert report.gaps
        assert report.lost_bytes_min <= lost_bytes <= report.lost_bytes
        assert "bytes lost" in stream.render()


@given(pieces_strategy, st.data())
def test_a_lost_tail_is_found_from_the_end_headers(
    pieces: list[bytes], data: st.DataObject
) -> None:
    """Progress frames lost just before the end (nothing after them to show a
    hole) are found from the end's frame count and totals, and marked."""
    messages, _ = make_messages(pieces, [])
    progress = [i for i, m in enumerate(messages) if m[1] == "progress"]
    start = data.draw(st.sampled_from(progress))
    kept = messages[:start] + messages[-1:]
    ledger = feed(CallLedger(CALL), kept)
    lost = len(progress) - progress.index(start)
    assert ledger.frames_lost == lost
    total_lost = sum(
        len(json.loads(m[2])["params"]["body"]["delta"].encode()) for m in messages[start:-1]
    )
    report = ledger.reassembler.reports()[0] if ledger.reassembler.reports() else None
    if total_lost:
        assert report is not None
        assert not report.complete
        assert report.lost_bytes_min <= total_lost <= report.lost_bytes


def test_a_repeated_delivery_is_skipped() -> None:
    """A message delivered again (a consumer recreated after a reconnect) is not
    absorbed twice."""
    messages, source = make_messages([b"abc", b"def"], [])
    ledger = feed(CallLedger(CALL), messages[:2] + messages[1:])
    assert ledger.duplicates == 1
    stream = ledger.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert stream.text == source.decode()
    assert ledger.reassembler.reports()[0].complete


def test_a_resume_from_a_discarded_bare_sequence_reports_the_loss() -> None:
    """A resume at a bare stream sequence the stream no longer holds (the first
    sequence is above the one asked for) marks a loss before the first frame."""
    messages, _ = make_messages([b"x" * 20, b"y" * 20], [])
    ledger = CallLedger(CALL, position=FollowPosition(2, None))
    ledger.jetstream_starts_at(messages[3][0])
    assert ledger.discarded == [(2, messages[3][0] - 1)]
    feed(ledger, messages[3:])
    report = ledger.reassembler.reports()[0]
    assert not report.complete
    assert report.gaps


def test_subjects_and_their_checks() -> None:
    """Subject names parse back, and ids that cannot be subject tokens are refused."""
    subjects = Subjects("kigi")
    assert subjects.frame("abc", "progress") == "kigi.frames.abc.progress"
    assert subjects.parse("kigi.frames.abc.end") == ("abc", "end")
    assert subjects.parse("kigi.frames.abc.other") is None
    assert subjects.parse("other.frames.abc.end") is None
    assert subjects.calls_jetstream == "KIGI_CALLS"
    for bad in ("a.b", "a b", "*", ">", ""):
        with pytest.raises(ValueError, match="subject token"):
            subjects.frame(bad, "end")
    with pytest.raises(ValueError, match="subject token"):
        Subjects("a.b")


def test_submit_round_trip_and_rejections() -> None:
    """A submitted call decodes back; a request whose id is not its call id, or
    another method, is refused."""
    params: ToolCallParams[Any] = ToolCallParams(tool_call_id="c9", tool_id="bash", arguments={})
    decoded, session = decode_submit(encode_submit(params, "s1"))
    assert decoded.tool_call_id == "c9"
    assert session == "s1"
    bad_id = (
        b'{"jsonrpc":"2.0","id":"x","method":"tool.call",'
        b'"params":{"tool_call_id":"c9","tool_id":"bash","arguments":{}}}'
    )
    with pytest.raises(DecodeError):
        decode_submit(bad_id)
    with pytest.raises(DecodeError):
        decode_submit(bad_id.replace(b'"x"', b'"c9"').replace(b"tool.call", b"tools.list"))
    with pytest.raises(ValueError, match="subject token"):
        encode_submit(ToolCallParams(tool_call_id="a.b", tool_id="bash", arguments={}))


def test_end_messages_decode_to_outcomes() -> None:
    """An end line decodes to the result or the error; one that is not a response
    is an ``internal_error``, never a success."""
    result = decode_end(
        result_line(
            CALL, None, ToolCallResult(tool_call_id=CALL, output=ToolOutputText(value="ok"))
        )
    )
    assert isinstance(result, ToolCallResult)
    error = decode_end(wire_error_line(CALL, None, "stop", CancelledWire(tool_id="bash")))
    assert isinstance(error, RemoteToolError)
    assert error.kind == "cancelled"
    garbage = decode_end(b"not json")
    assert isinstance(garbage, RemoteToolError)
    assert garbage.kind == "internal_error"


@given(pieces_strategy, st.integers(1, 5))
def test_batched_lines_fold_like_one_line_per_message(pieces: list[bytes], size: int) -> None:
    """A progress message holding several whole lines (a worker's batch) is
    absorbed line by line: the same fold as one line per message."""
    messages, _ = make_messages(pieces, [])
    single = feed(CallLedger(CALL), messages)
    progress = [m for m in messages if m[1] == "progress"]
    batched: list[Message] = [messages[0]]
    for start in range(0, len(progress), size):
        chunk = progress[start : start + size]
        batched.append((chunk[0][0], "progress", b"".join(m[2] for m in chunk), {}))
    batched.append(messages[-1])
    assert feed(CallLedger(CALL), batched).reassembler == single.reassembler


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_deeply_nested_claims_and_heartbeats_are_not_ones() -> None:
    """A claim or heartbeat message nested past any parser's depth (anyone who may
    publish on the subject can send one) is not one; it never raises."""
    from kigi_tool_runtime.nats._protocol import decode_claim, decode_heartbeat

    assert decode_claim(b'{"worker": "w", "x": ' + DEEP + b"}") is None
    assert decode_heartbeat(b'{"worker": "w", "frames": 1, "x": ' + DEEP + b"}") is None


@pytest.mark.parametrize("frames", ["\u00b2", "\u0663", "9" * 5000])
def test_an_end_with_a_malformed_frame_count_is_still_the_end(frames: str) -> None:
    """An end message whose frame-count header is digits Python cannot read as a
    count (superscripts, other scripts' digits, thousands of them) ends the call
    with its outcome; the header is ignored, never raised on."""
    messages, _ = make_messages([b"abc"], [])
    seq, kind, data, headers = messages[-1]
    ledger = feed(CallLedger(CALL), messages[:-1])
    event = ledger.feed(seq, kind, data, {**headers, FRAMES_HEADER: frames})  # type: ignore[arg-type]
    assert isinstance(event.outcome, ToolCallResult)
    assert ledger.frames_lost == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(json_values, st.none() | st.integers(1, 10**9))
def test_a_call_and_its_received_copy_share_their_digest(arguments: Any, deadline: Any) -> None:
    """The caller's digest of a call (arguments as values) equals the worker's
    (arguments as received); another argument changes it."""
    from kigi_tool_runtime.nats._protocol import request_digest

    params = ToolCallParams(
        tool_call_id=CALL, tool_id="bash", arguments=arguments, deadline_ms=deadline
    )
    received, _ = decode_submit(encode_submit(params, "s1"))
    assert request_digest(received) == request_digest(params)
    other = ToolCallParams(
        tool_call_id=CALL, tool_id="bash", arguments=[arguments], deadline_ms=deadline
    )
    assert request_digest(other) != request_digest(params)


def test_a_claim_of_another_call_under_the_id_ends_it() -> None:
    """A ledger told its call's digest ends the call with invalid_params at a claim
    naming another digest, absorbing nothing after it; the same digest, or a
    claim that names none, folds as usual."""
    messages, source = make_messages([b"abc"], [])
    claim_seq = messages[0][0]
    other = (claim_seq, "claim", encode_claim(Claim(worker="w", request="b" * 64)), {})
    ledger = feed(CallLedger(CALL, request="a" * 64), [other, *messages[1:]])
    assert isinstance(ledger.outcome, RemoteToolError)
    assert ledger.outcome.wire.code == "invalid_params"
    assert ledger.reassembler.stream(CALL, KIND) is None
    same = (claim_seq, "claim", encode_claim(Claim(worker="w", request="a" * 64)), {})
    for first in (same, messages[0]):
        ledger = feed(CallLedger(CALL, request="a" * 64), [first, *messages[1:]])
        assert isinstance(ledger.outcome, ToolCallResult)
        stream = ledger.reassembler.stream(CALL, KIND)
        assert stream is not None
        assert stream.text == source.decode()


def test_a_note_on_the_progress_subject_is_progress_and_a_response_is_not() -> None:
    """A text note is progress of the call, numbered by its envelope; a response
    line is none, and the reassembler counts it ignored."""
    ledger = CallLedger(CALL)
    note = encode_progress_line(CALL, "text", {"text": "hi"}, seq=0)
    (item,) = ledger.feed(1, "progress", note).progress
    assert item.frame == ToolCallProgressFrame(tool_call_id=CALL, kind="text", body={"text": "hi"})
    assert (item.seq, item.appended.note) == (0, {"text": "hi"})
    response = {"jsonrpc": "2.0", "id": 1, "result": json.loads(note)["params"]}
    assert ledger.feed(2, "progress", json.dumps(response).encode()).progress == ()
    assert ledger.reassembler.ignored == 1


call_ids = st.text("abcXYZ019_-", min_size=1, max_size=20)


@given(call_ids, json_values, st.sampled_from(["", '"\\ud800"', "[" * 3000 + "]" * 3000]))
def test_the_call_id_of_a_call_message_is_read_even_when_the_rest_is_not(
    call_id: str, arguments: Any, poison: str
) -> None:
    """``call_id_of`` reads the id of any call message a client writes, and of
    one whose arguments hold what no decoder takes (a lone surrogate, 3,000
    levels of nesting) or whose deadline is out of range."""
    from kigi_tool_runtime.nats._protocol import call_id_of

    params = ToolCallParams(tool_call_id=call_id, tool_id="bash", arguments=arguments)
    data = encode_submit(params)
    assert call_id_of(data) == call_id
    spoiled = json.loads(data)
    spoiled["params"]["arguments"] = {"x": arguments, "tool_call_id": "other", "id": "other"}
    spoiled["params"]["deadline_ms"] = -1
    text = json.dumps(spoiled, ensure_ascii=False)
    if poison:
        text = text.replace('"arguments": {', f'"arguments": {{"p": {poison}, ', 1)
    assert call_id_of(text.encode("utf-8", "surrogatepass")) == call_id


def test_a_message_that_names_no_single_call_has_no_call_id() -> None:
    """No id, ids that differ, ids only nested in the arguments, an id that is
    not a subject token, or no object at the top: no call id."""
    from kigi_tool_runtime.nats._protocol import call_id_of

    for data in (
        b"",
        b"[]",
        b'{"id":"a","params":{"tool_call_id":"b"}}',
        b'{"params":{"arguments":{"tool_call_id":"a","id":"a"}}}',
        b'[{"id":"a","params":{"tool_call_id":"a"}}]',
        b'{"id":"a.b","params":{"tool_call_id":"a.b"}}',
        b'{"id":1,"params":{"tool_call_id":"1"}}',
    ):
        assert call_id_of(data) is None, data


def test_an_end_that_is_gone_ends_the_call_with_its_lost_tail() -> None:
    """``end_gone`` ends a call from its done record: the frames not received
    are a gap at the stream's last total, the report is incomplete, and the
    outcome says how the call ended."""
    from kigi_tool_runtime.nats._protocol import Done

    messages, source = make_messages([b"abcdefghij", b"klmnopqrst"], [])
    ledger = feed(CallLedger(CALL), messages[:2])  # the claim and a first frame
    *_, (_, _, _, end_headers) = messages
    total, count = json.loads(end_headers[TOTALS_HEADER])[KIND]
    done = Done(worker="w", frames=count, totals={KIND: (total, count)}, end_seq=9)
    event = ledger.end_gone(done, "it was deleted")
    assert isinstance(event.outcome, RemoteToolError)
    assert event.outcome.wire.code == "internal_error"
    assert "ended with a result (worker 'w'" in event.outcome.message
    [report] = ledger.reassembler.reports()
    assert not report.complete
    stream = ledger.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert report.lost_bytes == len(source) - len((stream.text or "").encode())
    assert ledger.end_gone(done, "again") == type(event)()


@functools.cache
def _wire_doc_digest() -> Any:
    """The request digest as docs/nats-wire.md writes it (its Python block)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "nats-wire.md").read_text("utf-8")
    block = doc[doc.index("```python\n") + len("```python\n") :]
    namespace: dict[str, Any] = {}
    exec(block[: block.index("```")], namespace)  # the doc's own recipe, as a reader runs it
    return namespace["request_digest"]


optional_strings = st.none() | st.text()


@given(
    call_ids,
    st.from_regex(r"[A-Za-z0-9_-]+(:[A-Za-z0-9_-]+)?", fullmatch=True),
    json_values,
    st.none() | st.integers(1, 2**64 - 1),
    optional_strings,
    optional_strings,
    optional_strings,
)
def test_the_documented_digest_recipe_is_the_digest(
    call_id: str,
    tool_id: str,
    arguments: Any,
    deadline: Any,
    behavior: Any,
    cwd: Any,
    trace: Any,
) -> None:
    """docs/nats-wire.md's recipe, fed the arguments' bytes as the submit
    message holds them, gives the digest the worker and the caller compute."""
    from kigi_tool_protocol import json_codec
    from kigi_tool_runtime.nats._protocol import request_digest

    params = ToolCallParams(
        tool_call_id=call_id,
        tool_id=tool_id,
        arguments=arguments,
        deadline_ms=deadline,
        behavior_version=behavior,
        cwd=cwd,
        trace_context=trace,
    )
    try:
        raw = json_codec.encode(arguments)
    except Exception:  # a lone surrogate: no call can carry it
        return
    documented = _wire_doc_digest()(call_id, tool_id, raw, deadline, behavior, cwd, trace)
    assert documented == request_digest(params)
    received, _ = decode_submit(encode_submit(params))
    assert documented == request_digest(received)


def _odd_lines() -> list[bytes]:
    """Progress lines off the common path, and lines that are no frame at all."""
    note = encode_progress_line(CALL, "text", {"text": "a note"}, seq=None, newline=False)
    other = (
        b'{"jsonrpc":"2.0","method":"other","params":{"tool_call_id":"c1","kind":"k","body":{}}}'
    )
    return [note, b"not json", other, b'{"jsonrpc":"2.0","id":3,"result":{}}']


@given(pieces_strategy, st.data())
def test_the_ledger_folds_as_the_reassembler_folds_the_lines(
    pieces: list[bytes], data: st.DataObject
) -> None:
    """Fed decoded frames, the ledger's reassembler folds exactly as one fed the
    same lines would: common frames, notes, and lines that are no frame."""
    messages, _ = make_messages(pieces, [])
    lines = [m[2] for m in messages if m[1] == "progress"]
    for odd in data.draw(st.lists(st.sampled_from(_odd_lines()), max_size=4)):
        lines.insert(data.draw(st.integers(0, len(lines))), odd)
    ledger = CallLedger(CALL)
    for at, line in enumerate(lines):
        ledger.feed(at + 2, "progress", line)
    direct = Reassembler(known_calls=[CALL])
    for line in lines:
        direct.appended(line)
    assert ledger.reassembler == direct


def test_each_progress_line_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A progress line is parsed once on its way into the reassembler (the ledger
    hands it the decoded frame), a note's frame layer once more, never again."""
    import kigi_tool_protocol._progress_line as progress_line_module

    parses: list[str] = []

    def counting(name: str) -> Any:
        real = getattr(progress_line_module, name)

        def parse(*args: Any, **options: Any) -> Any:
            parses.append(name)
            return real(*args, **options)

        return parse

    for name in ("_decode", "_decode_message", "_decode_progress"):
        monkeypatch.setattr(progress_line_module, name, counting(name))
    messages, _ = make_messages([b"abc", b"def", b"ghi"], [])
    progress = [m for m in messages if m[1] == "progress"]
    ledger = feed(CallLedger(CALL), progress)
    assert len(parses) == len(progress)  # one typed pass each
    parses.clear()
    note = encode_progress_line(CALL, "text", {"text": "n"}, seq=len(progress), newline=False)
    ledger.feed(progress[-1][0] + 1, "progress", note)
    # The typed pass that does not fit a note, the message, then its frame layer.
    assert parses == ["_decode_progress", "_decode_message", "_decode"]


# -- losses are recorded, not forged -------------------------------------------------


def _received_frames(messages: list[Message]) -> int:
    return sum(1 for m in messages if m[1] == "progress")


def test_a_lost_tail_is_a_frameless_loss_item_and_no_frame_is_counted_for_it() -> None:
    """Frames lost after the last one received: the end's event carries a
    ``CallLoss`` (no frame, its gap marker to print) before its outcome; the
    reassembler counts only the frames that arrived and reports the loss."""
    from kigi_tool_runtime import CallLoss

    messages, source = make_messages([b"abcdefghij", b"klmnopqrst", b"uvwxyz"], [])
    kept = messages[:3]
    ledger = feed(CallLedger(CALL), kept)
    seq, _, data, headers = messages[-1]
    event = ledger.feed(seq, "end", data, headers)
    [loss] = event.progress
    assert isinstance(loss, CallLoss)
    assert (loss.frame, loss.seq) == (None, None)
    assert loss.appended.gap is not None
    assert "bytes lost ...]" in loss.appended.render()
    assert [a.kind for a in loss.appended.anomalies] == ["dropped_frames"]
    assert "never arrived" in loss.appended.anomalies[0].detail
    stream = ledger.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert stream.frames == _received_frames(kept)
    [report] = ledger.reassembler.reports(ended=True)
    assert not report.complete
    lost = len(source) - len((stream.text or "").encode())
    assert report.lost_bytes_min <= lost <= report.lost_bytes


def test_a_discarded_range_is_a_loss_item_before_the_frame_that_revealed_it() -> None:
    """Frames the stream discarded mid-call: the next frame's event is a
    ``CallLoss`` at that frame's total, then the frame; no frame is counted for
    the loss, and the loss's anomaly names the discarded sequences."""
    from kigi_tool_runtime import CallLoss, CallProgress

    messages, _ = make_messages([b"a" * 20, b"b" * 20, b"c" * 20], [])
    ledger = feed(CallLedger(CALL), messages[:2])
    ledger.jetstream_starts_at(messages[4][0])
    seq, _, data, _ = messages[4]
    loss, item = ledger.feed(seq, "progress", data).progress
    assert isinstance(loss, CallLoss)
    assert isinstance(item, CallProgress)
    assert item.frame is not None
    assert loss.appended.gap is not None
    assert loss.appended.gap.total_bytes == item.frame.body.total_bytes
    [dropped] = loss.appended.anomalies
    assert f"sequences {messages[2][0]}-{messages[3][0]}" in dropped.detail
    stream = ledger.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert stream.frames == 2
    assert ledger.frames_lost == 2


def test_a_call_whose_frames_are_all_gone_starts_its_stream_with_the_loss() -> None:
    """A fresh ledger told the call ended (its done record) when none of its
    frames is left: the stream starts with a gap of every byte, counts no
    frame, and the loss item's marker says how many bytes were lost."""
    from kigi_tool_runtime import CallLoss
    from kigi_tool_runtime.nats._protocol import Done

    ledger = CallLedger(CALL)
    done = Done(worker="w", frames=4, totals={KIND: (3000, 4)})
    event = ledger.end_gone(done, "purged")
    [loss] = event.progress
    assert isinstance(loss, CallLoss)
    assert "3000 bytes lost" in loss.appended.render()
    [report] = ledger.reassembler.reports(ended=True)
    assert (report.frames, report.text_bytes, report.lost_bytes) == (0, 0, 3000)
    assert not report.complete
    assert ledger.frames_lost == 4


def test_a_resume_at_a_discarded_sequence_records_the_loss_before_the_first_frame() -> None:
    """A follower resuming at a bare stream sequence the stream no longer holds:
    the loss is the first record of the stream, before any frame of it."""
    from kigi_tool_runtime import CallLoss

    messages, _ = make_messages([b"x" * 20, b"y" * 20], [])
    ledger = CallLedger(CALL, position=FollowPosition(2, None))
    ledger.jetstream_starts_at(messages[3][0])
    seq, _, data, _ = messages[3]
    first, *_ = ledger.feed(seq, "progress", data).progress
    assert isinstance(first, CallLoss)
    assert "before 2 never arrived" in first.appended.anomalies[0].detail
    stream = ledger.reassembler.stream(CALL, KIND)
    assert stream is not None
    assert stream.frames == 1


def test_a_heartbeat_says_time_run_and_silent_and_old_callers_skip_it() -> None:
    """The heartbeat's figures round-trip; a caller that knows only the worker
    and the frames (an earlier version) decodes it all the same."""
    import msgspec

    from kigi_tool_runtime.nats._protocol import Heartbeat, decode_heartbeat, encode_heartbeat

    class Earlier(msgspec.Struct, frozen=True, kw_only=True):
        worker: str
        frames: int

    data = encode_heartbeat(Heartbeat(worker="w", frames=3, elapsed_s=372.1, silent_s=45.0))
    assert decode_heartbeat(data) == Heartbeat(worker="w", frames=3, elapsed_s=372.1, silent_s=45.0)
    assert msgspec.json.decode(data, type=Earlier) == Earlier(worker="w", frames=3)
    assert decode_heartbeat(b'{"worker": "w", "frames": 1}') == Heartbeat(worker="w", frames=1)


# -- routing by tool (Rules 8, 9) ----------------------------------------------------------

_TOOL_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,20}(:[A-Za-z0-9_-]{1,20})?", fullmatch=True)


@given(_TOOL_IDS)
def test_a_tool_has_its_own_queue_consumer_and_serves_subject(tool_id: str) -> None:
    """Every tool id names a queue subject that parses back to it, a consumer
    and a serves subject; the queue subject is one token under the calls
    stream's subjects."""
    subjects = Subjects("my-app")
    queue = subjects.call_queue(tool_id)
    assert queue == f"my-app.calls.{tool_id}"
    assert subjects.tool_of(queue) == tool_id
    assert subjects.calls == "my-app.calls.*"
    assert subjects.tool_consumer(tool_id) == f"MY_APP_TOOL_{tool_id}"
    assert subjects.serves(tool_id) == f"my-app.serves.{tool_id}"
    assert "." not in subjects.tool_consumer(tool_id)


def test_tool_ids_that_cannot_be_routed_are_refused() -> None:
    """A tool id outside the grammar, or too long for a consumer name, is a
    ValueError; subjects that are no tool's queue parse to None."""
    subjects = Subjects("kigi")
    for bad in ("a.b", "a b", "*", ">", "", "a:b:c", ":a"):
        with pytest.raises(ValueError, match="SEG"):
            subjects.call_queue(bad)
    with pytest.raises(ValueError, match="at most 100"):
        subjects.tool_consumer("x" * 101)
    assert subjects.tool_consumer("x" * 100)
    for other in ("kigi.calls", "kigi.calls.a.b", "other.calls.a", "kigi.frames.a", "kigi.calls.*"):
        assert subjects.tool_of(other) is None


@given(subject_tool=_TOOL_IDS, call_tool=_TOOL_IDS, served=st.sets(_TOOL_IDS, max_size=4))
def test_route_runs_only_a_call_of_a_served_tool_on_its_own_subject(
    subject_tool: str, call_tool: str, served: set[str]
) -> None:
    """A worker runs a delivered call only when its subject and its tool_id
    name one tool and the worker serves it; otherwise the refusal names both."""
    subjects = Subjects("kigi")
    refusal = route(subjects, subjects.call_queue(subject_tool), call_tool, served, "w1")
    if subject_tool == call_tool and call_tool in served:
        assert refusal is None
        return
    assert refusal is not None
    if subject_tool != call_tool:
        assert refusal.code == "invalid_params"
        assert f"kigi.calls.{call_tool}" in refusal.message
    else:
        assert refusal.code == "tool_not_found"
        assert repr(call_tool) in refusal.message


@given(claim_written=st.booleans(), done_found=st.booleans(), cancel_stored=st.booleans())
def test_decide_start(claim_written: bool, done_found: bool, cancel_stored: bool) -> None:
    """A worker runs a call only when its claim was written and no cancel was
    stored; a call claimed before is acked when done, else not run again."""
    decision = decide_start(
        claim_written=claim_written, done_found=done_found, cancel_stored=cancel_stored
    )
    expected = (
        ("cancelled" if cancel_stored else "run")
        if claim_written
        else ("ended" if done_found else "not_again")
    )
    assert decision == expected
    assert (decision == "run") == (claim_written and not cancel_stored)


@given(claimed=st.booleans(), done=st.booleans(), served=st.sampled_from([True, False, None]))
def test_decide_unstarted(claimed: bool, done: bool, served: bool | None) -> None:
    """A caller that saw nothing of its call ends it as unserved only when
    nothing was claimed or done and the server said no worker serves its
    tool; a worker that did not answer in time counts as serving."""
    decision = decide_unstarted(claimed=claimed, done=done, served=served)
    assert (decision == "unserved") == (not claimed and not done and served is False)
    if done:
        assert decision == "ended"
    elif claimed:
        assert decision == "started"
    elif served is not False:
        assert decision == "wait"


def test_the_unserved_message_names_the_tool_and_the_fix() -> None:
    """The tool_not_found message names the tool, the call, and the command that serves it."""
    message = unserved_message("Kigi:grep", "c9", "kigi")
    assert "no worker serves tool 'Kigi:grep'" in message
    assert "'c9'" in message
    assert "--nats-prefix kigi" in message


def test_calls_layout_problem_refuses_other_layouts() -> None:
    """This layout's calls stream passes; the earlier one (``<prefix>.calls``)
    is refused with how to move on; any other subjects are refused too."""
    subjects = Subjects("kigi")
    assert calls_layout_problem(subjects, ["kigi.calls.*"]) is None
    earlier = calls_layout_problem(subjects, ["kigi.calls"])
    assert earlier is not None
    assert "earlier layout" in earlier
    assert "nats stream rm KIGI_CALLS" in earlier
    other = calls_layout_problem(subjects, ["elsewhere.>"])
    assert other is not None
    assert "not this version's calls stream" in other
