"""The Kubernetes back-end against Docker direct, in one run, on this machine (no cluster: the
fake API server of :mod:`tests.k8s.fake`, imported from the checkout, whose pods are Docker
containers — so the difference is the back-end's own path: the kubernetes client, the attach
websocket through an API server, and the pod's helper).

1. Per-command latency: interleaved rounds of ``echo hi`` through a KubernetesSession and a
   DockerSession (same image, same limits). Target: median ≤ 3× Docker direct.
2. The workspace of a 10 000-file checkout (100 directories × 100 files of 1–4 KiB, plus a
   ``.git``): copy-in at start (snapshot, commit, unpack in the pod) against the baseline of the
   same tar put into a container by the engine (``put_archive``, what ``docker cp`` does, into
   its writable layer); a
   copy-back with nothing changed (the pod lists and hashes, the host compares), and one with
   200 files changed and 100 created, against the engine reading the whole workspace back
   (``get_archive``). Targets: copy-in ≤ 3× put_archive; copy-back ≤ 3× get_archive.
3. Session start → first answer (``echo hi``), the same 1 000-file checkout without and with a
   ``.git``: with one, the pod has a ``copy-in`` init container that writes the checkout and the
   read-only ``.git`` before the helper's container starts (two container starts and two attach
   streams instead of one), alternating which goes first. Target: ≤ 1.5× the start without.

On a real cluster add the API server's and the kubelet's round trips (the attach is proxied
through both); ``make test-k8s`` runs the tests there, not this bench.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import docker

# This file's own folder must not be on the path: it would stand for the kubernetes package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.report import judge, median, rounds, spread, timed  # noqa: E402
from sandbox import images  # noqa: E402
from sandbox.docker import DockerConfig, DockerSession  # noqa: E402
from sandbox.kubernetes import sync  # noqa: E402
from sandbox.kubernetes.options import KubernetesOptions  # noqa: E402
from sandbox.kubernetes.session import KubernetesSession  # noqa: E402
from tests.k8s.fake import FakeKubernetes  # noqa: E402


def checkout(root: Path, dirs: int, per_dir: int) -> None:
    for d in range(dirs):
        folder = root / f"pkg{d:03d}"
        folder.mkdir(parents=True)
        for f in range(per_dir):
            (folder / f"mod{f:03d}.py").write_bytes(os.urandom(512 + (d * f) % 1536).hex().encode()[:1024 + f * 30])
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for path in [root, *root.rglob("*")]:
        os.chown(path, 1000, 1000, follow_symlinks=False)


async def latency(k8s: KubernetesSession, direct: DockerSession, n: int) -> None:
    ks, ds = [], []
    for _ in range(5):  # warm both
        await k8s.run("echo hi")
        await direct.run("echo hi")
    for _ in range(n):
        ks.append(await timed(lambda: k8s.run("echo hi")))
        ds.append(await timed(lambda: direct.run("echo hi")))
    ratio = median(ks) / median(ds)
    print("1. per-command latency (echo hi)")
    print(f"  kubernetes (fake API server, attach websocket): {spread(ks, ' ms', 1000)}")
    print(f"  docker direct (the helper's unix socket): {spread(ds, ' ms', 1000)}")
    judge("kubernetes / docker", f"{ratio:.2f}×", "≤ 3×", ratio <= 3)


def engine_baselines(client: docker.DockerClient, tar: bytes, n: int) -> tuple[list[float], list[float]]:
    """put_archive / get_archive of the same checkout into and out of a container's tmpfs."""
    puts, gets = [], []
    container = client.containers.run(images.image_name("minimal"), ["sleep", "600"], detach=True, remove=True,
                                      labels={"sandloop.bench": "kubernetes"})
    try:
        for i in range(n):
            target = f"/tmp/bench-{i}"  # the writable layer: the archive API cannot see a tmpfs
            container.exec_run(["mkdir", "-p", target], user="0")
            start = time.perf_counter()
            container.put_archive(target, tar)
            puts.append(time.perf_counter() - start)
            start = time.perf_counter()
            stream, _ = container.get_archive(target)
            for _chunk in stream:
                pass
            gets.append(time.perf_counter() - start)
    finally:
        container.remove(force=True)
    return puts, gets


async def workspace(options: KubernetesOptions, config: DockerConfig, client: docker.DockerClient, n: int,
                    files: int) -> None:
    per_dir = 100
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        checkout(root, files // per_dir, per_dir)
        _, tar = sync.snapshot(root, (".git",))
        size_mb = len(tar) / 1e6
        ins, idle, backs = [], [], []
        for _ in range(n):
            session = await KubernetesSession.create(root, config, options)
            try:
                ins.append(session.copy_in_s)
                idle.append(await timed(session.copy_back))
                await session.run("for d in pkg00[0-1]; do for f in $d/mod0[0-9][0-9].py; do echo x >> $f; done; done; "
                                  "mkdir -p newpkg && for i in $(seq 100); do echo $i > newpkg/n$i.py; done")
                backs.append(await timed(session.copy_back))
                await session.run("rm -rf newpkg")
                await session.copy_back()  # the checkout as it was, for the next round
            finally:
                await session.close(copy_back=False)
        puts, gets = engine_baselines(client, tar, n)
    print(f"2. workspace of {files} files ({size_mb:.1f} MB as a tar)")
    print(f"  copy-in at start: {spread(ins, ' s', 1, 2)}; engine put_archive: {spread(puts, ' s', 1, 2)}")
    judge("copy-in / put_archive", f"{median(ins) / median(puts):.2f}×", "≤ 3×", median(ins) <= 3 * median(puts))
    print(f"  copy-back, nothing changed: {spread(idle, ' s', 1, 2)}")
    print(f"  copy-back, 200 changed + 100 new: {spread(backs, ' s', 1, 2)}; engine get_archive (everything): "
          f"{spread(gets, ' s', 1, 2)}")
    judge("copy-back / get_archive", f"{median(backs) / median(gets):.2f}×", "≤ 3×",
          median(backs) <= 3 * median(gets))


async def start(options: KubernetesOptions, config: DockerConfig, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, protected = Path(tmp) / "plain", Path(tmp) / "protected"
        checkout(plain, 10, 100)
        checkout(protected, 10, 100)  # both with a .git: one goes
        shutil.rmtree(plain / ".git")

        async def first_answer(ws: Path) -> float:
            begun = time.perf_counter()
            session = await KubernetesSession.create(ws, config, options, reap_stale=False)
            try:
                await session.run("echo hi")
                return time.perf_counter() - begun
            finally:
                await session.close(copy_back=False)

        without, with_ = [], []
        for i in range(n):
            order = [(plain, without), (protected, with_)]
            for ws, out in order if i % 2 == 0 else order[::-1]:
                out.append(await first_answer(ws))
    ratio = median(with_) / median(without)
    print("3. session start → first answer, a 1 000-file checkout")
    print(f"  without .git (one container): {spread(without, ' ms', 1000, 0)}")
    print(f"  with .git (copy-in init container, .git read-only): {spread(with_, ' ms', 1000, 0)}")
    judge("with / without", f"{ratio:.2f}× (+{(median(with_) - median(without)) * 1000:.0f} ms)", "≤ 1.5×",
          ratio <= 1.5)


async def main() -> None:
    client = docker.from_env()
    config = DockerConfig(memory="2g", cpus=1.0)
    with FakeKubernetes(client) as fake:
        options = KubernetesOptions(kubeconfig=str(fake.kubeconfig()))
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp)
            os.chown(ws, 1000, 1000)
            k8s = await KubernetesSession.create(ws, config, options)
            direct = await DockerSession.create(ws, config)
            try:
                await latency(k8s, direct, rounds(200, 20))
            finally:
                await k8s.close(copy_back=False)
                await direct.close()
        await workspace(options, config, client, rounds(3, 1), 10_000)
        await start(options, config, rounds(10, 1))


if __name__ == "__main__":
    asyncio.run(main())
