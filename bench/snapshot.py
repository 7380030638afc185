"""Snapshot and resume (executor/snapshot.py, sandbox/docker.py), through the public API, in one run:

1. A session with a writable root (``[session] writable_root``) that installed 200 MB into it
   (2 000 files of 100 KB under /opt) is snapshotted: ``run.snapshot()``, the root committed by
   the engine and $HOME tarred inside the sandbox. Target ≤ 2 s (median).
2. What it kept: the tar and the committed layer, against the image it started from (the
   snapshot is what changed, not the image).
3. Resume to the first command answered (``open_run(resume=...)`` + ``true``) against a fresh
   session's start to its first command, same policy, same checkout. Target ≤ 1.5×.
4. ``every_turn`` with nothing changed: the snapshot after a turn that ran ``ls`` (a command
   that changes nothing: /tmp's listing is compared, the root is committed again only for a
   writable root), and after a turn that ran no command, on the default read-only root.
   Target ≤ 20 ms (median).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import executor
from bench.report import QUICK, judge, median, rounds, scratch_dir, spread
from executor.dispatch import CallRecord
from executor.loop import LoopState, TurnRecord, Usage
from sandbox import images

INSTALL = ("mkdir -p /opt/pkgs && cd /opt/pkgs && for i in $(seq 2000); do "
           "head -c 102400 /dev/urandom > f$i; done && du -sm /opt/pkgs")
POLICY = ('version = 1\n\n[shell]\ndefault = "allow"\n\n[files]\nwritable = ["**"]\nread_only = []\n'
          'allow_delete = true\n\n[session]\nsnapshot = "on_stop"\nwritable_root = {root}\n')


def _policy(folder: Path, *, writable_root: bool) -> Path:
    path = folder / f"policy-{writable_root}.toml"
    path.write_text(POLICY.format(root="true" if writable_root else "false"))
    return path


async def _first_command(repo: Path, **settings: object) -> float:
    started = time.perf_counter()
    async with executor.open_run(repo, model="bench", api_key="unused", **settings) as run:  # type: ignore[call-overload]
        result = await run.sandbox.run("true")
        took = time.perf_counter() - started
    assert result.exit_code == 0
    return took


async def main() -> None:
    client = docker.from_env()
    images.ensure(client, "shell")
    scratch = scratch_dir("sandloop-bench-snapshot-")
    # A root-owned checkout runs as uid 0 (every capability dropped): it can write where root
    # owns the root file system, as a package manager would install.
    repo = scratch / "repo"
    repo.mkdir()
    (repo / "README").write_text("bench\n")
    (scratch / "state").mkdir()
    os.environ["XDG_STATE_HOME"] = str(scratch / "state")
    writable = _policy(scratch, writable_root=True)

    print("1. snapshot of a session that installed 200 MB into its root")
    n = rounds(5, quick=1)
    taken: list[float] = []
    async with executor.open_run(repo, policy=writable, model="bench", api_key="unused") as run:
        installed = await run.sandbox.run(INSTALL, timeout_s=300)
        assert installed.exit_code == 0, installed.stderr.text
        await run.sandbox.run("mkdir -p ~/.cache && head -c 1048576 /dev/urandom > ~/.cache/blob")
        floor: list[float] = []
        container = getattr(run.toolbox.session, "container", None)
        for _ in range(n):
            started = time.perf_counter()
            folder = await run.snapshot()
            taken.append(time.perf_counter() - started)
            # the engine's own commit of the same container, alone: what the root's part costs
            started = time.perf_counter()
            image = await asyncio.to_thread(container.commit, repository="sandloop-bench-floor", tag="x")
            floor.append(time.perf_counter() - started)
        first = run.folder
        manifest = (folder / "manifest.json").read_text()
    client.images.remove(image.id)
    print(f"  the engine's own commit of the same container (docker commit): {spread(floor, ' s', 1, 2)}")
    judge("snapshot, 200 MB installed in the root", f"{spread(taken, ' s', 1, 2)}; "
          f"{median(taken) / median(floor):.2f}× a bare commit", "≤ 2 s", median(taken) <= 2.0)

    print("2. what a snapshot keeps")
    data = json.loads(manifest)
    image = client.images.get(data["image"])
    base = client.images.get(data["base_image"] or images.image_name("shell"))
    layer = image.attrs["Size"] - base.attrs["Size"]
    print(f"  $HOME tar {data['tar']['bytes'] / 1e6:.1f} MB; root layer {layer / 1e6:.0f} MB; the image it started "
          f"from {base.attrs['Size'] / 1e6:.0f} MB (the snapshot image in all {image.attrs['Size'] / 1e6:.0f} MB, "
          "sharing the base's layers)")

    print("3. resume to the first command vs a fresh session's start")
    n = rounds(7, quick=2)
    fresh, resumed = [], []
    for _ in range(n):
        fresh.append(await _first_command(repo, policy=writable))
        resumed.append(await _first_command(repo, resume=first))
    ratio = median(resumed) / median(fresh)
    print(f"  fresh {spread(fresh, ' ms', 1000, 0)}; resumed {spread(resumed, ' ms', 1000, 0)}")
    judge("resume → first command, vs fresh start", f"{ratio:.2f}×", "≤ 1.5×", ratio <= 1.5)

    print("4. every_turn, nothing changed (read-only root)")
    n = rounds(30, quick=5)
    async with executor.open_run(repo, policy=_policy(scratch, writable_root=False), model="bench",
                                 api_key="unused") as run:
        state = LoopState("resp_bench", [{"role": "user", "content": "go on"}], [], Usage(), 3, 2, 1.0)
        await run.snapshotter.take(state, reason="turn")  # the first one takes everything
        floor = []
        for _ in range(n):
            started = time.perf_counter()
            await run.toolbox.session.run("true")  # type: ignore[union-attr]
            floor.append(time.perf_counter() - started)
        print(f"  one command's round trip through the session (`true`), for scale: {spread(floor, ' ms', 1000, 1)}")
        for label, calls in (("a turn that ran `ls`", [CallRecord("c1", "shell_call", "ls")]),
                             ("a turn that ran no command", [CallRecord("c2", "function_call", "f")])):
            turn = TurnRecord(4, "resp", "completed", Usage(), 0.0, 0.0, 0.0, calls=calls)
            costs = []
            for _ in range(n):
                await run.sandbox.run("ls")
                started = time.perf_counter()
                await run.snapshotter.take(state, reason="turn", turn=turn)
                costs.append(time.perf_counter() - started)
            judge(f"every_turn overhead, {label}", spread(costs, " ms", 1000, 1), "≤ 20 ms", median(costs) <= 0.020)
    from sandbox.snapshots import prune

    prune(older_than_days=None, everything=True, client=client, runs=scratch / "state" / "sandloop" / "runs")
    client.close()
    print(f"  (quick: {QUICK})")


if __name__ == "__main__":
    asyncio.run(main())
