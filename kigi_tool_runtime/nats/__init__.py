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

from ._caller import NatsCall, NatsClient
from ._jetstream import JetStreamLimits, connect, ensure_jetstream, find_nats_server
from ._protocol import FollowPosition, Subjects
from ._worker import Worker

__all__: tuple[str, ...] = (
    "FollowPosition",
    "JetStreamLimits",
    "NatsCall",
    "NatsClient",
    "Subjects",
    "Worker",
    "connect",
    "ensure_jetstream",
    "find_nats_server",
)
