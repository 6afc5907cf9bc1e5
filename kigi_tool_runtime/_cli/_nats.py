"""The ``--nats`` options of ``kigi-stream serve`` and ``follow``: the CLI's only
contact with the optional ``nats`` extra, imported lazily so the core CLI never
needs it.

- ``serve --nats URL [--nats-prefix P] [--max-in-flight N] [--stop-bound S]
  [--connect-timeout S]``: a worker that runs
  the built-in tools (or ``--tools``) for their calls from the JetStream work
  queue (each tool's calls go only to workers that serve it). It checks that the
  server has JetStream before it says it takes calls (exit 2 saying "JetStream
  is not enabled on URL" when not). SIGINT, SIGTERM or SIGHUP cancels its calls
  (their ends are written), then it exits 128 + N; a second signal, or
  its stop bound passing (``--stop-bound``, the worker's ``STOP_BOUND_S`` by
  default: a server that takes nothing), exits at once (128 + N of the first),
  the ends not yet written left unwritten. A server that does not answer within
  ``--connect-timeout`` (``FIRST_CONNECT_S`` by default) is exit 2 saying it
  cannot connect (its JetStream is waited for ``JETSTREAM_CHECK_S``, or that
  timeout if shorter). Every exit says why on stderr: the signal, or the error
  (exit 1), never a traceback.
- ``follow --nats URL --call ID [--from-seq N] [--nats-prefix P]``: print a call's
  reassembled text from the frames stream, from the start or from stream
  sequence N, until the call ends; anomalies and losses on stderr, then the
  call's outcome and the sequence to resume from. A call with no message yet
  is waited for, said once on stderr after a moment. Exit 0 when the call ended
  with a result, 1 when it ended with an error (or the server refused, e.g.
  no frames stream under that prefix), 130 on Ctrl-C.

Both spell the prefix option ``--nats-prefix``; ``--prefix`` is kept as its alias.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, Final

from .._consumer._loss import DEFAULT_GAP_MARKER
from .._scope import TaskScope
from .._tools._tool import Tool
from .._transport._client import RemoteToolError
from ._signals import StopSignals

__all__ = ()


class NatsUsageError(Exception):
    """Raised when a ``--nats`` command cannot start: the extra is missing, an
    option is missing or contradicts another, or the server cannot be reached."""


#: Seconds ``follow --nats`` waits for a first message of the call before it
#: says on stderr that there is none yet (a call not submitted yet, or a
#: mistyped id); it goes on waiting.
WAITING_NOTE_S: Final = 2.0


#: Seconds past the worker's own stop bound (``Worker`` Rule 5, ``--stop-bound``)
#: after which ``serve --nats`` exits however far it got:
#: closing its connection to a server that takes nothing must not hang it.
_EXIT_MARGIN_S: Final = 2.0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


#: The largest ``--stop-bound`` and ``--connect-timeout``, in seconds (a day).
_MAX_BOUND_S: Final = 86_400


def _seconds(text: str) -> float:
    """A bound in seconds: a positive number, at most :data:`_MAX_BOUND_S`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= _MAX_BOUND_S:  # NaN fails both
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, at most {_MAX_BOUND_S} (a day), got {text}"
        )
    return value


#: The largest stream sequence JetStream has (an unsigned 64-bit number).
_MAX_JETSTREAM_SEQ: Final = 2**64 - 1


def _jetstream_seq(text: str) -> int:
    value = _positive(text)
    if value > _MAX_JETSTREAM_SEQ:
        raise argparse.ArgumentTypeError(f"must be at most {_MAX_JETSTREAM_SEQ}, got {value}")
    return value


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    """``serve``'s NATS options."""
    group = serve.add_argument_group("over NATS JetStream (the 'nats' extra)")
    group.add_argument("--nats", metavar="URL", help="take calls from this NATS server's queue")
    _add_prefix(group)
    group.add_argument(
        "--max-in-flight", type=_positive, default=4, help="calls run at once (default 4)"
    )
    # Their defaults are the library's (imported only with the extra): None
    # here, resolved by serve_bounds().
    group.add_argument(
        "--stop-bound",
        type=_seconds,
        metavar="S",
        help="seconds a stop signal gives the calls' ends to be written before the worker"
        " exits all the same (default 20)",
    )
    group.add_argument(
        "--connect-timeout",
        type=_seconds,
        metavar="S",
        help="seconds the server has to answer at start before exit 2 (default 5;"
        " its JetStream has at most 3 of them)",
    )


def add_follow_options(follow: argparse.ArgumentParser) -> None:
    """``follow``'s NATS options (then FILE is not given)."""
    group = follow.add_argument_group("over NATS JetStream (the 'nats' extra)")
    group.add_argument("--nats", metavar="URL", help="follow a call on this NATS server")
    group.add_argument("--call", metavar="ID", help="the call to follow (with --nats)")
    group.add_argument(
        "--from-seq", type=_jetstream_seq, help="resume at this stream sequence (with --nats)"
    )
    _add_prefix(group)


def _add_prefix(group: Any) -> None:
    """The one prefix option of every ``--nats`` command, ``--prefix`` its alias."""
    group.add_argument(
        "--nats-prefix",
        "--prefix",
        dest="nats_prefix",
        default="kigi",
        metavar="P",
        help="subject prefix (default kigi; --prefix is an alias)",
    )


def _load() -> Any:
    try:
        from .. import nats
    except ImportError as exc:
        raise NatsUsageError(str(exc)) from None
    return nats


async def _connect(nats: Any, url: str, first_connect_s: float) -> Any:
    try:
        return await nats.connect(url, first_connect_s=first_connect_s)
    except Exception as exc:  # the client raises several unrelated types here
        raise NatsUsageError(f"cannot connect to {url}: {str(exc) or repr(exc)}") from None


def serve_bounds(args: argparse.Namespace) -> tuple[float, float]:
    """``serve --nats``'s stop bound and connect timeout, in seconds: the
    options', else the library's defaults (``Worker``'s ``STOP_BOUND_S``,
    ``connect``'s ``FIRST_CONNECT_S``)."""
    from ..nats._jetstream import FIRST_CONNECT_S
    from ..nats._worker import STOP_BOUND_S

    stop_bound = STOP_BOUND_S if args.stop_bound is None else args.stop_bound
    connect_timeout = FIRST_CONNECT_S if args.connect_timeout is None else args.connect_timeout
    return stop_bound, connect_timeout


def serve_nats(args: argparse.Namespace, tools: Sequence[Tool[Any]] | None = None) -> int:
    """Run a worker of ``tools`` (default: the shell tool) until a stop signal.

    Raises:
        NatsUsageError: the ``nats`` extra is missing, an option is missing, or
            the server cannot be reached.
    """
    nats = _load()

    from .._tools._shell import ShellTool

    stop_bound, connect_timeout = serve_bounds(args)

    try:
        nats.Subjects(args.nats_prefix)
    except ValueError as exc:
        raise NatsUsageError(str(exc)) from None

    def say(line: str) -> None:
        sys.stderr.write(f"kigi-stream serve: {line}\n")
        sys.stderr.flush()

    async def main() -> int:
        worker: Any = None
        # A cancel scope around connecting and the JetStream check: a first
        # signal then ends it at once (no task of its own to own).
        starting: asyncio.Timeout | None = None
        # Once the worker has returned and said how it ended: the status to exit
        # with, should closing the connection hang until the backstop.
        closing_status: int | None = None

        def on_signal(number: int) -> None:
            if stops.count == 1:
                if worker is not None:
                    worker.stop()
                elif starting is not None:
                    with contextlib.suppress(RuntimeError):  # not entered yet, or left
                        starting.reschedule(asyncio.get_running_loop().time())
                asyncio.get_running_loop().call_later(stop_bound + _EXIT_MARGIN_S, exit_now, None)
                return
            exit_now(number)

        def exit_now(second: int | None) -> None:
            # A second signal, or the stop bound passed: the ends still being
            # written (to a server that may take nothing for minutes: each
            # publication is retried for PUBLISH_RETRY_S) are left unwritten.
            # The commands were stopped by the first signal; what is left of
            # their groups the lifeline kills as this process exits (`_process`).
            if closing_status is not None:
                # How it ended was said already: only the closing hung.
                when = "in time" if second is None else f"before {_signal_name(second)}"
                say(f"the connection to {args.nats} did not close {when}; exiting")
                os._exit(closing_status)
            if second is not None:
                say_unwritten(f"stopped at once by a second signal ({_signal_name(second)})")
            else:
                say_unwritten()
            os._exit(stops.exit_status())

        def say_unwritten(why: str | None = None, calls: str = "the calls") -> None:
            # One wording whether the backstop or the worker's bound (its Rule 5) ends it.
            if why is None:
                why = f"did not stop within {stop_bound:g} s of {_signal_name(stops.first)}"
            say(f"{why}; the ends of {calls} still being written are left to the callers' leases")

        with StopSignals(on_signal, ends_process=True) as stops:
            starting = connecting = asyncio.timeout(None)
            try:
                async with connecting:
                    connection = await _connect(nats, args.nats, connect_timeout)
            except TimeoutError:
                if not connecting.expired():
                    raise
                say(f"stopped by {_signal_name(stops.first)} while connecting")
                return stops.exit_status(1)
            try:
                starting = checking = asyncio.timeout(None)
                try:
                    async with checking:
                        await _check_jetstream(connection, args.nats, connect_timeout)
                except TimeoutError:
                    if not checking.expired():
                        raise
                    say(f"stopped by {_signal_name(stops.first)} while starting")
                    return stops.exit_status(1)
                starting = None
                served = [ShellTool()] if tools is None else tools
                try:
                    worker = nats.Worker(
                        connection,
                        served,
                        prefix=args.nats_prefix,
                        max_in_flight=args.max_in_flight,
                        stop_bound=stop_bound,
                    )
                except ValueError as exc:  # a tool id that cannot name its consumer
                    say(f"error: {exc}")
                    closing_status = 2
                    return 2
                say(
                    f"{worker.worker_id} takes calls from {args.nats}"
                    f" (prefix {args.nats_prefix}, tools {', '.join(t.id for t in served)},"
                    f" {args.max_in_flight} at once)"
                )
                try:
                    stats = await worker.run()
                except Exception as exc:  # every exit says why (nats-py raises many types)
                    say(f"error: {_describe(exc)}; {worker.worker_id} stopped")
                    closing_status = 1
                    return 1
                # Said before the connection is closed, which a server that
                # takes nothing can hang until the backstop ends the process.
                why = (
                    "stopped"
                    if stops.first is None
                    else f"stopped by {_signal_name(stops.first)}, its calls cancelled"
                )
                say(
                    f"{worker.worker_id} {why}: {stats.calls_run} call(s) run,"
                    f" {stats.frames_published} frame(s) published"
                )
                if stats.ends_unwritten:
                    say_unwritten(calls=f"{stats.ends_unwritten} call(s)")
                closing_status = stops.exit_status()
            finally:
                with contextlib.suppress(Exception):
                    await connection.drain()
        return stops.exit_status()

    return asyncio.run(main())


#: Seconds ``serve --nats`` gives a server's JetStream to answer (it may be
#: starting) before it says JetStream is not enabled; a shorter
#: ``--connect-timeout`` bounds it too.
JETSTREAM_CHECK_S: Final = 3.0


async def _check_jetstream(connection: Any, url: str, connect_timeout: float) -> None:
    """Raise :class:`NatsUsageError` unless the server at ``url`` has JetStream
    (asked for :data:`JETSTREAM_CHECK_S` seconds, or ``connect_timeout`` if
    shorter, so a server still starting is waited for)."""
    import nats.errors
    import nats.js.errors

    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(JETSTREAM_CHECK_S, connect_timeout)
    while True:
        try:
            await connection.jetstream().account_info()
            return
        except (
            nats.js.errors.ServiceUnavailableError,
            nats.errors.NoRespondersError,
            nats.errors.TimeoutError,
        ):
            pass  # no JetStream (yet)
        except nats.js.errors.APIError as exc:
            if exc.code != 503:
                raise NatsUsageError(f"JetStream on {url} refused: {_describe(exc)}") from None
        if loop.time() >= deadline:
            with contextlib.suppress(Exception):
                await connection.close()
            raise NatsUsageError(
                f"JetStream is not enabled on {url} (start nats-server with -js)"
            ) from None
        await asyncio.sleep(0.2)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):  # the worker's tasks' failures (its Rule 9)
        return "; ".join(_describe(error) for error in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else repr(exc)


def _signal_name(number: int | None) -> str:
    import signal

    if number is None:
        return "a signal"
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def follow_nats(args: argparse.Namespace) -> int:
    """Follow one call's frames until it ends.

    Raises:
        NatsUsageError: the ``nats`` extra is missing, an option is missing, or
            the server cannot be reached.
    """
    if not args.call:
        raise NatsUsageError("--nats needs --call ID")
    if args.file is not None:
        raise NatsUsageError("give a FILE or --nats URL --call ID, not both")
    nats = _load()
    import nats.errors as nats_errors

    from ..nats._caller import Follower
    from ..nats._jetstream import FIRST_CONNECT_S
    from ..nats._protocol import Subjects, check_call_id

    try:
        check_call_id(args.call)
        Subjects(args.nats_prefix)
    except ValueError as exc:
        raise NatsUsageError(str(exc)) from None
    position = None if args.from_seq is None else nats.FollowPosition(args.from_seq, None)
    out, err = sys.stdout.buffer, sys.stderr

    async def say_waiting(follower: Any) -> None:
        start = follower.position.jetstream_seq
        await asyncio.sleep(WAITING_NOTE_S)
        if follower.position.jetstream_seq == start and not follower.ledger.ended:
            err.write(
                f"kigi-stream follow: nothing of call {args.call} at or after stream sequence"
                f" {start} yet; waiting for it (Ctrl-C to stop)\n"
            )
            err.flush()

    async def main() -> int:
        connection = await _connect(nats, args.nats, FIRST_CONNECT_S)
        follower = Follower(connection, args.call, prefix=args.nats_prefix, position=position)
        try:
            # The note is the follow's: it ends with it, and its failure is raised.
            async with follower, TaskScope() as tasks:
                tasks.start(say_waiting(follower), name="kigi follow note")
                for first, last in follower.ledger.discarded:
                    err.write(
                        f"kigi-stream follow: the stream no longer holds sequences {first}-{last}"
                        " (discarded by its limits); whatever of this call was there is lost\n"
                    )
                async for item in follower:
                    text = item.appended.render(DEFAULT_GAP_MARKER)
                    if text:
                        out.write(text.encode("utf-8", "surrogateescape"))
                        out.flush()
                    for anomaly in item.appended.anomalies:
                        err.write(f"kigi-stream follow: {anomaly.kind}: {anomaly.detail}\n")
        except nats_errors.Error as exc:
            err.write(f"kigi-stream follow: error: {str(exc) or repr(exc)}\n")
            return 1
        finally:
            err.write(
                f"kigi-stream follow: stopped at stream sequence {follower.position.jetstream_seq}"
                f" (resume with --from-seq {follower.position.jetstream_seq})\n"
            )
            with contextlib.suppress(Exception):
                await connection.drain()
        for report in follower.reassembler.reports():
            err.write(f"kigi-stream follow: {report.summary()}\n")
        outcome = follower.outcome
        if isinstance(outcome, RemoteToolError):
            err.write(f"kigi-stream follow: the call failed: {outcome.message}\n")
            return 1
        err.write("kigi-stream follow: the call ended with a result\n")
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
