"""A snapshot's tar comes from a sandbox, so it is as hostile as the commands that made it: its
restore (inside the next sandbox) must keep every write inside /tmp. Tested in-process on a
real file system (a tar with absolute names, ``..``, a link planted to the checkout and a member
through it, a hard link out, a setuid file, a fifo), and in a real container resumed from such
a tar: the checkout's victim file is untouched, the honest members are there."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from sandbox.docker import DockerConfig, DockerSession
from sandbox.helper.archive import archive, restore


def _hostile(tar_path: Path, outside: str) -> None:
    with tarfile.open(tar_path, "w") as tar:
        def add(name: str, data: bytes = b"planted\n", **attrs: object) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)

        add("home/kept.txt", b"honest\n")
        add(f"/{outside.strip('/')}/abs.txt")
        add("../escape.txt")
        add("home/../../escape2.txt")
        add("home/link", type=tarfile.SYMTYPE, linkname=outside, size=0)
        add("home/link/victim")  # through the planted link: refused
        add("home/hard", type=tarfile.LNKTYPE, linkname="../workspace/victim", size=0)
        add("home/dangling", type=tarfile.LNKTYPE, linkname="home/nothing", size=0)
        add("home/setuid", b"#!/bin/sh\n", mode=0o4755)
        add("home/fifo", type=tarfile.FIFOTYPE, size=0)


def test_restore_keeps_every_write_inside_its_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "tmp", tmp_path / "workspace"
    root.mkdir()
    outside.mkdir()
    (outside / "victim").write_text("keep me\n")
    tar = tmp_path / "hostile.tar"
    _hostile(tar, str(outside))
    skipped = restore(str(tar), root=str(root))
    assert (outside / "victim").read_text() == "keep me\n"
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "escape2.txt").exists()
    assert not (outside / "abs.txt").exists()
    assert (root / "home" / "kept.txt").read_text() == "honest\n"
    assert not (root / "home" / "hard").exists() and not (root / "home" / "fifo").exists()
    assert stat.S_IMODE((root / "home" / "setuid").stat().st_mode) == 0o755  # the bit dropped
    assert skipped >= 5


def test_archive_then_restore_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "home" / ".local" / "pkg").mkdir(parents=True)
    (src / "home" / ".local" / "pkg" / "mod.py").write_text("VALUE = 1\n")
    os.symlink("pkg/mod.py", src / "home" / ".local" / "alias.py")
    out = io.BytesIO()
    assert archive(["home"], out, root=str(src)) == 0
    tar = tmp_path / "t.tar"
    tar.write_bytes(out.getvalue())
    dst = tmp_path / "dst"
    dst.mkdir()
    assert restore(str(tar), root=str(dst)) == 0
    assert (dst / "home" / ".local" / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
    assert os.readlink(dst / "home" / ".local" / "alias.py") == "pkg/mod.py"


@pytest.mark.docker
async def test_a_hostile_snapshot_cannot_reach_the_checkout(docker_client: object, user_workspace: Path,
                                                             tmp_path: Path) -> None:
    (user_workspace / "victim").write_text("keep me\n")
    os.chown(user_workspace / "victim", 1000, 1000)
    tar = tmp_path / "hostile.tar"
    _hostile(tar, "/workspace")
    os.chmod(tar, 0o644)
    session = await DockerSession.create(user_workspace, DockerConfig(restore=str(tar)), reap_stale=False)
    try:
        listing = await session.run("cat ~/kept.txt; ls -l ~; cat /workspace/victim")
    finally:
        await session.close()
    assert (user_workspace / "victim").read_text() == "keep me\n"
    assert sorted(p.name for p in user_workspace.iterdir()) == ["victim"]
    assert "honest" in listing.stdout.text and "keep me" in listing.stdout.text
    assert "rws" not in listing.stdout.text  # no setuid bit came through
