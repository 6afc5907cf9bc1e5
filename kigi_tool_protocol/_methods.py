"""The JSON-RPC method strings of the protocol, exactly as the Rust crates spell them."""

from __future__ import annotations

from typing import Final

__all__ = ()

METHOD_SESSION_OPEN: Final = "session_open"
METHOD_SESSION_CLOSE: Final = "session_close"
METHOD_SESSION_BIND_SERVER: Final = "session_bind_server"
METHOD_SESSION_UNBIND_SERVER: Final = "session_unbind_server"
METHOD_SESSION_ATTACH_SERVER: Final = "session_attach_server"
METHOD_TOOLS_LIST: Final = "tools.list"
METHOD_TOOLS_SEARCH: Final = "tools.search"
#: A tool call (request, harness to hub); params ``ToolCallParams``, result ``ToolCallResult``.
METHOD_TOOL_CALL: Final = "tool.call"
#: Listed by the protocol but never sent: cancel with :data:`METHOD_HOOK` instead.
METHOD_TOOL_CANCEL: Final = "tool.cancel"
METHOD_TOOL_NOTIFY: Final = "tool.notify"
METHOD_SYSTEM_NOTIFY: Final = "system.notify"
METHOD_SUBSCRIBE_NOTIFICATIONS: Final = "subscribe_notifications"
METHOD_UNSUBSCRIBE_NOTIFICATIONS: Final = "unsubscribe_notifications"
#: A hook; params ``HookFrame``. Cancellation is a ``hook`` whose event is ``Cancel``.
METHOD_HOOK: Final = "hook"
METHOD_HELLO: Final = "hello"
METHOD_HELLO_ACK: Final = "hello_ack"
METHOD_PING: Final = "ping"
METHOD_PONG: Final = "pong"
#: A progress notification (tool server to harness); params ``ToolCallProgressFrame``.
METHOD_TOOL_CALL_PROGRESS: Final = "tool_call_progress"
METHOD_TOOL_NOTIFICATION: Final = "tool.notification"
#: A tool server's answer to a request/response hook; params ``HookReplyParams``.
METHOD_HOOK_REPLY: Final = "hook_reply"
METHOD_TRACES_DONATE: Final = "traces.donate"
METHOD_LOGS_DONATE: Final = "logs.donate"
METHOD_METRICS_DONATE: Final = "metrics.donate"
#: A tool call forwarded to a tool server; the same params, the same ``tool_call_id``.
METHOD_TOOL_CALL_REQUEST: Final = "tool_call_request"
METHOD_TOOLS_CHANGED: Final = "tools_changed"
METHOD_SUBSCRIBE_ACK: Final = "subscribe_ack"
METHOD_UNSUBSCRIBE_ACK: Final = "unsubscribe_ack"
METHOD_SERVERS_LIST: Final = "servers.list"
METHOD_TOOL_SERVER_STATUS: Final = "tool_server.status"
METHOD_TOOL_SERVER_GET_STATUS: Final = "tool_server.get_status"
METHOD_TOOL_SERVER_EVICT: Final = "tool_server.evict"
METHOD_SERVE: Final = "serve"
METHOD_SESSION_BIND: Final = "session.bind"
METHOD_SESSION_UNBIND: Final = "session.unbind"

#: All 35 method strings, in the order the protocol lists them.
METHODS: Final[tuple[str, ...]] = (
    METHOD_SESSION_OPEN,
    METHOD_SESSION_CLOSE,
    METHOD_SESSION_BIND_SERVER,
    METHOD_SESSION_UNBIND_SERVER,
    METHOD_SESSION_ATTACH_SERVER,
    METHOD_TOOLS_LIST,
    METHOD_TOOLS_SEARCH,
    METHOD_TOOL_CALL,
    METHOD_TOOL_CANCEL,
    METHOD_TOOL_NOTIFY,
    METHOD_SYSTEM_NOTIFY,
    METHOD_SUBSCRIBE_NOTIFICATIONS,
    METHOD_UNSUBSCRIBE_NOTIFICATIONS,
    METHOD_HOOK,
    METHOD_HELLO,
    METHOD_HELLO_ACK,
    METHOD_PING,
    METHOD_PONG,
    METHOD_TOOL_CALL_PROGRESS,
    METHOD_TOOL_NOTIFICATION,
    METHOD_HOOK_REPLY,
    METHOD_TRACES_DONATE,
    METHOD_LOGS_DONATE,
    METHOD_METRICS_DONATE,
    METHOD_TOOL_CALL_REQUEST,
    METHOD_TOOLS_CHANGED,
    METHOD_SUBSCRIBE_ACK,
    METHOD_UNSUBSCRIBE_ACK,
    METHOD_SERVERS_LIST,
    METHOD_TOOL_SERVER_STATUS,
    METHOD_TOOL_SERVER_GET_STATUS,
    METHOD_TOOL_SERVER_EVICT,
    METHOD_SERVE,
    METHOD_SESSION_BIND,
    METHOD_SESSION_UNBIND,
)
