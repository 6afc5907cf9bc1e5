"""Testing helpers for the kigi tool runtime (imports Hypothesis).

Hypothesis strategies for byte sources, write/tick schedules, caps, tail sizes,
streaming specs and payloads. The runtime itself never imports this package.
"""

from ._strategies import (
    ScheduleStep,
    byte_sources,
    caps,
    partial_payloads,
    schedules,
    streaming_specs,
    tail_sizes,
    utf8_text_sources,
)

__all__ = (
    "ScheduleStep",
    "byte_sources",
    "caps",
    "partial_payloads",
    "schedules",
    "streaming_specs",
    "tail_sizes",
    "utf8_text_sources",
)
