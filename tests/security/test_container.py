"""Hostile commands inside the container, for the usual laptop user (uid 1000) and for a
root-owned checkout (uid 0, every capability dropped). Each asserts the real effect on the host
(no setuid/setgid file in the checkout, the protected file unchanged) or inside the sandbox (the
session still answers), not only an exit code."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerSession

pytestmark = pytest.mark.docker

# Every route to a setuid/setgid bit: chmod family, open/creat modes, mkdir modes, copies that
# keep modes, archives, the image's own setuid programs.
SETID = [
    "cp /bin/bash sh && chmod u+s,g+s sh",
    "cp /bin/bash sh2 && chmod 4755 sh2",
    "cp /bin/bash sh3 && chmod 2755 sh3",
    "cp /bin/bash sh4 && chmod +s sh4",
    "install -m 4755 /bin/true inst",
    "install -m 2755 /bin/true inst2",
    "install -d -m 2775 instdir",
    "mkdir -m 2775 gdir",
    "mkdir -m 4775 udir",
    "mkdir plain && chmod g+s plain",
    "cp -p /bin/su su-copy",
    "cp --preserve=mode /usr/bin/passwd passwd-copy",
    "rsync -p /bin/su rs 2>/dev/null || cp -a /bin/su su-a",
    "tar -C / -cf - bin/su | tar --same-permissions -xf -",
    "python3 -c \"import os; os.close(os.open('py', os.O_CREAT | os.O_WRONLY, 0o6755))\"",
    "python3 -c \"import os; os.close(os.open('py2', os.O_CREAT | os.O_WRONLY, 0o4700))\"",
    "python3 -c \"import os; open('py3','w').close(); os.chmod('py3', 0o6755)\"",
    "python3 -c \"import os; fd=os.open('py4', os.O_CREAT|os.O_WRONLY, 0o755); os.fchmod(fd, 0o4755)\"",
    "python3 -c \"import os; open('py5','w').close(); os.chmod('py5', 0o2755, follow_symlinks=True)\"",
    "python3 -c \"import os; os.mkdir('pyd', 0o2777); os.chmod('pyd', 0o2777)\"",
    "python3 -c \"import os; os.mknod('node', 0o6644 | 0o100000)\"",
    "python3 -c \"import os; d=os.open('.', os.O_RDONLY); open('py6','w').close(); os.chmod('py6', 0o4755, dir_fd=d)\"",
    "perl -e 'open(F, \">pl\"); close F; chmod 04755, \"pl\" or exit 1' 2>/dev/null || false",
    "ln -s sh lnk && chmod 4755 lnk",
]

# What a container must not be able to do at all.
ESCAPES = [
    ("mount -t tmpfs none /mnt", ""),
    ("unshare -U true", ""),
    ("unshare -r true", ""),
    ("unshare -n true", ""),
    ("echo x > /proc/sys/kernel/hostname", ""),
    ("echo 1 > /proc/sysrq-trigger", ""),
    ("echo x > /etc/passwd", ""),
    ("touch /usr/bin/planted", ""),
    ("cat /proc/1/environ", ""),  # the helper is non-dumpable
    ("echo desync > /proc/1/fd/1", ""),  # the helper's protocol stream
    ("cat /proc/1/mem", ""),
    ("test -e /var/run/docker.sock", ""),
    ("test -e /run/docker.sock", ""),
    ("python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)\"", ""),
    ("python3 -c \"import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\"", ""),
    ("python3 -c \"import ctypes; assert ctypes.CDLL(None).ptrace(16, 1, 0, 0) == 0\"", ""),
    ("python3 -c \"import ctypes; assert ctypes.CDLL(None).syscall(321, 0, 0, 0) >= 0\"", ""),  # bpf
    ("python3 -c \"import ctypes; assert ctypes.CDLL(None).syscall(298, 0, 0, 0, 0, 0) >= 0\"", ""),  # perf
    ("python3 -c \"import ctypes; assert ctypes.CDLL(None).syscall(250, 0, 0, 0) >= 0\"", ""),  # keyctl
    ("python3 -c \"import ctypes; assert ctypes.CDLL(None).syscall(425, 8, 0) >= 0\"", ""),  # io_uring
    ("echo evil > .git/hooks/pre-commit", ".git/hooks/pre-commit"),
    ("rm -f .git/config", ".git/config"),
    ("mv .git .git-moved", ".git/config"),
    ("chmod 777 .git/config", ".git/config"),
    ("ln -sf /etc/passwd .git/config", ".git/config"),
]


async def _check_no_setid(session: DockerSession, ws: Path) -> None:
    for command in SETID:
        await session.run(command)  # what each manages to create is checked below
    for path in ws.rglob("*"):
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), f"{path.relative_to(ws)}: {oct(mode)}"
    after = await session.run("echo still here")
    assert after.stdout.text == "still here\n"


def _git_checkout(ws: Path) -> dict[str, bytes]:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    owner = ws.stat()
    for path in [ws / ".git", *(ws / ".git").rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid)
    return {str(p.relative_to(ws)): p.read_bytes() for p in (ws / ".git").rglob("*") if p.is_file()}


async def _check_escapes(session: DockerSession, ws: Path, before: dict[str, bytes]) -> None:
    for command, _protected in ESCAPES:
        result = await session.run(command)
        assert result.exit_code != 0, f"{command!r} succeeded: {result.stdout.text!r}"
    after = {str(p.relative_to(ws)): p.read_bytes() for p in (ws / ".git").rglob("*") if p.is_file()}
    assert after == before  # the host's git sees exactly what it had
    assert not (ws / ".git-moved").exists()
    assert (await session.run("echo alive")).stdout.text == "alive\n"


async def test_no_setuid_or_setgid_bit_reaches_the_checkout(docker_client: docker.DockerClient,
                                                            workspace: Path) -> None:
    async with await DockerSession.create(workspace, client=docker_client) as session:
        await _check_no_setid(session, workspace)


async def test_the_container_cannot_reach_past_itself(docker_client: docker.DockerClient, workspace: Path) -> None:
    before = _git_checkout(workspace)
    async with await DockerSession.create(workspace, client=docker_client) as session:
        await _check_escapes(session, workspace, before)


async def test_a_commit_never_writes_a_setid_mode(docker_client: docker.DockerClient, workspace: Path) -> None:
    """apply_patch writes through the session's commit: an explicit mode with the bits, or the old
    mode of a setuid file whose content the model replaces, both come out without them."""
    from sandloop.files import FileChange

    old = workspace / "tool"
    old.write_text("#!/bin/sh\necho old\n")
    os.chown(old, workspace.stat().st_uid, workspace.stat().st_gid)
    os.chmod(old, 0o4755)  # the user's own setuid file, set on the host
    async with await DockerSession.create(workspace, client=docker_client) as session:
        await session.commit([FileChange("tool", b"#!/bin/sh\necho new\n", None),
                              FileChange("made", b"x", 0o6755)])
    assert stat.S_IMODE(old.stat().st_mode) == 0o755 and old.read_text().endswith("new\n")
    assert stat.S_IMODE((workspace / "made").stat().st_mode) == 0o755
