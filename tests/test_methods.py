"""The JSON-RPC method strings."""

from __future__ import annotations

import kigi_tool_protocol as kp
from kigi_tool_protocol import _methods
from kigi_tool_protocol._methods import (
    METHOD_HOOK,
    METHOD_HOOK_REPLY,
    METHOD_TOOL_CALL,
    METHOD_TOOL_CALL_PROGRESS,
    METHOD_TOOL_CALL_REQUEST,
    METHOD_TOOL_CANCEL,
    METHODS,
)

#: The 35 method strings, in the protocol's order.
EXPECTED = [
    "session_open",
    "session_close",
    "session_bind_server",
    "session_unbind_server",
    "session_attach_server",
    "tools.list",
    "tools.search",
    "tool.call",
    "tool.cancel",
    "tool.notify",
    "system.notify",
    "subscribe_notifications",
    "unsubscribe_notifications",
    "hook",
    "hello",
    "hello_ack",
    "ping",
    "pong",
    "tool_call_progress",
    "tool.notification",
    "hook_reply",
    "traces.donate",
    "logs.donate",
    "metrics.donate",
    "tool_call_request",
    "tools_changed",
    "subscribe_ack",
    "unsubscribe_ack",
    "servers.list",
    "tool_server.status",
    "tool_server.get_status",
    "tool_server.evict",
    "serve",
    "session.bind",
    "session.unbind",
]


def test_all_35_methods_are_listed_in_order() -> None:
    """METHODS holds the 35 method strings, each once, in the protocol's order."""
    assert list(METHODS) == EXPECTED
    assert len(set(METHODS)) == 35


def test_each_method_has_a_named_constant() -> None:
    """Every method string has a METHOD_ constant named after it, in
    ``kigi_tool_protocol._methods``; the package exports none of them (the
    spellings are the wire's, tests/conformance/WIRE.md: the SDK's own code
    sends and reads them)."""
    for method in EXPECTED:
        assert getattr(_methods, "METHOD_" + method.upper().replace(".", "_")) == method
    assert not [name for name in kp.__all__ if name.startswith("METHOD")]


def test_the_methods_the_sdk_uses() -> None:
    """The methods used to call, stream, hook and cancel have their exact spellings."""
    assert METHOD_TOOL_CALL == "tool.call"
    assert METHOD_TOOL_CALL_PROGRESS == "tool_call_progress"
    assert METHOD_HOOK == "hook"
    assert METHOD_HOOK_REPLY == "hook_reply"
    assert METHOD_TOOL_CANCEL == "tool.cancel"
    assert METHOD_TOOL_CALL_REQUEST == "tool_call_request"
