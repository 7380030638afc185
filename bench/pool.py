"""Many sessions from one process (sandbox/pool.py), in one run:

1. Acquire latency from a warm pool, against starting a session directly (``DockerSession.create``)
   — what a harness would wait for without the pool.
2. 50 sessions held at once from one process: the front-end's memory and open file descriptors
   per session (both measured as the growth over the process before the pool started), and each
   container's own memory (its cgroup's usage), then whether closing them gives every descriptor
   back.

Targets: acquire ≤ 10 ms (median); no descriptor left after the pool closes.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import QUICK, judge, load, median, rounds, scratch_dir, spread, timed
from sandbox import images
from sandbox.docker import DockerSession
from sandbox.pool import SessionPool


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _container_mb(container_id: str) -> float | None:
    """The container's memory use from its cgroup (v2, then v1); None when not readable."""
    for path in (f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current",
                 f"/sys/fs/cgroup/memory/docker/{container_id}/memory.usage_in_bytes"):
        try:
            return int(Path(path).read_text()) / 1e6
        except OSError:
            continue
    return None


async def main() -> None:
    print(load())
    client = docker.from_env()
    images.ensure(client, "shell")
    scratch = scratch_dir("sandloop-bench-pool-")
    counter = iter(range(100_000))

    async def fresh() -> DockerSession:
        workspace = scratch / f"ws{next(counter)}"
        workspace.mkdir()
        return await DockerSession.create(workspace, reap_stale=False)

    print("1. acquire from a warm pool vs starting a session")
    n = rounds(20, quick=3)
    direct = []
    for _ in range(n):
        started = time.perf_counter()
        session = await fresh()
        direct.append(time.perf_counter() - started)
        await session.close()
    acquire = []
    async with SessionPool(fresh, size=2) as pool:
        for _ in range(n):
            while pool.ready < 2:  # measure a warm pool: the replacement of the last one is ready
                await asyncio.sleep(0.01)
            session = None

            async def take() -> None:
                nonlocal session
                session = await pool.acquire()

            acquire.append(await timed(take))
            assert session is not None
            await pool.release(session)
    print(f"  start a session directly: {spread(direct, ' ms', 1000, 1)}")
    judge("acquire from a warm pool", f"{spread(acquire, ' ms', 1000, 3)}; "
          f"{median(direct) / median(acquire):,.0f}× faster than starting one", "≤ 10 ms", median(acquire) <= 0.010)

    held = 5 if QUICK else 50
    print(f"2. {held} sessions held from one process")
    gc.collect()
    rss0, fds0 = _rss_mb(), _fds()
    started = time.perf_counter()
    async with SessionPool(fresh, size=held) as pool:
        sessions = [await pool.acquire() for _ in range(held)]
        ready_s = time.perf_counter() - started
        answers = await asyncio.gather(*(s.run("echo hi") for s in sessions))
        assert all(a.stdout.text == "hi\n" for a in answers)
        rss, fds = _rss_mb() - rss0, _fds() - fds0
        inside = [_container_mb(s.container.id) for s in sessions if isinstance(s, DockerSession) and s.container]
        print(f"  all {held} ready in {ready_s:.1f} s (2 cores: starts queue behind each other)")
        print(f"  front-end: {rss / held:.2f} MB of memory and {fds / held:.1f} file descriptors per session "
              f"({rss:.0f} MB, {fds} descriptors in all)")
        known = [m for m in inside if m is not None]
        if known:
            print(f"  each container's own memory (cgroup): {spread(known, ' MB', 1, 1)}")
        for session in sessions:
            await pool.release(session)
    gc.collect()
    left = _fds() - fds0
    judge("descriptors left open after the pool closed", str(left), "0", left <= 0)
    client.close()
    print(f"at the end: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
