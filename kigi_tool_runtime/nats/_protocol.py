"""Tool calls over NATS JetStream, sans-IO: subject names, the messages, and the
consumer's loss accounting across stream sequences.

Invariants:

Rule 1. Three JetStream streams. ``<PREFIX>_CALLS`` is a work queue on
        ``<prefix>.calls.<tool>``, one subject per tool (Rule 8): each message
        is one ``tool.call`` JSON-RPC request line, exactly as the stdio
        client writes it, with the call id as its request id and its
        ``Nats-Msg-Id`` (a resubmitted call is a duplicate, not a second call).
        ``<PREFIX>_FRAMES`` keeps every call's frames under
        ``<prefix>.frames.<call>.<kind>``, with stated limits (bytes, age).
        ``<PREFIX>_CLAIMS`` keeps each call's claim and done record (Rule 6).
        ``<PREFIX>`` is the prefix upper-cased with ``-`` written ``_``.
Rule 2. A call's frame subjects: ``claim`` (a copy of the claim in the claims
        stream, Rule 6, written only if the subject is empty),
        ``progress`` (``tool_call_progress`` lines, the same bytes as the stdio
        wire, per-call ``seq`` 0, 1, 2, ...; a message holds one or more whole
        lines, its ``Nats-Msg-Id`` is ``<call>:<seq of its first line>`` so a
        retried publish is stored once), ``end`` (the JSON-RPC response
        line, written only if the subject is empty, so a call has exactly one
        terminal even when a worker and a lease verdict race) and ``cancel``.
        Heartbeats go to ``<prefix>.beat.<call>``, outside the JetStream streams.
Rule 3. The consumer counts what it did not receive. Progress ``seq`` has no hole
        on the way out, so a hole on the way in (a range of stream sequences
        that limits discarded, or a start above the one asked for) is a loss:
        the :class:`CallLedger` records it in the :class:`Reassembler`
        (``Reassembler.record_loss`` with the stream's total as of the loss:
        the next frame's ``total_bytes``, so that frame and the ones sharing
        its total are what survived and the gap counts the bytes of the
        missing frames; no frame is made up), and the frame after it reports
        the ``seq`` hole. Frames lost after the last one received are found
        from the end message's ``Kigi-Frames`` and ``Kigi-Totals`` headers and
        recorded at each stream's last total. Each recorded loss is a
        :class:`CallLoss` progress item (its gap marker to print), as no frame
        carries it. Nothing here is silent: every loss is counted, marked in
        the text, and makes the report incomplete.
Rule 4. A ledger resumes: one made at another's :attr:`CallLedger.position`
        folds what comes after, and absorbing its reassembler into the first's
        equals one ledger fed everything (the :class:`Reassembler` fold contract).
Rule 5. A call id names one call. A ledger told the digest of the call it
        submitted (``request``) ends that call with an ``invalid_params`` error
        when the claim names another call under the same id (one submitted
        earlier, or concurrently and stored first): the caller never gets
        another call's output as its own. A resubmission of the same call
        (same digest) follows the one call, as a retry should.
Rule 6. A call's state outlives its frames. ``<PREFIX>_CLAIMS`` keeps, for each
        call, its claim under ``<prefix>.claims.<call>`` (the one a worker must
        write, only if the subject is empty, before it starts the call) and
        its done record under ``<prefix>.done.<call>`` (written after the end:
        who ended it, how many frames, each stream's last total, and the end's
        error code or none). That JetStream stream's age limit is at least
        the calls' and the frames' and it has no byte limit, so no claim is discarded while
        its call can still be delivered, and a follower whose call's frames
        were discarded or deleted still learns that the call ended
        (:meth:`CallLedger.end_gone`). The claim's copy on the call's frame
        subject ``claim`` is for followers; retention may discard it.
Rule 7. A work-queue message that is not a call it can run but names a call id
        (top-level ``id`` and ``params.tool_call_id``, equal, a subject token,
        read even when the rest cannot be decoded: :func:`call_id_of`) gets an
        ``invalid_params`` end, so its caller is answered at once.
Rule 8. Calls are routed by tool. A call of tool ``T`` goes to
        ``<prefix>.calls.T``; each tool has one durable consumer of it,
        ``<PREFIX>_TOOL_T``, that every worker serving ``T`` pulls from and no
        other worker does, so a call reaches only workers that have its tool
        (:func:`route`: a message whose subject and ``tool_id`` disagree is
        not run). Each worker answers requests on ``<prefix>.serves.T`` for
        each of its tools (core NATS), so a caller learns at once that no
        worker serves ``T`` (the server's "no responders") and ends the call
        with ``tool_not_found`` naming ``T`` instead of waiting
        (:func:`unserved_error`).
Rule 9. A calls stream of the earlier layout (one subject ``<prefix>.calls``
        that every worker took every call from) is refused with a message
        saying how to move on (:func:`calls_layout_problem`): workers and
        callers of both layouts never share one deployment.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

import msgspec

from kigi_tool_protocol import (
    DecodeError,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
    ToolCallParams,
    ToolCallProgressFrame,
    ToolCallResult,
    json_codec,
)
from kigi_tool_protocol._methods import METHOD_TOOL_CALL, METHOD_TOOL_CALL_PROGRESS
from kigi_tool_protocol._progress_line import decode_progress_frame, decode_progress_line
from kigi_tool_protocol._tool_error import InternalErrorWire, InvalidParamsWire

from .._call._caller import CallLoss, CallProgress, RemoteToolError
from .._call._response import decode_outcome
from .._consumer._loss import StreamKey
from .._consumer._reassembler import Reassembler

__all__ = ("FollowPosition", "Subjects")

#: The subject prefix (and, upper-cased, the JetStream stream name prefix) by default.
DEFAULT_PREFIX: Final = "kigi"

#: Header of the end message: how many progress frames the worker published.
FRAMES_HEADER: Final = "Kigi-Frames"
#: Header of the end message: for each partial-result stream, its last
#: ``total_bytes`` and how many frames it had (a JSON object, subkind to
#: ``[total, frames]``), so frames lost after the last one received are found
#: and their bytes counted.
TOTALS_HEADER: Final = "Kigi-Totals"

# A subject token: no dots, wildcards or whitespace, and short enough that a
# subject stays readable in server logs.
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")

FrameKind = Literal["claim", "progress", "end", "cancel"]
# A frame count in a header: ASCII digits, few enough for int().
_COUNT: Final = re.compile(r"[0-9]{1,18}")

_KINDS: Final = frozenset({"claim", "progress", "end", "cancel"})


def _check_token(what: str, value: str) -> str:
    if not isinstance(value, str) or _TOKEN.fullmatch(value) is None:
        raise ValueError(
            f"{what} {value!r} cannot be a NATS subject token: use 1 to 128 of"
            " A-Z a-z 0-9 _ - (no dots, spaces or wildcards)"
        )
    return value


class Subjects:
    """The subject and JetStream stream names under one ``prefix``.

    Raises:
        ValueError: ``prefix`` is not a single subject token.
    """

    __slots__ = (
        "calls",
        "calls_jetstream",
        "cancels",
        "claims",
        "claims_jetstream",
        "frames",
        "frames_jetstream",
        "prefix",
        "stem",
    )

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = _check_token("prefix", prefix)
        stem = prefix.upper().replace("-", "_")
        #: The JetStream stream (and consumer) name stem.
        self.stem = stem
        self.calls_jetstream = f"{stem}_CALLS"
        self.frames_jetstream = f"{stem}_FRAMES"
        #: The JetStream stream of every call's claim and done record (Rule 6).
        self.claims_jetstream = f"{stem}_CLAIMS"
        #: The claims stream's subjects.
        self.claims = (f"{prefix}.claims.*", f"{prefix}.done.*")
        #: The calls stream's subjects: one per tool (Rule 8).
        self.calls = f"{prefix}.calls.*"
        self.frames = f"{prefix}.frames.>"
        #: Every call's cancel subject (workers listen to it live).
        self.cancels = f"{prefix}.frames.*.cancel"

    def call_queue(self, tool_id: str) -> str:
        """The work-queue subject of ``tool_id``'s calls (Rule 8).

        Raises:
            ValueError: ``tool_id`` is not a tool id.
        """
        return f"{self.prefix}.calls.{check_tool_id(tool_id)}"

    def tool_consumer(self, tool_id: str) -> str:
        """The durable consumer every worker serving ``tool_id`` pulls from (Rule 8).

        Raises:
            ValueError: ``tool_id`` is not a tool id.
        """
        return f"{self.stem}_TOOL_{check_tool_id(tool_id)}"

    def serves(self, tool_id: str) -> str:
        """The (core NATS) subject on which the workers serving ``tool_id``
        answer (Rule 8).

        Raises:
            ValueError: ``tool_id`` is not a tool id.
        """
        return f"{self.prefix}.serves.{check_tool_id(tool_id)}"

    def tool_of(self, subject: str) -> str | None:
        """The tool a work-queue subject names, or ``None`` for any other subject."""
        parts = subject.split(".")
        if len(parts) != 3 or parts[0] != self.prefix or parts[1] != "calls":
            return None
        return parts[2] if _TOOL.fullmatch(parts[2]) else None

    def call_frames(self, call_id: str) -> str:
        """The filter of one call's frame subjects.

        Raises:
            ValueError: ``call_id`` is not a subject token.
        """
        return f"{self.prefix}.frames.{_check_token('tool_call_id', call_id)}.*"

    def frame(self, call_id: str, kind: FrameKind) -> str:
        """The subject of one kind of frame of ``call_id``.

        Raises:
            ValueError: ``call_id`` is not a subject token.
        """
        return f"{self.prefix}.frames.{_check_token('tool_call_id', call_id)}.{kind}"

    def claim(self, call_id: str) -> str:
        """The subject of ``call_id``'s claim in the claims stream (Rule 6).

        Raises:
            ValueError: ``call_id`` is not a subject token.
        """
        return f"{self.prefix}.claims.{_check_token('tool_call_id', call_id)}"

    def done(self, call_id: str) -> str:
        """The subject of ``call_id``'s done record in the claims stream (Rule 6).

        Raises:
            ValueError: ``call_id`` is not a subject token.
        """
        return f"{self.prefix}.done.{_check_token('tool_call_id', call_id)}"

    def heartbeat(self, call_id: str) -> str:
        """The (core NATS, unstored) heartbeat subject of ``call_id``."""
        return f"{self.prefix}.beat.{_check_token('tool_call_id', call_id)}"

    def parse(self, subject: str) -> tuple[str, FrameKind] | None:
        """``(call_id, kind)`` of a frame subject, or ``None`` for any other subject."""
        parts = subject.split(".")
        if len(parts) != 4 or parts[0] != self.prefix or parts[1] != "frames":
            return None
        kind = parts[3]
        if kind not in _KINDS:
            return None
        return parts[2], kind  # type: ignore[return-value]


#: The longest tool id a worker serves over NATS: its consumer's name
#: (``<PREFIX>_TOOL_<tool>``) must fit the server's 255-character names with
#: room for the prefix.
MAX_TOOL_ID_CHARS: Final = 100

# The tool id grammar (``SEG`` or ``SEG:SEG``): every one is a subject token
# and a consumer name (no dots, spaces or wildcards).
_TOOL: Final = re.compile(r"[A-Za-z0-9_-]+(?::[A-Za-z0-9_-]+)?")


def check_tool_id(tool_id: str) -> str:
    """``tool_id`` if it can name a tool's subjects and consumer (Rule 8).

    Raises:
        ValueError: it is not a tool id, or is longer than :data:`MAX_TOOL_ID_CHARS`.
    """
    if not isinstance(tool_id, str) or _TOOL.fullmatch(tool_id) is None:
        raise ValueError(f"tool id {tool_id!r} is not SEG or SEG:SEG (SEG: A-Z a-z 0-9 _ -)")
    if len(tool_id) > MAX_TOOL_ID_CHARS:
        raise ValueError(
            f"tool id {tool_id[:20]!r}... is {len(tool_id)} characters; over NATS a tool id"
            f" has at most {MAX_TOOL_ID_CHARS} (it names a JetStream consumer)"
        )
    return tool_id


def check_call_id(call_id: str) -> str:
    """``call_id`` if it can name a call's subjects.

    Raises:
        ValueError: it is not a subject token.
    """
    return _check_token("tool_call_id", call_id)


# -- messages ---------------------------------------------------------------------------


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """The claim a worker writes before it runs a call: who runs it, which
    delivery of the call message it took (1 is the first), and the
    :func:`request_digest` of the call it runs (``None`` from a worker that does
    not say)."""

    worker: str
    delivery: int = 1
    request: str | None = None


def request_digest(params: ToolCallParams[Any]) -> str:
    """A digest of what a call asks (its id, tool, arguments and deadline), the
    same on the caller's side (arguments as values) and on the worker's (the
    arguments as received, raw): two submissions of one call share it, two
    different calls under one id do not.

    Raises:
        WireError: the arguments hold a value JSON cannot carry.
    """
    return hashlib.sha256(json_codec.encode(params)).hexdigest()


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """A running call's heartbeat: the worker, how far its output got, how
    long the call has run and how long it has written nothing (seconds;
    ``None`` from a worker that does not say). A caller that knows only the
    first two fields skips the others (unknown fields are ignored)."""

    worker: str
    frames: int
    elapsed_s: float | None = None
    silent_s: float | None = None


class Done(msgspec.Struct, frozen=True, kw_only=True):
    """A call's done record (Rule 6): the worker that ended it, the progress
    frames it published, each partial-result stream's last ``total_bytes`` and
    frame count (as in the ``Kigi-Totals`` header), the frames stream's
    sequence of the end message (``None`` when not known), and the end's error
    code (``None`` for a result)."""

    worker: str
    frames: int
    totals: dict[str, tuple[int, int]] = {}
    end_seq: int | None = None
    error: str | None = None


_claim_decoder: Final = msgspec.json.Decoder(Claim)
_done_decoder: Final = msgspec.json.Decoder(Done)
_beat_decoder: Final = msgspec.json.Decoder(Heartbeat)
_encoder: Final = msgspec.json.Encoder()


def encode_claim(claim: Claim) -> bytes:
    """The claim message's bytes."""
    return _encoder.encode(claim)


def decode_claim(data: bytes) -> Claim | None:
    """The claim in ``data``, or ``None`` when it is not one."""
    try:
        return _claim_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def encode_done(done: Done) -> bytes:
    """The done record's bytes."""
    return _encoder.encode(done)


def decode_done(data: bytes) -> Done | None:
    """The done record in ``data``, or ``None`` when it is not one."""
    try:
        return _done_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def encode_heartbeat(beat: Heartbeat) -> bytes:
    """The heartbeat message's bytes."""
    return _encoder.encode(beat)


def decode_heartbeat(data: bytes) -> Heartbeat | None:
    """The heartbeat in ``data``, or ``None`` when it is not one."""
    try:
        return _beat_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def encode_submit(params: ToolCallParams[Any], session_id: str | None = None) -> bytes:
    """The work-queue message of a call: a ``tool.call`` request line whose id is
    the call id.

    Raises:
        ValueError: the call id is not a subject token.
        WireError: the arguments hold a value JSON cannot carry.
    """
    check_call_id(params.tool_call_id)
    request: JsonRpcRequest[Any] = JsonRpcRequest(
        id=params.tool_call_id, session_id=session_id, method=METHOD_TOOL_CALL, params=params
    )
    return json_codec.encode(request) + b"\n"


def decode_submit(data: bytes) -> tuple[ToolCallParams[msgspec.Raw], str | None]:
    """The call params and session of a work-queue message.

    Raises:
        DecodeError: it is not a ``tool.call`` request for a call whose id is
            the request id and a subject token.
    """
    request = json_codec.decode(data, JsonRpcRequest[ToolCallParams[msgspec.Raw]])
    params = request.params
    if request.method != METHOD_TOOL_CALL:
        raise DecodeError(f"method is {request.method!r}, not {METHOD_TOOL_CALL!r}", "$.method")
    if request.id != params.tool_call_id:
        raise DecodeError("the request id is not the call's tool_call_id", "$.id")
    if _TOKEN.fullmatch(params.tool_call_id) is None:
        raise DecodeError("tool_call_id is not a NATS subject token", "$.params.tool_call_id")
    return params, request.session_id


# The next character that matters to call_id_of: a string's start, a
# container's start or end, or a separator.
_STRUCTURAL: Final = re.compile(rb'["{}\[\],]')
# A JSON string from its opening quote: any escapes, no unescaped quote.
_STRING: Final = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.DOTALL)


def call_id_of(data: bytes) -> str | None:
    """The call id a work-queue message names even when it cannot be decoded
    (Rule 7): its top-level ``"id"`` and its ``"params"`` object's
    ``"tool_call_id"``, both plain strings, equal, and a subject token;
    ``None`` otherwise. It reads only the structure (strings, brackets,
    commas), so deep nesting, a lone surrogate or a value out of range
    elsewhere does not hide the id."""
    stack: list[tuple[int, bytes | None]] = []  # (opening byte, key it sits under)
    key: bytes | None = None
    expect_key = False
    found: dict[str, bytes] = {}
    at = 0
    while True:
        hit = _STRUCTURAL.search(data, at)
        if hit is None:
            break
        at = hit.start()
        char = data[at]
        if char == 0x22:  # a string: a key, or a value
            string = _STRING.match(data, at)
            if string is None:
                break  # truncated: what was found so far stands
            at = string.end()
            text = string.group(1)
            if stack and stack[-1][0] == 0x7B and expect_key:
                key, expect_key = text, False
            elif len(stack) == 1 and stack[0][0] == 0x7B and key == b"id":
                found.setdefault("id", text)
            elif (
                len(stack) == 2
                and stack[0][0] == 0x7B
                and stack[1] == (0x7B, b"params")
                and key == b"tool_call_id"
            ):
                found.setdefault("tool_call_id", text)
            continue
        at += 1
        if char in (0x7B, 0x5B):  # { [
            stack.append((char, key))
            key, expect_key = None, char == 0x7B
        elif char in (0x7D, 0x5D):  # } ]
            if not stack:
                break
            key = stack.pop()[1]
            expect_key = False
        elif stack and stack[-1][0] == 0x7B:  # , in an object: a key is next
            expect_key = True
    call_id = found.get("id")
    if call_id is None or call_id != found.get("tool_call_id"):
        return None
    text = call_id.decode("ascii", "replace")
    return text if _TOKEN.fullmatch(text) else None


# -- routing and claim decisions (Rules 2, 8, 9) -------------------------------------


class Refusal(NamedTuple):
    """Why a worker does not run a call it was delivered: the tool error
    ``code`` to end it with and its message."""

    code: Literal["invalid_params", "tool_not_found"]
    message: str


def route(
    subjects: Subjects, subject: str, tool_id: str, served: Collection[str], worker: str
) -> Refusal | None:
    """Whether a worker serving ``served`` runs a call of ``tool_id`` delivered
    on ``subject`` (Rule 8): ``None`` to run it, else why not. The subject
    and the call must name one tool, and it must be one the worker serves (a
    consumer that some other program bound to the wrong subject is caught
    here, never run with another tool)."""
    routed = subjects.tool_of(subject)
    if routed != tool_id:
        return Refusal(
            "invalid_params",
            f"the call message on {subject!r} names tool {tool_id!r}: a call of tool"
            f" {tool_id!r} goes to {subjects.prefix}.calls.{tool_id}",
        )
    if tool_id not in served:
        return Refusal(
            "tool_not_found",
            f"no tool {tool_id!r} on worker {worker} (tools: {', '.join(sorted(served))})",
        )
    return None


StartDecision = Literal["run", "cancelled", "ended", "not_again"]


def decide_start(*, claim_written: bool, done_found: bool, cancel_stored: bool) -> StartDecision:
    """What a worker does with a delivered call once it tried to write the
    claim (Rule 6 and the worker's Rule 2): ``run`` it (claimed, no cancel
    stored), end it ``cancelled`` without running it (claimed, but cancelled
    before it started), ack it as ``ended`` (claimed before and done), or
    end it with ``connection_lost`` as ``not_again`` (claimed before by a
    worker that stopped mid-call)."""
    if claim_written:
        return "cancelled" if cancel_stored else "run"
    return "ended" if done_found else "not_again"


WaitDecision = Literal["wait", "started", "ended", "unserved"]


def decide_unstarted(*, claimed: bool, done: bool, served: bool | None) -> WaitDecision:
    """What a caller does when a lease passed and it saw nothing of its call
    (Rules 2a and 8): a done record means the call ``ended``; a claim that it
    ``started`` (its worker is silent); neither, with no worker serving the
    tool (``served`` is ``False``: no responder), that it is ``unserved``;
    else (a worker serves it, or none answered in time) it ``wait``s."""
    if done:
        return "ended"
    if claimed:
        return "started"
    return "unserved" if served is False else "wait"


def unserved_message(tool_id: str, call_id: str, prefix: str) -> str:
    """The ``tool_not_found`` message of a call that no worker serves (Rule 8)."""
    return (
        f"no worker serves tool {tool_id!r} under prefix {prefix!r}: call {call_id!r} was"
        f" not run (start a worker with that tool: kigi-stream serve --nats URL"
        f" --tools ... --nats-prefix {prefix})"
    )


def calls_layout_problem(subjects: Subjects, stream_subjects: Collection[str]) -> str | None:
    """What is wrong with a calls stream whose subjects are ``stream_subjects``
    (Rule 9), or ``None`` when it is this layout's."""
    if list(stream_subjects) == [subjects.calls]:
        return None
    old = f"{subjects.prefix}.calls"
    if old in stream_subjects:
        return (
            f"the JetStream stream {subjects.calls_jetstream} has the earlier layout"
            f" (subject {old}, every worker taking every call): this version routes calls"
            f" by tool on {subjects.calls}. Stop the earlier workers and callers, then"
            f" delete the stream (nats stream rm {subjects.calls_jetstream}), or use"
            " another prefix"
        )
    return (
        f"the JetStream stream {subjects.calls_jetstream} takes {sorted(stream_subjects)},"
        f" not [{subjects.calls!r}]: it is not this version's calls stream; delete it or"
        " use another prefix"
    )


def decode_end(data: bytes) -> ToolCallResult | RemoteToolError:
    """The outcome an end message carries: the result, or the error as a
    :class:`RemoteToolError`; decoded as the stdio client decodes a response
    (``_call/_response.py``). An end message that is not a response is an
    ``internal_error``, never a silent success."""
    return decode_outcome(data, "the call's")


# -- the consumer's accounting ------------------------------------------------------------


class FollowPosition(NamedTuple):
    """Where a follower of one call stands: the next stream sequence to read, and
    the next progress ``seq`` it expects (``None`` when it does not know, e.g. a
    resume from a bare stream sequence)."""

    jetstream_seq: int
    call_seq: int | None


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """What one message added: the progress it fed the reassembler (the losses
    it recorded there included, as :class:`CallLoss` items, each before the
    frame that revealed it; a record the reassembler could not decode is
    reported in its anomalies, not here), the claim it carried, or the outcome
    it ended the call with."""

    progress: tuple[CallProgress | CallLoss, ...] = ()
    claim: Claim | None = None
    outcome: ToolCallResult | RemoteToolError | None = None
    cancel: bool = False


class CallLedger:
    """One call's consumer-side accounting across stream sequences (Rules 3, 4).

    Feed it each delivered message of the call's frame subjects in stream order
    with :meth:`feed`; it absorbs progress into :attr:`reassembler` and counts
    what never arrived. ``position`` resumes after another ledger; ``reassembler``
    (default: a new one that knows only this call) receives the records.

    Raises:
        ValueError: ``position.jetstream_seq`` is below 1, or ``call_id`` is not a
            subject token.
    """

    def __init__(
        self,
        call_id: str,
        tool_id: str = "",
        *,
        position: FollowPosition | None = None,
        reassembler: Reassembler | None = None,
        request: str | None = None,
    ) -> None:
        check_call_id(call_id)
        self.request = request
        #: Whether the claim named another call under this id (Rule 5): from
        #: then on nothing is absorbed.
        self.refused = False
        if position is None:
            position = FollowPosition(1, 0)
        if position.jetstream_seq < 1:
            raise ValueError(f"stream sequences start at 1, got {position.jetstream_seq}")
        self.call_id = call_id
        self.tool_id = tool_id
        # A fresh ledger that resumes mid-call did not see the call's start, so
        # what came before is no missing prefix (this ledger says its own losses).
        at_start = position.jetstream_seq == 1 and not position.call_seq
        self.reassembler = (
            reassembler
            if reassembler is not None
            else Reassembler(known_calls=[call_id], from_start=at_start)
        )
        self._next_jetstream_seq = position.jetstream_seq
        self._next_call = position.call_seq
        # Messages the frames JetStream stream discarded before this ledger
        # read them: the stream sequences [first, last] (Rule 3), while no later frame of the
        # call has shown whether any of them was ours.
        self._discarded: tuple[int, int] | None = None
        self._kind_frames: dict[str, int] = {}
        self.claim: Claim | None = None
        self.outcome: ToolCallResult | RemoteToolError | None = None
        #: Ranges of stream sequences, ``(first, last)``, that the stream had
        #: discarded before this ledger read them (any call's messages).
        self.discarded: list[tuple[int, int]] = []
        #: Messages delivered twice (a redelivery after a reconnect): skipped.
        self.duplicates = 0
        #: Frames known lost (seq holes, a lost tail); each loss is recorded in
        #: the reassembler where its bytes' total is known (Rule 3).
        self.frames_lost = 0

    @property
    def position(self) -> FollowPosition:
        """Where to resume after what was fed so far."""
        return FollowPosition(self._next_jetstream_seq, self._next_call)

    @property
    def ended(self) -> bool:
        """Whether the call's end message arrived."""
        return self.outcome is not None

    @property
    def frames(self) -> int:
        """Progress frames the worker is known to have published so far."""
        return self._next_call or 0

    def jetstream_starts_at(self, first_seq: int) -> None:
        """Tell the ledger the stream's first stored sequence (from stream info or
        the first delivered message): anything it has not read below that was
        discarded by the stream's limits, and may have been this call's."""
        if first_seq > self._next_jetstream_seq:
            self.discarded.append((self._next_jetstream_seq, first_seq - 1))
            low = self._next_jetstream_seq
            if self._discarded is not None:
                low = self._discarded[0]
            self._discarded = (low, first_seq - 1)
            self._next_jetstream_seq = first_seq

    def feed(
        self,
        jetstream_seq: int,
        kind: FrameKind,
        data: bytes,
        headers: dict[str, str] | None = None,
    ) -> LedgerEvent:
        """Account for one delivered message of this call (``kind`` is its subject's
        last token) and absorb what it carries."""
        if self.refused:
            return LedgerEvent()
        if jetstream_seq < self._next_jetstream_seq:
            self.duplicates += 1
            return LedgerEvent()
        self._next_jetstream_seq = jetstream_seq + 1
        if kind == "progress":
            # A message carries one or more whole lines (a worker's batch).
            items: list[CallProgress | CallLoss] = []
            for line in data.split(b"\n"):
                if line.strip():
                    items.extend(self._progress(line))
            return LedgerEvent(progress=tuple(items))
        if kind == "claim":
            claim = decode_claim(data)
            self.claim = claim
            if self._another_call(claim):
                return LedgerEvent(claim=claim, outcome=self.outcome)
            if self._next_call is None:
                self._next_call = 0  # the call's first frame is still ahead
            self._discarded = None
            return LedgerEvent(claim=claim)
        if kind == "cancel":
            return LedgerEvent(cancel=True)
        if self.outcome is not None:
            self.duplicates += 1
            return LedgerEvent()
        progress = self._lost_tail(headers or {})
        self.outcome = decode_end(data)
        return LedgerEvent(progress=progress, outcome=self.outcome)

    def end_gone(self, done: Done, why: str) -> LedgerEvent:
        """End the call from its done record when its end message is gone
        (``why`` says how it is known: deleted, discarded by the stream's
        limits): the frames it published that this ledger did not receive are
        lost, with a gap at each stream's last total as a lost tail is, and the
        outcome is an ``internal_error`` that says how the call ended. Nothing
        is fed once the call has ended."""
        if self.outcome is not None:
            return LedgerEvent()
        headers = {
            FRAMES_HEADER: str(done.frames),
            TOTALS_HEADER: _encoder.encode(done.totals).decode(),
        }
        progress = self._lost_tail(headers)
        how = "with a result" if done.error is None else f"with a {done.error!r} error"
        detail = (
            f"call {self.call_id!r} ended {how} (worker {done.worker!r},"
            f" {done.frames} frame(s)), but its end message is no longer in the"
            f" stream ({why}): what it said is lost"
        )
        self.outcome = RemoteToolError(InternalErrorWire(detail=detail), detail)
        return LedgerEvent(progress=progress, outcome=self.outcome)

    def conclude(self, outcome: ToolCallResult | RemoteToolError) -> bool:
        """End the call here when no end message can arrive (a lease verdict, a
        timeout, an end the stream's limits discarded). Returns whether it ended
        the call (``False``: it had ended already)."""
        if self.outcome is not None:
            return False
        self.outcome = outcome
        return True

    # -- internals -------------------------------------------------------------------

    def _another_call(self, claim: Claim | None) -> bool:
        """Rule 5: end the call when the claimed call is not the one submitted."""
        if (
            self.request is None
            or claim is None
            or claim.request is None
            or claim.request == self.request
            or self.outcome is not None
        ):
            return False
        detail = (
            f"call id {self.call_id!r} already names another call (another tool, other"
            " arguments or another deadline); this call was not run: give each call its own id"
        )
        self.outcome = RemoteToolError(InvalidParamsWire(message=detail), detail)
        self.refused = True
        return True

    def _loss(self, kind: str, total: int, detail: str) -> CallLoss:
        """Record in the reassembler a loss of the ``kind`` stream of this call
        that ends at its total ``total`` (Rule 3)."""
        key = StreamKey(self.call_id, kind)
        return CallLoss(self.reassembler.appended_loss(key, detail, total_bytes=max(total, 0)))

    def _progress(self, data: bytes) -> tuple[CallProgress | CallLoss, ...]:
        # Decoded once here; the reassembler is fed the decoded frame. A line
        # that is no progress frame goes to it as it came, so its report names
        # what is wrong (Rule 3 of the reassembler).
        try:
            note = decode_progress_line(data)
        except DecodeError:
            self.reassembler.appended(data)
            return ()
        if isinstance(note, JsonRpcNotification) and isinstance(note.params, ToolCallProgressFrame):
            return self._frame(note.params, note.seq)
        if isinstance(note, JsonRpcResponse) or not isinstance(note.params, msgspec.Raw):
            self.reassembler.appended(data)
            return ()
        # Not the common shape: a text/content note, a body that is no payload,
        # another method. The frame is decoded once, its body as plain JSON.
        try:
            other = decode_progress_frame(note.params)
        except DecodeError:
            self.reassembler.appended(data)
            return ()
        # A request's params are read as a frame too; it carries no seq.
        seq = note.seq if isinstance(note, JsonRpcNotification) else None
        if note.method == METHOD_TOOL_CALL_PROGRESS:
            appended = self.reassembler.appended(other, seq)
        elif isinstance(note, JsonRpcNotification):
            appended = self.reassembler.appended(note)  # another method: ignored
        else:
            appended = self.reassembler.appended(data)  # a request: ignored
        self._count_seq(other, seq)
        return (CallProgress(other, seq, appended),)

    def _count_seq(self, other: ToolCallProgressFrame[Any], seq: int | None) -> None:
        """A frame off the common path: its ``seq`` hole is counted, no gap is marked."""
        if other.tool_call_id == self.call_id and seq is not None:
            if self._next_call is not None and seq > self._next_call:
                self.frames_lost += seq - self._next_call
            self._next_call = seq + 1

    def _frame(
        self, frame: ToolCallProgressFrame[Any], seq: int | None
    ) -> tuple[CallProgress | CallLoss, ...]:
        out: list[CallProgress | CallLoss] = []
        expected = self._next_call
        missing = 0
        if seq is not None:
            if expected is not None and seq > expected:
                missing = seq - expected
            elif expected is None and self._discarded is not None:
                # Resumed at a bare stream sequence the stream no longer held:
                # whatever of this call lay before is gone, how much is unknown.
                missing = -1
            self._next_call = seq + 1
        discarded = self._discarded
        self._discarded = None
        if missing:
            self.frames_lost += max(missing, 0)
            payload = frame.body
            if not payload.gap and frame.tool_call_id == self.call_id:
                # A loss ending at this frame's total: the reassembler counts
                # the frames that share it (this one and its paced remainder)
                # as what survived, so the gap is exactly the missing frames' bytes.
                if missing > 0 and seq is not None:
                    detail = f"progress frame(s) {expected}-{seq - 1} of this call never arrived"
                else:
                    detail = f"progress frames of this call before {seq} never arrived"
                if discarded is not None:
                    detail += (
                        f" (the JetStream stream discarded sequences {discarded[0]}-{discarded[1]}"
                        " by its limits)"
                    )
                out.append(self._loss(frame.kind, payload.total_bytes, detail))
        if frame.tool_call_id == self.call_id:
            self._kind_frames[frame.kind] = self._kind_frames.get(frame.kind, 0) + 1
        out.append(CallProgress(frame, seq, self.reassembler.appended(frame, seq)))
        return tuple(out)

    def _lost_tail(self, headers: dict[str, str]) -> tuple[CallLoss, ...]:
        raw_frames = headers.get(FRAMES_HEADER)
        if raw_frames is None or _COUNT.fullmatch(raw_frames) is None:
            return ()
        published = int(raw_frames)
        seen = self._next_call
        if seen is None or published <= seen:
            if seen is None:
                self._next_call = published
            return ()
        self.frames_lost += published - seen
        self._next_call = published
        try:
            totals = msgspec.json.decode(
                headers.get(TOTALS_HEADER, "{}"), type=dict[str, tuple[int, int]]
            )
        except msgspec.DecodeError:
            totals = {}
        out: list[CallLoss] = []
        for kind, (total, count) in totals.items():
            received = self._kind_frames.get(kind, 0)
            if count > received:
                detail = (
                    f"{kind!r} frames after the last one received never arrived (the"
                    f" worker published {count}, up to total_bytes {total})"
                )
                out.append(self._loss(kind, total, detail))
                self._kind_frames[kind] = count
        return tuple(out)
