"""Shared test configuration: Hypothesis profiles and the conformance data."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

#: ``../shared/conformance`` relative to the project root, as CI lays it out.
CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance"

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
