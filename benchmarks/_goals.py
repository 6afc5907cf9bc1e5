"""The goals a benchmark states, which of them this run met, and ``--check``.

Each benchmark records its goals with :meth:`Goals.record` as it measures, then
ends with :meth:`Goals.finish`: that prints every goal as met or missed and
returns the exit status, non-zero only under ``--check`` when a goal was
missed (figures from a loaded machine vary, so a plain run only reports).
"""

from __future__ import annotations

import argparse
import math


def add_check_flag(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the ``--check`` flag."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a goal is missed (default: report only, exit 0)",
    )


class Goals:
    """The goals of one run, in the order they were recorded."""

    def __init__(self) -> None:
        self._results: list[tuple[str, bool | None, str]] = []

    def record(self, goal: str, figure: float, target: float, *, at_most: bool = False) -> bool:
        """Record ``goal``: met when ``figure >= target`` (``<=`` with
        ``at_most``). A figure that could not be measured (NaN) is neither met
        nor missed: it is reported as not measured."""
        if math.isnan(figure):
            self._results.append((goal, None, "not measured"))
            return False
        met = figure <= target if at_most else figure >= target
        bound = "<=" if at_most else ">="
        self._results.append((goal, met, f"{figure:.2f} (goal {bound} {target:g})"))
        return met

    def finish(self, check: bool) -> int:
        """Print which goals were met; return 1 under ``check`` when one was
        missed, else 0."""
        missed = [goal for goal, met, _ in self._results if met is False]
        met_count = sum(met is True for _, met, _ in self._results)
        print(f"\ngoals: {met_count} of {len(self._results)} met")
        for goal, met, detail in self._results:
            verdict = {True: "met", False: "MISSED", None: "n/a"}[met]
            print(f"  {verdict:>6}  {goal}: {detail}")
        return 1 if check and missed else 0
