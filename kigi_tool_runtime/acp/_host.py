"""``AcpToolCalls``: kigi tools run as ACP tool calls by an agent on the ACP
SDK's ``AgentSideConnection``, the thin asyncio driver over the served-call
core (:class:`ServedCall`) and the sans-IO :class:`ToolCallMapper`.

Invariants:

Rule 1. A call's updates are sent in order, each awaited before the next frame
        is taken: a client that reads slowly pauses the tool (the core's Rule 2),
        whose bounded tail reports what it skipped as a gap, marked and
        resynchronised (the mapper's Rules 2, 3).
Rule 2. :meth:`AcpToolCalls.cancel` (what an agent's ``session/cancel`` handler
        calls) cancels the session's running calls: each stops its tool (the
        shell tool's whole process group), still sends its last update
        (status ``failed``, the ``cancelled`` error in its text) and returns
        its :class:`CallEnd`; :func:`is_cancelled` tells the agent to answer
        its prompt with ``stopReason: "cancelled"``.
Rule 3. A call whose task is cancelled (the agent cancelled its prompt task)
        stops its tool the same way, sends the same last update when the
        connection still takes it, and raises ``CancelledError`` on.
Rule 4. A call ends when its connection does: an update being sent when the
        client went away (its end of the pipe closed) is given up once the
        connection says it is gone, checked every
        :data:`CONNECTION_CHECK_S` seconds, and the call stops its tool and
        raises ``ConnectionError``, the send given up cancelled and awaited
        first (each send is its call's, and its failure is raised from the
        call as itself). (The SDK's send to a client that died
        while the pipe was full never returns on its own.) The SDK keeps that
        state privately, read only in ``_privates``; where it cannot be read,
        an update not sent within :data:`UNSEEN_SEND_S` is given up the same
        way.
Rule 5. A call whose task is cancelled while an update is being sent raises
        ``CancelledError`` (Rule 3) whatever the send did: the send is
        cancelled and awaited, and its failure, when it had one (the SDK's
        ``close`` cancels the handlers as it fails their sends), is not
        raised over the cancellation, as an exception group that would skip
        the last update and reach the SDK as the handler's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shlex
from collections.abc import Mapping
from typing import Any, Final, Protocol

from acp.schema import ClientCapabilities, ToolCallProgress, ToolCallStart

from .._call._heartbeat import HEARTBEAT_S, Beat
from .._call._outcome import CallEnd
from .._call._served import ServedCall
from .._producer._chunk import cap_of
from .._scope import TaskScope
from .._tools._errors import ToolError, ToolErrorKind
from .._tools._shell import ShellTool
from .._tools._tool import Tool
from .._upstream import UNSEEN
from ._mapping import DEFAULT_TAIL_BYTES, LiveOutput, Pacing, ToolCallMapper, ToolKind, Update
from ._privates import connection_gone

__all__ = ("AcpToolCalls", "is_cancelled", "run_tool_call")

#: How long a cancelled task's call may take to send its last update: the
#: connection is usually fine and it goes at once; a stuck one must not hold
#: the cancel up.
LAST_UPDATE_WAIT_S: Final = 5.0

#: How often an update still being sent checks whether its connection is gone.
CONNECTION_CHECK_S: Final = 0.25

#: How long an update may take to be sent when the connection's state cannot
#: be read (Rule 4; ``_privates`` Rule 2).
UNSEEN_SEND_S: Final = 60.0

_ids = itertools.count(1)


class SessionUpdates(Protocol):
    """What a call needs of the connection: the SDK's ``AgentSideConnection``
    (or anything that sends ``session/update`` the same way)."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None: ...


def tool_title(tool: Tool[Any], arguments: Any) -> str:
    """A call's title: the shell tool's command (an argv joined as a shell
    would read it), else the tool's id."""
    if isinstance(arguments, Mapping):
        command = arguments.get("command")
    else:
        command = getattr(arguments, "command", None)
    if isinstance(tool, ShellTool) and isinstance(command, str):
        return command
    if isinstance(tool, ShellTool) and isinstance(command, list | tuple):
        return shlex.join(str(part) for part in command)
    return tool.id


def is_cancelled(end: CallEnd) -> bool:
    """Whether the call ended because it was cancelled."""
    error = end.error
    return error is not None and error.kind is ToolErrorKind.CANCELLED


class AcpToolCalls:
    """Run kigi tools as ACP tool calls on one connection (see the module's rules).

    ``connection`` is the agent's ``AgentSideConnection``;
    ``client_capabilities`` what the client declared in ``initialize`` (set it
    later with :meth:`negotiated`), which picks the :class:`LiveOutput`;
    ``tail_bytes`` and ``pacing`` bound the replacements; ``heartbeat_s`` is
    the silence after which a call sends a heartbeat update (a
    ``tool_call_update`` with ``_meta["dev.kigi/heartbeat"]``, again every
    ``heartbeat_s`` of silence; 0: never).

    Raises:
        ValueError: ``heartbeat_s`` is negative.
    """

    def __init__(
        self,
        connection: SessionUpdates,
        *,
        client_capabilities: ClientCapabilities | Mapping[str, Any] | None = None,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        pacing: Pacing | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        if not heartbeat_s >= 0:
            raise ValueError(f"heartbeat_s must be >= 0 seconds, got {heartbeat_s}")
        self._heartbeat_s = heartbeat_s
        self._connection = connection
        self._output = LiveOutput.of(client_capabilities)
        self._tail_bytes = tail_bytes
        self._pacing = pacing or Pacing()
        self._running: dict[str, set[ServedCall]] = {}

    @property
    def output(self) -> LiveOutput:
        """How the client takes live output."""
        return self._output

    def negotiated(
        self, client_capabilities: ClientCapabilities | Mapping[str, Any] | None
    ) -> None:
        """Take the capabilities the client declared (from ``initialize``)."""
        self._output = LiveOutput.of(client_capabilities)

    def running(self, session_id: str) -> int:
        """How many calls of ``session_id`` are running."""
        return len(self._running.get(session_id, ()))

    def cancel(self, session_id: str) -> int:
        """Cancel the running calls of ``session_id`` (Rule 2); how many."""
        calls = self._running.get(session_id, set())
        for call in calls:
            call.cancel()
        return len(calls)

    async def run(
        self,
        session_id: str,
        tool: Tool[Any],
        arguments: Any,
        *,
        tool_call_id: str | None = None,
        title: str | None = None,
        kind: ToolKind | None = None,
        timeout_ms: float | None = None,
    ) -> CallEnd:
        """Run ``tool`` with ``arguments`` as one tool call of ``session_id``
        and say how it ended. ``title`` defaults to the shell tool's command
        (else the tool's id), ``kind`` to ``execute`` for the shell tool (else
        ``other``), ``timeout_ms`` to the tool's own deadline. Bad arguments, a
        failure, a deadline and a cancel end the call ``failed``; they are
        returned, not raised.

        Raises:
            ValueError: ``tail_bytes`` cannot hold one of the tool's frames, or
                ``timeout_ms`` is negative.
            ConnectionError: the connection closed (the tool is stopped).
        """
        call_id = tool_call_id if tool_call_id is not None else f"kigi-{next(_ids)}"
        spec = tool.capabilities.streaming
        cap = cap_of(spec.max_delta_bytes) if spec is not None else 0
        mapper = ToolCallMapper(
            call_id,
            self._output,
            tail_bytes=self._tail_bytes,
            max_delta_bytes=cap,
            pacing=self._pacing,
        )
        if kind is None:
            kind = "execute" if isinstance(tool, ShellTool) else "other"
        loop = asyncio.get_running_loop()
        call = ServedCall(
            tool, arguments, call_id=call_id, timeout_ms=timeout_ms, heartbeat_s=self._heartbeat_s
        )
        # Registered before the start goes out, so a cancel that comes while it
        # is sent still reaches the call (it then ends at once).
        calls = self._running.setdefault(session_id, set())
        calls.add(call)
        async with call:
            try:
                start = mapper.start(title or tool_title(tool, arguments), kind, arguments)
                await self._send(session_id, start)
                async for delta in call.events():
                    if isinstance(delta, Beat):
                        await self._send(session_id, mapper.heartbeat(delta))
                        continue
                    update = mapper.frame(delta, loop.time())
                    if update is not None:
                        await self._send(session_id, update)
            except asyncio.CancelledError:
                await call.aclose()
                await self._last_words(session_id, mapper, call, loop.time())
                raise
            finally:
                calls.discard(call)
                if not calls:
                    self._running.pop(session_id, None)
        end = call.end
        for update in mapper.finish(end, loop.time()):
            await self._send(session_id, update)
        return end

    async def _last_words(
        self, session_id: str, mapper: ToolCallMapper, call: ServedCall, now: float
    ) -> None:
        """Rule 3: the last update of a call whose task was cancelled."""
        live = call.live
        error = ToolError(ToolErrorKind.CANCELLED, f"call {call.call_id!r} was cancelled")
        end = CallEnd.of(
            call.call_id,
            call.tool.id,
            error.with_tool_id(call.tool.id),
            live.report(),
            frames=live.frames,
        )
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(LAST_UPDATE_WAIT_S):
                for update in mapper.finish(end, now):
                    await self._send(session_id, update)

    async def _send(self, session_id: str, update: Update) -> None:
        model: ToolCallStart | ToolCallProgress
        if update["sessionUpdate"] == "tool_call":
            model = ToolCallStart.model_validate(update)
        else:
            model = ToolCallProgress.model_validate(update)
        connection = self._connection
        loop = asyncio.get_running_loop()
        given_up = loop.time() + UNSEEN_SEND_S
        # The send is this method's: it has ended (awaited, cancelled if the
        # connection went) when this returns, and its failure is raised here.
        async with TaskScope() as tasks:
            send = tasks.start(connection.session_update(session_id=session_id, update=model))
            try:
                while not send.done():
                    await asyncio.wait((send,), timeout=CONNECTION_CHECK_S)
                    if send.done():
                        break
                    gone = connection_gone(connection)
                    if gone is UNSEEN:
                        gone = loop.time() > given_up
                    if gone:
                        raise ConnectionError("the ACP connection closed while an update was sent")
            except asyncio.CancelledError:
                # Rule 5: the cancellation is raised, not the send's failure.
                send.cancel()
                await asyncio.wait((send,))
                if not send.cancelled():
                    with contextlib.suppress(Exception):
                        tasks.result(send)
                raise
            tasks.result(send)  # its failure raised as itself


async def run_tool_call(
    connection: SessionUpdates,
    session_id: str,
    tool: Tool[Any],
    arguments: Any,
    *,
    client_capabilities: ClientCapabilities | Mapping[str, Any] | None = None,
    tool_call_id: str | None = None,
    title: str | None = None,
    kind: ToolKind | None = None,
    timeout_ms: float | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    pacing: Pacing | None = None,
) -> CallEnd:
    """Run one tool call (:meth:`AcpToolCalls.run`) on ``connection``; to
    cancel it from ``session/cancel``, keep an :class:`AcpToolCalls` instead,
    or cancel the task running this (Rule 3).

    Raises:
        ValueError: ``tail_bytes`` cannot hold one of the tool's frames.
        ConnectionError: the connection closed (the tool is stopped).
    """
    calls = AcpToolCalls(
        connection, client_capabilities=client_capabilities, tail_bytes=tail_bytes, pacing=pacing
    )
    return await calls.run(
        session_id,
        tool,
        arguments,
        tool_call_id=tool_call_id,
        title=title,
        kind=kind,
        timeout_ms=timeout_ms,
    )
