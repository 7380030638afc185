"""What every bench prints, the same way: a figure, the baseline it was measured against in the
same run, the target, and ``MISSED`` where the figure misses its target.

Targets are never assertions: a bench that misses prints MISSED and still exits 0 (speed on a
shared machine is evidence, not a gate). ``--quick`` (or ``BENCH_QUICK=1``) runs few rounds so
CI can run every bench and a broken one cannot rot unnoticed; quick figures are too noisy to
judge, so they are printed without a verdict.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Sequence

__all__ = ["QUICK", "judge", "median", "p90", "rounds"]

QUICK = "--quick" in sys.argv[1:] or os.environ.get("BENCH_QUICK") == "1"


def rounds(full: int, quick: int = 3) -> int:
    """How many rounds to run: ``BENCH_ROUNDS`` when set, else full or quick."""
    given = os.environ.get("BENCH_ROUNDS")
    if given:
        return int(given)
    return quick if QUICK else full


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def judge(what: str, figure: str, target: str, met: bool) -> bool:
    """Print one figure against its target; returns ``met`` (quick runs are not judged)."""
    verdict = "quick, not judged" if QUICK else "ok" if met else "MISSED"
    print(f"  {what}: {figure}  [target {target}: {verdict}]")
    return met
