"""Benchmark (not a test): apply_patch end to end through a session.

1. A 10 000-line file with 50 hunks: parse + stat + read + match + one commit, median of N runs.
   Target: <= 50 ms median.
2. The same 50-hunk patch shape on 1k / 10k / 100k-line files, to show that time grows
   linearly with file size (ratios ~10x per 10x lines), end to end and for the pure applier.

Uses a DockerSession when an engine and the sandbox image are there, else a LocalSession.
Figures through bench/report.py (MISSED where a target is missed); ``--quick`` for CI.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, median, rounds
from sandbox.base import Session
from sandbox.patch import v4a
from sandbox.patch.apply import apply_operations
from sandloop.verdict import Decision, Verdict

HUNKS = 50
RUNS = rounds(15, quick=2)
SCALING_RUNS = rounds(7, quick=1)
#: Linear growth is ~10× per 10× lines (less, end to end, where fixed costs weigh); quadratic
#: would be ~100×.
GROWTH_TARGET = 20.0
PATH = "big.py"


async def _allow(path: str, kind: str) -> Verdict:
    return Verdict(Decision.ALLOW, "benchmark")


def make_case(lines: int, hunks: int = HUNKS) -> tuple[bytes, str]:
    """A file of unique lines and a V4A diff with ``hunks`` evenly spread 3-context hunks."""
    text = [f"    value_{i} = compute({i}, {i * 7 % 13})  # line {i}" for i in range(lines)]
    step = lines // hunks
    diff: list[str] = []
    for k in range(hunks):
        at = k * step + step // 2
        diff.append("@@")
        diff += [f" {line}" for line in text[at - 3 : at]]
        diff.append(f"-{text[at]}")
        diff += [f"+    value_{at} = compute_v2({at})", f"+    checked_{at} = True"]
        diff += [f" {line}" for line in text[at + 1 : at + 4]]
    return ("\n".join(text) + "\n").encode(), "\n".join(diff) + "\n"


async def timed(fn: Callable[[], Awaitable[object]], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return median(samples)


async def open_session(root: Path) -> tuple[Session, str]:
    try:
        from sandbox.docker import DockerSession

        return await DockerSession.create(root), "DockerSession"
    except Exception as exc:  # no engine or no image: the host back-end still measures the code
        from sandbox.local import LocalSession

        print(f"(no DockerSession: {exc}; using LocalSession)")
        return await LocalSession.create(root), "LocalSession"


class EndToEnd:
    """Resets the file through the session, then times parse + apply_operations only."""

    def __init__(self, session: Session, original: bytes, diff: str) -> None:
        self.session, self.original, self.diff = session, original, diff
        self.elapsed: list[float] = []

    async def __call__(self) -> None:
        await self.session.write_file(PATH, self.original)  # the reset is not measured
        t0 = time.perf_counter()
        op = v4a.from_api("update_file", PATH, self.diff)
        await apply_operations(self.session, [op], allow=_allow)
        self.elapsed.append(time.perf_counter() - t0)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session, kind = await open_session(root)
        async with session:
            print(f"session: {kind}")
            original, diff = make_case(10_000)
            run = EndToEnd(session, original, diff)
            await run()  # warm-up
            run.elapsed.clear()
            for _ in range(RUNS):
                await run()
            median_ms = median(run.elapsed) * 1000
            judge(f"10k lines, {HUNKS} hunks, end to end", f"median {median_ms:.1f} ms over {RUNS} runs",
                  "<= 50 ms", median_ms <= 50)

            rows = []
            for lines in (1_000, 10_000, 100_000):
                original, diff = make_case(lines)
                run = EndToEnd(session, original, diff)
                for _ in range(SCALING_RUNS):
                    await run()
                e2e = median(run.elapsed)
                hunks = v4a.parse_update(diff, PATH)

                async def pure(data: bytes = original, h: tuple[v4a.Hunk, ...] = hunks) -> None:
                    v4a.apply_hunks(data, h, PATH)

                rows.append((lines, e2e, await timed(pure, SCALING_RUNS)))
        print(f"{'lines':>8} {'end to end':>12} {'ratio':>6} {'applier':>10} {'ratio':>6}")
        prev: tuple[float, float] | None = None
        growth: list[float] = []
        for lines, e2e, pure_t in rows:
            r1 = f"{e2e / prev[0]:.1f}x" if prev else ""
            r2 = f"{pure_t / prev[1]:.1f}x" if prev else ""
            print(f"{lines:>8} {e2e * 1000:>9.1f} ms {r1:>6} {pure_t * 1000:>7.1f} ms {r2:>6}")
            if prev:
                growth += [e2e / prev[0], pure_t / prev[1]]
            prev = (e2e, pure_t)
        judge("growth per 10× lines (end to end and applier)", f"at most {max(growth):.1f}×",
              f"<= {GROWTH_TARGET:.0f}× (linear, not quadratic)", max(growth) <= GROWTH_TARGET)


if __name__ == "__main__":
    asyncio.run(main())
