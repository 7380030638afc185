"""Environments: cold setup, and a session's start from a cached environment.

1. Cold setup: ``prepare`` of an environment no run has built (a fresh key each round): the
   setup container, its commands and the commit. Full runs set up a venv and install pytest
   into it from the package index (pip's own index, through the setup proxy, with the host's
   CA trusted); ``--quick`` only creates the venv (no network). Printed, not judged: it is
   dominated by what setup installs.
2. Session ready from the cached environment, against a bare container of the same image, the
   same lifecycle on both sides (as bench/shell_overhead.py measures start-up): start → the
   first command (``echo hi``) answered → removed. The session side includes everything a run
   does first: the cache key (workspace files hashed), the cache lookup, the session's reap of
   stale containers, the container and the helper. Rounds alternate who goes first.

Target: session ready ≤ 1.5× a bare ``docker run`` of the same image, to the first answer.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import QUICK, judge, median, rounds, spread
from bench.shell_overhead import bare_lifecycle
from sandbox.docker import DockerConfig, DockerSession
from sandbox.environment import store
from sandbox.environment.prepare import Prepared, prepare
from sandbox.environment.spec import KEY_LABEL, EnvironmentSpec


def spec() -> EnvironmentSpec:
    setup = ["python3 -m venv /opt/env"]
    if QUICK:
        return EnvironmentSpec(setup=tuple(setup), cache_key=("deps.txt",))
    return EnvironmentSpec(setup=(*setup, "/opt/env/bin/pip install --quiet pytest"), setup_registries=("pip",),
                           trust_host_ca=True, cache_key=("deps.txt",))


def forget(client: docker.DockerClient, key: str | None) -> None:
    for row in client.api.images(filters={"label": f"{KEY_LABEL}={key}"}):
        client.api.remove_image(row["Id"], force=True)


async def cold(client: docker.DockerClient, workspace: Path) -> Prepared:
    n = rounds(3, quick=1)
    samples = []
    prepared = None
    for _ in range(n):
        (workspace / "deps.txt").write_text(os.urandom(8).hex())  # a key nobody built
        start = time.perf_counter()
        prepared = await prepare(spec(), workspace, client=client)
        samples.append(time.perf_counter() - start)
        assert prepared.source == "built", prepared
        if len(samples) < n:
            forget(client, prepared.key)
    what = "venv" if QUICK else "venv + pip install pytest from the index"
    print(f"cold setup ({what}), {n} round(s): {spread(samples, ' s')}")
    assert prepared is not None
    return prepared


async def session_from_cache(client: docker.DockerClient, workspace: Path, image: str | None = None,
                             ) -> tuple[float, float, float]:
    """prepare (a cache hit) → session → ``echo hi`` answered → closed: (to the answer, to removal,
    the preparation alone). With ``image``: the same session without preparing (for context)."""
    start = time.perf_counter()
    if image is None:
        prepared = await prepare(spec(), workspace, client=client)
        assert prepared.source == "cached", prepared
    else:
        prepared = Prepared(image=image, source="image")
    prepare_s = time.perf_counter() - start
    config = DockerConfig(image=prepared.image, ca_bundle=prepared.ca_bundle, env=prepared.env())
    async with await DockerSession.create(workspace, config, client=client) as session:
        assert (await session.run("echo hi")).stdout.text == "hi\n"
        answered = time.perf_counter() - start
    return answered, time.perf_counter() - start, prepare_s


async def ready(client: docker.DockerClient, workspace: Path, image: str) -> None:
    n = rounds(15, quick=2)
    ours: list[tuple[float, float, float]] = []
    plain: list[tuple[float, float, float]] = []
    bare: list[tuple[float, float]] = []
    for i in range(n):  # alternate who goes first, so neither always meets a warmer engine
        ours_first = i % 2 == 1
        if ours_first:
            ours.append(await session_from_cache(client, workspace))
        bare.append(await asyncio.to_thread(bare_lifecycle, client, image))
        if not ours_first:
            ours.append(await session_from_cache(client, workspace))
        plain.append(await session_from_cache(client, workspace, image))
    print(f"session from the cached environment vs a bare container of {image}, {n} rounds each")
    for label, index in (("start → first answer", 0), ("start → answer → removed", 1)):
        s, b = [x[index] for x in ours], [x[index] for x in bare]
        print(f"  {label}: session {spread(s, ' ms', 1000, 0)}; bare {spread(b, ' ms', 1000, 0)}")
        ratio = median(s) / median(b)
        judge(f"session ready / bare docker run, {label}", f"{ratio:.2f}×", "<= 1.5×", ratio <= 1.5)
    looked = [x[2] for x in ours]
    alone = median([x[0] for x in plain])
    print(f"  for context: finding the cached environment (key, lookup) takes {spread(looked, ' ms', 1000, 1)}; "
          f"a session of the same image without it answers first in {alone * 1000:.0f} ms "
          f"({alone / median([x[0] for x in bare]):.2f}× bare: the session's own start, bench/shell_overhead.py)")


async def main() -> None:
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-env-") as tmp:
        workspace = Path(tmp)
        os.chown(workspace, 1000, 1000)
        prepared = await cold(client, workspace)
        try:
            assert prepared.image is not None
            await ready(client, workspace, prepared.image)
        finally:
            forget(client, prepared.key)
            store.forget(prepared.key or "")


if __name__ == "__main__":
    asyncio.run(main())
