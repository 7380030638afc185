"""Shell-call overhead: sandloop's session vs native subprocess and `docker exec`, in one run.

1. Interleaved rounds of ``echo hi`` through native ``subprocess.run``, ``docker exec`` on a warm
   container (the docker SDK's exec API, which is what the CLI does) and a sandloop session.
   The native baseline is measured twice: called straight from the event loop (no thread hop:
   the floor, which the target is judged against) and through ``asyncio.to_thread`` (what an
   asyncio program must do with a blocking call). The hop itself is measured alone.
2. 8 × ``sleep 0.5`` in parallel through one session.
3. Start-up, the same lifecycle on both sides: start → the first command (``echo hi``) answered
   → the container removed. A session (``DockerSession.create`` with its reap of stale
   containers, ``run``, ``close``) against a bare container of the same image (create with
   ``--network none``, attach, start, read the answer, remove), alternating which goes first;
   and, for context, a session that skips the reap.

Targets: sandloop median ≤ 2× native (p90 ≤ 3×), ≥ 15× faster than docker exec, 8 parallel
≤ 1.05 × 0.5 s, session start ≤ 1.5× a bare container, to the first answer and to removal.
``BENCH_RUNTIME=runsc`` measures under gVisor (both sides of 3. use it).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, median, p90, rounds, spread, timed
from sandbox import images
from sandbox.docker import DockerConfig, DockerSession

RUNTIME = os.environ.get("BENCH_RUNTIME") or None  # e.g. runsc, to measure under gVisor
ECHO = ["bash", "-c", "echo hi"]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def per_command(client: docker.DockerClient, image: str, session: DockerSession) -> None:
    n = rounds(200, quick=10)
    warm = client.containers.run(image, ["sleep", "3600"], detach=True, network_mode="none", remove=True)
    try:
        async def native_direct() -> None:
            subprocess.run(ECHO, capture_output=True, check=True)

        async def native_thread() -> None:
            await asyncio.to_thread(subprocess.run, ECHO, capture_output=True, check=True)

        async def hop() -> None:
            await asyncio.to_thread(int)

        async def docker_exec() -> None:
            await asyncio.to_thread(warm.exec_run, ECHO)

        async def sandloop() -> None:
            await session.run("echo hi")

        paths = {"native": native_direct, "native via thread": native_thread,
                 "thread hop alone": hop, "sandloop": sandloop, "docker exec": docker_exec}
        samples: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(5):  # warm-up
            for fn in paths.values():
                await fn()
        for i in range(n):
            for name, fn in paths.items():
                if name == "docker exec" and i % 4:
                    continue  # docker exec is slow: a quarter of the rounds is plenty
                samples[name].append(await timed(fn))
    finally:
        warm.remove(force=True)

    med = {k: median(v) for k, v in samples.items()}
    tail = {k: p90(v) for k, v in samples.items()}
    print(f"echo hi, {n} interleaved rounds (docker exec: {len(samples['docker exec'])})")
    for k in samples:
        print(f"  {k:18s} median {ms(med[k]):>10}   p90 {ms(tail[k]):>10}")
    ratio, tail_ratio = med["sandloop"] / med["native"], tail["sandloop"] / tail["native"]
    judge("sandloop / native (no thread hop on the native side)",
          f"median {ratio:.2f}× ({ms(med['sandloop'])} vs {ms(med['native'])})", "<= 2×", ratio <= 2)
    judge("sandloop / native, p90", f"{tail_ratio:.2f}×", "<= 3×", tail_ratio <= 3)
    print(f"  for context: sandloop / native via asyncio.to_thread "
          f"{med['sandloop'] / med['native via thread']:.2f}× (the hop alone: {ms(med['thread hop alone'])})")
    exec_ratio = med["docker exec"] / med["sandloop"]
    judge("docker exec / sandloop", f"median {exec_ratio:.1f}× slower ({ms(med['docker exec'])})",
          ">= 15×", exec_ratio >= 15)


async def parallel(session: DockerSession) -> None:
    samples = []
    for _ in range(rounds(10, quick=1)):
        start = time.perf_counter()
        await asyncio.gather(*[session.run("sleep 0.5") for _ in range(8)])
        samples.append((time.perf_counter() - start) / 0.5)
    judge("8 × sleep 0.5 in parallel, × 0.5 s", spread(samples, "×", digits=3), "<= 1.05×",
          median(samples) <= 1.05)


def bare_lifecycle(client: docker.DockerClient, image: str) -> tuple[float, float]:
    """A plain container: (seconds to the answer of ``echo hi``, seconds until it is removed)."""
    api = client.api
    start = time.perf_counter()
    created = api.create_container(image, ECHO, network_disabled=True,
                                   host_config=api.create_host_config(network_mode="none", runtime=RUNTIME))
    raw = api.attach_socket(created["Id"], params={"stdout": 1, "stderr": 1, "stream": 1})
    sock: socket.socket = getattr(raw, "_sock", raw)
    try:
        api.start(created["Id"])
        data = b""
        while b"hi\n" not in data:  # the attach stream is framed, the payload is in there
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"the bare container closed its stream early: {data!r}")
            data += chunk
        answered = time.perf_counter() - start
    finally:
        sock.close()
    api.remove_container(created["Id"], force=True)
    return answered, time.perf_counter() - start


async def session_lifecycle(client: docker.DockerClient, workspace: Path, *,
                            reap: bool = True) -> tuple[float, float]:
    """A session: (seconds to the answer of ``echo hi``, seconds until closed and removed)."""
    start = time.perf_counter()
    session = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client,
                                         reap_stale=reap)
    try:
        result = await session.run("echo hi")
        assert result.stdout.text == "hi\n", result
        answered = time.perf_counter() - start
    finally:
        await session.close()
    return answered, time.perf_counter() - start


async def startup(client: docker.DockerClient, image: str, workspace: Path) -> None:
    n = rounds(15, quick=2)
    bare: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    unreaped: list[tuple[float, float]] = []
    for i in range(n):  # alternate who goes first, so neither always meets a warmer engine
        if i % 2:
            ours.append(await session_lifecycle(client, workspace))
            bare.append(await asyncio.to_thread(bare_lifecycle, client, image))
        else:
            bare.append(await asyncio.to_thread(bare_lifecycle, client, image))
            ours.append(await session_lifecycle(client, workspace))
        unreaped.append(await session_lifecycle(client, workspace, reap=False))
    print(f"start-up, the same lifecycle on both sides, {n} rounds each")
    for label, index in (("start → first answer", 0), ("start → answer → removed", 1)):
        s, b = [x[index] for x in ours], [x[index] for x in bare]
        ratio = median(s) / median(b)
        print(f"  {label}: session {spread(s, ' ms', 1000, 0)}; bare {spread(b, ' ms', 1000, 0)}")
        judge(f"session / bare container, {label}", f"{ratio:.2f}×", "<= 1.5×", ratio <= 1.5)
    skip = median([x[0] for x in unreaped])
    print(f"  for context: a session that skips its reap of stale containers answers first in "
          f"{skip * 1000:.0f} ms ({skip / median([x[0] for x in bare]):.2f}× bare)")


async def main() -> None:
    client = docker.from_env()
    image = images.ensure(client, "shell")
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-") as tmp:
        workspace = Path(tmp)
        os.chown(workspace, 1000, 1000)
        session = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client)
        print(f"runtime: {session.runtime_in_force()}")
        try:
            await per_command(client, image, session)
            await parallel(session)
        finally:
            await session.close()
        await startup(client, image, workspace)


if __name__ == "__main__":
    asyncio.run(main())
