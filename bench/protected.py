"""The search for nested repositories (:mod:`sandbox.protected`) on a large checkout, in one run.

Every sandbox start searches its checkout for ``.git`` folders and files (read-only to commands
in every back-end). The checkout here is a node_modules-like tree of 50 000 files (≈2 000
packages, each with a few folders of 2–6 files and a nested ``node_modules``), with a vendored
repository in one package.

1. The search against the floor of any search: listing the same tree once with ``os.walk``
   (every folder read, nothing else), interleaved. Target: ≤ 1.5× the listing.
2. For scale: a Docker session's start → first answer on that checkout against the same on a
   checkout of ten files (the difference is the search: the bind mounts do not depend on size).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import QUICK, judge, median, rounds, spread, timed
from sandbox import protected
from sandbox.docker import DockerConfig, DockerSession

FILES = 50_000


def node_modules(root: Path, files: int) -> int:
    """A node_modules-like tree of about ``files`` files; how many it made."""
    rng = random.Random(1)
    made = packages = 0
    (root / ".git").mkdir(parents=True)
    while made < files:
        package = root / "node_modules" / f"pkg{packages}"
        packages += 1
        for sub in ("", "lib", "lib/util", "dist", "dist/esm", "node_modules/dep/lib"):
            folder = package / sub
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(rng.randint(2, 6)):
                (folder / f"f{i}.js").write_bytes(b"module.exports = 1\n")
                made += 1
    (root / "node_modules" / "pkg7" / ".git" / "hooks").mkdir(parents=True)  # a vendored repository
    for path in [root, *root.rglob("*")]:
        os.chown(path, 1000, 1000, follow_symlinks=False)
    return made


def listing(root: Path) -> int:
    return sum(len(dirs) + len(names) for _, dirs, names in os.walk(root))


async def search(root: Path, files: int, n: int) -> None:
    found = protected.find(root, (".git",))
    assert [p.relative_to(root).as_posix() for p in found.paths] == [".git", "node_modules/pkg7/.git"], found
    assert found.stopped is None, found.stopped
    searches, walks = [], []
    for i in range(n):
        pair = [(searches, lambda: protected.find(root, (".git",))), (walks, lambda: listing(root))]
        for out, fn in pair if i % 2 == 0 else pair[::-1]:
            begun = time.perf_counter()
            fn()
            out.append(time.perf_counter() - begun)
    ratio = median(searches) / median(walks)
    print(f"1. the search of a {files}-file node_modules-like checkout ({listing(root)} entries)")
    print(f"  sandbox.protected.find: {spread(searches, ' ms', 1000, 0)}")
    print(f"  os.walk listing of the same tree: {spread(walks, ' ms', 1000, 0)}")
    judge("search / listing", f"{ratio:.2f}×", "≤ 1.5×", ratio <= 1.5)


async def session_start(big: Path, small: Path, n: int) -> None:
    async def first_answer(ws: Path) -> None:
        async with await DockerSession.create(ws, DockerConfig(), reap_stale=False) as session:
            await session.run("echo hi")

    on_big, on_small = [], []
    for i in range(n):
        pair = [(on_big, big), (on_small, small)]
        for out, ws in pair if i % 2 == 0 else pair[::-1]:
            out.append(await timed(lambda ws=ws: first_answer(ws)))
    print("2. a Docker session's start → first answer")
    print(f"  on that checkout: {spread(on_big, ' ms', 1000, 0)}")
    print(f"  on a checkout of ten files: {spread(on_small, ' ms', 1000, 0)}")
    print(f"  difference: {(median(on_big) - median(on_small)) * 1000:.0f} ms "
          f"({median(on_big) / median(on_small):.2f}×)")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        files = node_modules(big, 2_000 if QUICK else FILES)
        small.mkdir()
        for i in range(10):
            (small / f"f{i}.txt").write_text("x\n")
        os.chown(small, 1000, 1000)
        await search(big, files, rounds(9, 1))
        await session_start(big, small, rounds(8, 1))


if __name__ == "__main__":
    asyncio.run(main())
