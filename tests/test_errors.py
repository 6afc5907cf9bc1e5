"""Tests for ``ToolError``: its kinds and its lossless mapping to the wire."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from hypothesis import given

from kigi_tool_protocol import ToolErrorWire, json_codec
from kigi_tool_protocol._tool_error import (
    ERROR_CODES,
    BehaviorVersionUnsupportedWire,
    CancelledWire,
    ConnectionLostWire,
    ExecutionWire,
    ForbiddenWire,
    FrameTooLargeWire,
    InternalErrorWire,
    RenderLimitedWire,
    SessionMismatchWire,
    TimeoutWire,
    ToolNotFoundWire,
    UnsupportedProtocolVersionWire,
    error_code_for,
)
from kigi_tool_runtime import ToolError, ToolErrorKind
from kigi_tool_runtime.testing import wire_values

# -- ToolError -----------------------------------------------------------------------

WIRE_CASES = [
    (
        ToolError(ToolErrorKind.TIMEOUT, "slow", tool_id="bash", elapsed_ms=1500),
        b'{"code":"timeout","tool_id":"bash","elapsed_ms":1500}',
    ),
    (
        ToolError(ToolErrorKind.CANCELLED, "stop", tool_id="bash"),
        b'{"code":"cancelled","tool_id":"bash"}',
    ),
    (
        ToolError.execution("exit 2").with_tool_id("bash"),
        b'{"code":"execution","tool_id":"bash","message":"exit 2"}',
    ),
    (
        ToolError.invalid_params("bad", details={"path": "$.x"}),
        b'{"code":"invalid_params","message":"bad","details":{"path":"$.x"}}',
    ),
    (ToolError.invalid_params("bad"), b'{"code":"invalid_params","message":"bad"}'),
    (
        ToolError(ToolErrorKind.TOOL_NOT_FOUND, "no such tool", tool_id="nope"),
        b'{"code":"tool_not_found","tool_id":"nope"}',
    ),
    (ToolError.forbidden("read only"), b'{"code":"forbidden","reason":"read only"}'),
    (
        ToolError(ToolErrorKind.INTERNAL_ERROR, "oops"),
        b'{"code":"internal_error","detail":"oops"}',
    ),
    (
        ToolError(ToolErrorKind.INTERNAL_ERROR, "oops", request_id="r-1"),
        b'{"code":"internal_error","request_id":"r-1","detail":"oops"}',
    ),
    (ToolError(ToolErrorKind.SESSION_MISMATCH, "not yours"), b'{"code":"session_mismatch"}'),
    (
        ToolError(ToolErrorKind.CONNECTION_LOST, "gone", tool_id="bash"),
        b'{"code":"connection_lost","tool_id":"bash"}',
    ),
    (
        ToolError.unsupported_protocol_version(["1.0", "1.1"]),
        b'{"code":"unsupported_protocol_version","supported":["1.0","1.1"]}',
    ),
    (
        ToolError.unsupported_protocol_version([]),
        b'{"code":"unsupported_protocol_version","supported":[]}',
    ),
    (
        ToolError.frame_too_large(70_000, 65_536),
        b'{"code":"frame_too_large","bytes":70000,"limit":65536}',
    ),
    (
        ToolError.behavior_version_unsupported("v2").with_tool_id("bash"),
        b'{"code":"behavior_version_unsupported","tool_id":"bash","requested":"v2"}',
    ),
    (
        ToolError.render_limited("too many cards", card_id="c7").with_tool_id("render"),
        b'{"code":"render_limited","tool_id":"render","card_id":"c7","reason":"too many cards"}',
    ),
    (
        ToolError.render_limited("budget spent").with_tool_id("render"),
        b'{"code":"render_limited","tool_id":"render","reason":"budget spent"}',
    ),
    (
        ToolError.terminal("pty closed").with_tool_id("bash"),
        b'{"code":"terminal_error","tool_id":"bash","message":"pty closed"}',
    ),
    (
        ToolError.custom("quota", "over quota", details={"left": 0}),
        b'{"code":"custom","subcode":"quota","message":"over quota","details":{"left":0}}',
    ),
    (ToolError.custom("quota", "over"), b'{"code":"custom","subcode":"quota","message":"over"}'),
]

#: JSON-RPC numbers of the variants without a row of their own in ERROR_CODES.
OFF_TABLE_NUMBERS = {"session_mismatch": -32600}


@pytest.mark.parametrize(("error", "expected"), WIRE_CASES)
def test_every_error_kind_maps_onto_its_wire_variant(error: ToolError, expected: bytes) -> None:
    """Each kind becomes its ``ToolErrorWire`` variant, byte-exact, and decodes back."""
    wire = error.to_wire()
    assert json_codec.encode(wire) == expected
    assert json_codec.decode(expected, ToolErrorWire) == wire
    kind = error.kind.value
    assert error.code == OFF_TABLE_NUMBERS.get(kind, ERROR_CODES.get(kind, -32603))
    assert json_codec.encode(ToolError.from_wire(wire).to_wire()) == expected


def test_error_kinds_are_wire_codes() -> None:
    """The kinds are exactly the ``ToolErrorWire`` codes (each has a case above)
    and each has a number."""
    codes = {variant.__struct_config__.tag for variant in get_args(ToolErrorWire)}
    assert {kind.value for kind in ToolErrorKind} == codes
    assert {error.kind for error, _ in WIRE_CASES} == set(ToolErrorKind)
    assert ToolError.invalid_params("x").code == -32602
    assert ToolError(ToolErrorKind.TIMEOUT, "x", tool_id="t").code == -32001


@given(wire=wire_values(ToolErrorWire))
def test_every_wire_error_converts_both_ways(wire: ToolErrorWire) -> None:
    """``from_wire`` makes the error of the wire's kind, whose ``to_wire`` is the
    same wire, byte for byte, for every variant and field combination."""
    error = ToolError.from_wire(wire, "the reply's message")
    assert error.kind.value == wire.code
    assert error.to_wire() == wire
    assert json_codec.encode(error.to_wire()) == json_codec.encode(wire)
    assert error.code == error_code_for(wire)
    assert str(error) == error.message


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (ExecutionWire(tool_id="t", message="exit 2"), "exit 2"),
        (ForbiddenWire(reason="read only"), "read only"),
        (RenderLimitedWire(tool_id="t", reason="budget"), "budget"),
        (InternalErrorWire(detail="oops"), "oops"),
        (InternalErrorWire(), "the reply's message"),
        (CancelledWire(tool_id="t"), "the reply's message"),
        (FrameTooLargeWire(bytes=9, limit=8), "the reply's message"),
    ],
)
def test_from_wire_keeps_the_wires_own_sentence(wire: ToolErrorWire, message: str) -> None:
    """A variant that carries a sentence (``message``, ``reason``, ``detail``)
    keeps it; the others take the reply's ``error.message``."""
    assert ToolError.from_wire(wire, "the reply's message").message == message


@pytest.mark.parametrize(
    ("wire", "sentence"),
    [
        (TimeoutWire(tool_id="t", elapsed_ms=1500), "tool 't' timed out after 1500 ms"),
        (CancelledWire(tool_id="t"), "tool 't' call was cancelled"),
        (ToolNotFoundWire(tool_id="t"), "no tool has the id 't'"),
        (SessionMismatchWire(), "the session does not own the call"),
        (ConnectionLostWire(tool_id="t"), "connection to tool 't' lost"),
        (
            UnsupportedProtocolVersionWire(supported=["1.0", "2.0"]),
            "unsupported protocol version; supported: 1.0, 2.0",
        ),
        (
            UnsupportedProtocolVersionWire(supported=[]),
            "unsupported protocol version; supported: none",
        ),
        (FrameTooLargeWire(bytes=9, limit=8), "a frame of 9 bytes exceeds the 8-byte limit"),
        (
            BehaviorVersionUnsupportedWire(tool_id="t", requested="v2"),
            "tool 't' does not support behavior version 'v2'",
        ),
        (InternalErrorWire(), "internal_error error"),
    ],
)
def test_from_wire_without_a_message_makes_one(wire: ToolErrorWire, sentence: str) -> None:
    """With no sentence on the wire and none given, the error says what the wire says."""
    error = ToolError.from_wire(wire)
    assert error.message == sentence
    assert error.to_wire() == wire


def test_an_internal_error_without_detail_keeps_none() -> None:
    """An ``internal_error`` read without ``detail`` goes back out without one, while
    one made here sends its message as the detail."""
    error = ToolError.from_wire(InternalErrorWire(request_id="r"), "server failed")
    assert json_codec.encode(error.to_wire()) == b'{"code":"internal_error","request_id":"r"}'
    assert ToolError("internal_error", "x").to_wire() == InternalErrorWire(detail="x")


@pytest.mark.parametrize(
    ("kind", "fields", "missing"),
    [
        ("custom", {}, "subcode"),
        ("unsupported_protocol_version", {}, "supported"),
        ("frame_too_large", {}, "frame_bytes and limit"),
        ("frame_too_large", {"frame_bytes": 9}, "limit"),
        ("behavior_version_unsupported", {}, "requested"),
    ],
)
def test_a_kind_missing_a_required_field_is_refused(
    kind: str, fields: dict[str, Any], missing: str
) -> None:
    """A kind whose wire variant needs more than a sentence says which field is missing."""
    with pytest.raises(ValueError, match=f"^a '{kind}' error needs {missing}$"):
        ToolError(kind, "x", **fields)


def test_supported_versions_must_be_a_list_not_a_str() -> None:
    """A bare version string would be split into characters: it is refused."""
    with pytest.raises(TypeError, match=r"^supported is a list of versions, not the str '1\.0'$"):
        ToolError.unsupported_protocol_version("1.0")


def test_the_extra_field_constructors_fill_their_fields() -> None:
    """Each constructor of a data-carrying kind sets its fields and a sentence."""
    large = ToolError.frame_too_large(9, 8)
    assert (large.kind, large.frame_bytes, large.limit) == ("frame_too_large", 9, 8)
    assert large.message == "a frame of 9 bytes exceeds the 8-byte limit"
    versions = ToolError.unsupported_protocol_version(iter(["1.0"]))
    assert versions.supported == ("1.0",)
    assert versions.message == "unsupported protocol version; supported: 1.0"
    behavior = ToolError.behavior_version_unsupported("v2")
    assert behavior.requested == "v2"
    assert behavior.message == "behavior version 'v2' is not supported"
    custom = ToolError.custom("quota", "over", details=[1])
    assert (custom.subcode, custom.message, custom.details) == ("quota", "over", [1])
    render = ToolError.render_limited("budget", card_id="c")
    assert (render.kind, render.card_id, render.message) == ("render_limited", "c", "budget")
    assert ToolError.terminal("closed").kind is ToolErrorKind.TERMINAL_ERROR


def test_an_error_needing_a_tool_id_says_so() -> None:
    """A kind whose wire variant carries the tool id cannot go out without one."""
    with pytest.raises(ValueError, match="a 'execution' error needs a tool id"):
        ToolError.execution("x").to_wire()
    with pytest.raises(ValueError, match="a 'terminal_error' error needs a tool id"):
        ToolError.terminal("x").to_wire()


def test_with_tool_id_keeps_an_existing_id() -> None:
    """``with_tool_id`` fills in a missing id and never overwrites one."""
    error = ToolError(ToolErrorKind.CANCELLED, "x", tool_id="mine")
    assert error.with_tool_id("other").tool_id == "mine"
    assert ToolError.execution("x").with_tool_id("t").tool_id == "t"


def test_a_tool_error_is_an_exception_with_its_message() -> None:
    """``ToolError`` is raised and caught like any exception; ``str`` is the message."""
    with pytest.raises(ToolError, match=r"^broken$") as info:
        raise ToolError("execution", "broken")
    assert info.value.kind is ToolErrorKind.EXECUTION
    assert repr(info.value) == "ToolError('execution', 'broken', tool_id=None)"


def test_an_unknown_error_kind_is_refused() -> None:
    """Kinds are a closed set."""
    with pytest.raises(ValueError, match="'rate_limited' is not a valid ToolErrorKind"):
        ToolError("rate_limited", "slow down")


# -- immutability --------------------------------------------------------------------


@given(wire_values(ToolErrorWire))
def test_an_error_is_immutable_once_made(wire: ToolErrorWire) -> None:
    """No attribute of a made error can be assigned or deleted (its message is
    made right the first time); ``with_tool_id`` gives a copy naming the tool
    when it named none, of the same type and wire, and leaves the error as it was."""
    error = ToolError.from_wire(wire)
    for name in ("message", "kind", "tool_id", "details", "anything"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(error, name, "changed")
    with pytest.raises(AttributeError, match="immutable"):
        del error.message
    named = error.with_tool_id("other")
    assert named.to_wire() == wire if error.tool_id is not None else named.tool_id == "other"
    assert type(named) is ToolError
    assert (named.kind, named.message) == (error.kind, error.message)
    assert ToolError.from_wire(wire).to_wire() == wire  # nothing was changed


def _raise_from(error: ToolError) -> None:
    try:
        raise ValueError("under")
    except ValueError as cause:
        raise error from cause


def test_a_copy_keeps_its_type_and_the_exception_machinery_still_works() -> None:
    """A subclass stays itself through ``with_tool_id``; raising it, chaining it
    and adding a note (the interpreter's own attributes) still work."""
    from kigi_tool_runtime._tools._command import CommandNotStarted

    error = CommandNotStarted("no such program")
    named = error.with_tool_id("bash")
    assert isinstance(named, CommandNotStarted)
    assert (named.tool_id, error.tool_id) == ("bash", None)
    assert named.with_tool_id("other") is named
    with pytest.raises(CommandNotStarted) as caught:
        _raise_from(named)
    caught.value.add_note("a note")
    assert isinstance(caught.value.__cause__, ValueError)
    assert caught.value.__notes__ == ["a note"]
    assert caught.value.__traceback__ is not None


def test_a_frame_too_large_error_says_it_in_the_hosts_words() -> None:
    """A host's own sentence is given when the error is made, never set after."""
    error = ToolError.frame_too_large(10, 5, "the result is 10 bytes; the server takes 5")
    assert error.message == "the result is 10 bytes; the server takes 5"
    assert (error.frame_bytes, error.limit) == (10, 5)
    assert (
        ToolError.frame_too_large(10, 5).message == "a frame of 10 bytes exceeds the 5-byte limit"
    )
