"""Shell-call overhead: sandloop's session vs native subprocess and `docker exec`, in one run.

Interleaved rounds of `echo hi` through (1) native ``subprocess.run``, (2) ``docker exec`` on a
warm container (the docker SDK's exec API, which is what the CLI does), (3) a sandloop session.
Then 8 × ``sleep 0.5`` in parallel through one session, and session start-up against a bare
``docker run`` of the same image. Prints medians, p90s and ratios; targets in the issue:
sandloop median ≤ 2× native (p90 ≤ 3×), ≥ 15× faster than docker exec, 8 parallel ≤ 1.05 × 0.5 s,
session ready ≤ 1.5× a bare docker run.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import images
from sandbox.docker import DockerConfig, DockerSession

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "200"))
RUNTIME = os.environ.get("BENCH_RUNTIME") or None  # e.g. runsc, to measure under gVisor


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def main() -> None:
    client = docker.from_env()
    image = images.ensure(client, "shell")
    workspace = Path(tempfile.mkdtemp(prefix="sandloop-bench-"))
    os.chown(workspace, 1000, 1000)
    warm = client.containers.run(image, ["sleep", "3600"], detach=True, network_mode="none", remove=True)
    session = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client)
    print(f"runtime: {session.runtime_in_force()}")
    try:
        async def native() -> None:
            await asyncio.to_thread(subprocess.run, ["bash", "-c", "echo hi"], capture_output=True)

        def _exec() -> None:
            warm.exec_run(["bash", "-c", "echo hi"])

        async def docker_exec() -> None:
            await asyncio.to_thread(_exec)

        async def sandloop() -> None:
            await session.run("echo hi")

        # Same path for native and sandloop from the event loop's point of view: native goes
        # through a thread too, as a blocking call in an asyncio program must.
        samples: dict[str, list[float]] = {"native": [], "docker exec": [], "sandloop": []}
        for _ in range(5):  # warm-up
            await native(); await sandloop(); await docker_exec()  # noqa: E702
        for i in range(ROUNDS):
            samples["native"].append(await timed(native))
            samples["sandloop"].append(await timed(sandloop))
            if i % 4 == 0:  # docker exec is slow: a quarter of the rounds is plenty
                samples["docker exec"].append(await timed(docker_exec))

        med = {k: statistics.median(v) for k, v in samples.items()}
        p90 = {k: pct(v, 0.9) for k, v in samples.items()}
        print(f"echo hi, {ROUNDS} interleaved rounds (docker exec: {len(samples['docker exec'])})")
        for k in samples:
            print(f"  {k:12s} median {med[k] * 1000:7.2f} ms   p90 {p90[k] * 1000:7.2f} ms")
        print(f"  sandloop / native       median {med['sandloop'] / med['native']:.2f}x "
              f"(target <= 2)   p90 {p90['sandloop'] / p90['native']:.2f}x (target <= 3)")
        print(f"  docker exec / sandloop  median {med['docker exec'] / med['sandloop']:.1f}x (target >= 15)")

        par = []
        for _ in range(5):
            start = time.perf_counter()
            await asyncio.gather(*[session.run("sleep 0.5") for _ in range(8)])
            par.append(time.perf_counter() - start)
        print(f"8 x sleep 0.5 in parallel: median {statistics.median(par):.3f} s = "
              f"{statistics.median(par) / 0.5:.3f}x of 0.5 s (target <= 1.05)")
    finally:
        await session.close()
        warm.remove(force=True)

    ready, bare = [], []
    for _ in range(5):
        start = time.perf_counter()
        await asyncio.to_thread(client.containers.run, image, ["true"], remove=True, network_mode="none")
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        s = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client, reap_stale=False)
        ready.append(time.perf_counter() - start)
        await s.close()
    print(f"session ready: median {statistics.median(ready) * 1000:.0f} ms vs bare docker run "
          f"{statistics.median(bare) * 1000:.0f} ms = {statistics.median(ready) / statistics.median(bare):.2f}x "
          "(target <= 1.5)")


if __name__ == "__main__":
    asyncio.run(main())
