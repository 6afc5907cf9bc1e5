"""Shared test configuration: Hypothesis profiles and the conformance data."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

#: The conformance data the tests load, kept inside the repository so that a
#: fresh clone with nothing beside it runs the suite.
CONFORMANCE = Path(__file__).resolve().parent / "conformance"

# "ci" is derandomized so a red run is reproducible; it runs enough examples to
# matter while keeping the whole suite within its time budget on two cores.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
