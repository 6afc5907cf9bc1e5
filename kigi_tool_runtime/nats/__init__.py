"""Tool calls and their frames over NATS JetStream: workers on any number of
hosts share a work queue of calls; each call's frames (the stdio wire's bytes)
go to a per-call subject that any number of followers replay or resume.

Needs the ``nats`` extra: ``pip install 'kigi-tool-runtime[nats]'``.
"""

try:
    import nats as _nats  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "kigi_tool_runtime.nats needs nats-py: install the 'nats' extra,"
        " pip install 'kigi-tool-runtime[nats]'"
    ) from exc

from ._caller import LEASE_S, SERVES_WAIT_S, Follower, NatsCall, NatsClient
from ._jetstream import (
    CALLS_MAX_AGE_S,
    FRAMES_MAX_AGE_S,
    FRAMES_MAX_BYTES,
    JetStreamLimits,
    connect,
    ensure_jetstream,
    find_nats_server,
)
from ._protocol import (
    DEFAULT_PREFIX,
    CallLedger,
    Claim,
    Done,
    FollowPosition,
    Heartbeat,
    LedgerEvent,
    Subjects,
)
from ._worker import (
    ACK_WAIT_S,
    BATCH_BYTES,
    CALL_QUEUE_BYTES,
    DEFAULT_MAX_IN_FLIGHT,
    HEARTBEAT_S,
    STOP_BOUND_S,
    Worker,
    WorkerStats,
)

__all__: tuple[str, ...] = (
    "ACK_WAIT_S",
    "BATCH_BYTES",
    "CALLS_MAX_AGE_S",
    "CALL_QUEUE_BYTES",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_PREFIX",
    "FRAMES_MAX_AGE_S",
    "FRAMES_MAX_BYTES",
    "HEARTBEAT_S",
    "LEASE_S",
    "SERVES_WAIT_S",
    "STOP_BOUND_S",
    "CallLedger",
    "Claim",
    "Done",
    "FollowPosition",
    "Follower",
    "Heartbeat",
    "JetStreamLimits",
    "LedgerEvent",
    "NatsCall",
    "NatsClient",
    "Subjects",
    "Worker",
    "WorkerStats",
    "connect",
    "ensure_jetstream",
    "find_nats_server",
)
