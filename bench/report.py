"""What every bench prints, the same way: a figure, the baseline it was measured against in the
same run, the target, and ``MISSED`` where the figure misses its target.

Targets are never assertions: a bench that misses prints MISSED and still exits 0 (speed on a
shared machine is evidence, not a gate). ``--quick`` (or ``BENCH_QUICK=1``) runs few rounds so
CI can run every bench and a broken one cannot rot unnoticed; quick figures are too noisy to
judge, so they are printed without a verdict. ``BENCH_ROUNDS`` overrides every round count.
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

__all__ = ["QUICK", "judge", "load", "median", "p90", "rounds", "spread", "timed"]

QUICK = "--quick" in sys.argv[1:] or os.environ.get("BENCH_QUICK") == "1"


def scratch_dir(prefix: str) -> Path:
    """A folder of the bench's own, removed when the bench process exits however ``main`` ends
    (a bench's scratch holds checkouts and 200 MB installs: left behind, they pile up in /tmp)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


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


def spread(values: Sequence[float], unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    """``median M (min A, max B, n N)``: one sample is not a figure, so say how far they spread."""
    def fmt(x: float) -> str:
        return f"{x * scale:.{digits}f}{unit}"

    return (f"median {fmt(median(values))} (min {fmt(min(values))}, max {fmt(max(values))}, "
            f"n {len(values)})")


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one await of ``fn()`` takes."""
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def judge(what: str, figure: str, target: str, met: bool) -> bool:
    """Print one figure against its target; returns ``met`` (quick runs are not judged)."""
    verdict = "quick, not judged" if QUICK else "ok" if met else "MISSED"
    print(f"  {what}: {figure}  [target {target}: {verdict}]")
    return met


def load() -> str:
    """The machine's load, for the record beside a run's figures (they move with it)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"
