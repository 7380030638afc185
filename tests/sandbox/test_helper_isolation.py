"""Commands cannot touch the helper that serves them: not its code, not its descriptors, not its
memory; and nothing of the host's environment reaches the container. Real container, real effect:
the bytes on both sides, the protocol still in step, no restart."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import platform
import stat
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox import docker as docker_backend
from sandbox.bundle import HELPER_MODULES, zipapp
from sandbox.docker import HELPER_PATH, DockerSession
from sandbox.helper.subreaper import program
from sandloop.errors import SandboxUnavailable

from .containers import environ, host_pids

pytestmark = [pytest.mark.docker]


def _workspace(tmp_path: Path, owner: str) -> Path:
    """A checkout owned by root (the sandbox runs as uid 0 without capabilities) or by uid 1000."""
    ws = tmp_path / f"ws-{owner}"
    ws.mkdir()
    if owner == "user":
        os.chown(ws, 1000, 1000)
    return ws


async def _in_step(s: DockerSession, restarts: int = 0) -> None:
    """The protocol is in step: a command answers correctly and promptly, the same container."""
    r = await asyncio.wait_for(s.run("echo in-step; echo err >&2; exit 5", timeout_s=10), 30)
    assert (r.stdout.text, r.stderr.text, r.exit_code) == ("in-step\n", "err\n", 5)
    assert s.restarts == restarts


def _helper_mount(s: DockerSession) -> dict[str, object]:
    (mount,) = [m for m in s.inspect()["Mounts"] if m["Destination"] == HELPER_PATH]
    return dict(mount)


CODE_ATTACKS = [
    "chmod 666 /opt/sandloop/helper.pyz",
    "echo '# planted' >> /opt/sandloop/helper.pyz",
    "truncate -s 0 /opt/sandloop/helper.pyz",
    "python3 -c \"open('/opt/sandloop/helper.pyz', 'r+b').write(b'PK-planted')\"",
    "rm -f /opt/sandloop/helper.pyz",
    "mv /opt/sandloop/helper.pyz /tmp/helper.pyz",
    "cp /bin/true /opt/sandloop/helper.pyz",
    "ln -sf /bin/true /opt/sandloop/helper.pyz",
    "touch /opt/sandloop/other.pyz",
    "umount /opt/sandloop/helper.pyz",
    "echo planted > /proc/1/root/opt/sandloop/helper.pyz",
    "printf 'import os; os.system(\"id\")\\n' > /proc/1/cwd/sitecustomize.py",
    "chmod 777 /opt/sandloop/subreaper",
    "cp /bin/true /opt/sandloop/subreaper",
    "printf '#!/bin/sh\\n' > /opt/sandloop/subreaper",
    "rm -f /opt/sandloop/subreaper",
]


@pytest.mark.parametrize("owner", ["root", "user"])
async def test_commands_cannot_change_the_helper_code(docker_client: docker.DockerClient, tmp_path: Path,
                                                      owner: str) -> None:
    ws = _workspace(tmp_path, owner)
    expected = hashlib.sha256(zipapp(HELPER_MODULES, bytecode=True)).hexdigest()
    expected_subreaper = hashlib.sha256(program() or b"").hexdigest()
    async with await DockerSession.create(ws, client=docker_client) as s:
        mount = _helper_mount(s)
        host_file = Path(str(mount["Source"]))
        assert mount["RW"] is False and expected in host_file.name
        assert ws not in host_file.parents and tmp_path not in host_file.parents
        assert stat.S_IMODE(host_file.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(host_file.stat().st_mode) == 0o444
        assert (await s.run("id -u")).stdout.text == ("0\n" if owner == "root" else "1000\n")
        for attack in CODE_ATTACKS:
            r = await s.run(attack)
            assert r.exit_code != 0, (attack, r.stdout.text, r.stderr.text)
        inside = await s.run("sha256sum /opt/sandloop/helper.pyz /opt/sandloop/subreaper; "
                             "ls -A /opt/sandloop /workspace")
        assert inside.stdout.text.split()[:4] == [expected, "/opt/sandloop/helper.pyz", expected_subreaper,
                                                  "/opt/sandloop/subreaper"]
        assert "other.pyz" not in inside.stdout.text and "sitecustomize.py" not in inside.stdout.text
        assert hashlib.sha256(host_file.read_bytes()).hexdigest() == expected
        assert s.hello is not None and s.hello["subreaper"] == "exec"
        await _in_step(s)
        # The code the next helper runs is the same: a replacement container starts and answers.
        assert s.container is not None
        await asyncio.to_thread(s.container.kill)
        with contextlib.suppress(SandboxUnavailable):  # the call racing the container's death
            await s.run("true")
        await _in_step(s, restarts=1)
        assert hashlib.sha256(host_file.read_bytes()).hexdigest() == expected


#: Every way we know to reach another process's descriptors or memory; each tries to write a
#: frame header announcing 4 GiB (it would stall the host's reader) or to stop the helper.
_FRAME = r"\377\377\377\377garbage"
_PROCESS_VM_WRITEV = {"x86_64": 311, "aarch64": 271}.get(platform.machine(), 311)
DESCRIPTOR_ATTACKS = {
    "fd": f"for fd in $(seq 0 40); do printf '{_FRAME}' > /proc/$H/fd/$fd && echo wrote $fd; done",
    "task fd": f"for t in /proc/$H/task/*; do for fd in 0 1 2 3 4 5 6; do printf '{_FRAME}' > $t/fd/$fd "
               "&& echo wrote $t $fd; done; done",
    "mem": "python3 -c \"import sys; f = open('/proc/%s/mem' % sys.argv[1], 'r+b'); print('opened')\" $H",
    "root": "ls /proc/$H/root/ && echo listed",
    "cwd": "ls /proc/$H/cwd/ && echo listed",
    "environ": "cat /proc/$H/environ && echo read",
    "ptrace": "python3 -c \"import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
              "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]; "
              "r = libc.ptrace(16, int(sys.argv[1]), None, None); print('attached' if r == 0 else 'refused'); "
              "sys.exit(r != 0)\" $H",
    "pidfd_getfd": "python3 -c \"import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
                   "pfd = libc.syscall(434, int(sys.argv[1]), 0); "
                   "got = [fd for fd in range(12) if pfd >= 0 and libc.syscall(438, pfd, fd, 0) >= 0]; "
                   "print('got', got) if got else sys.exit(1)\" $H",
    "process_vm_writev": "python3 -c \"import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
                         "buf = ctypes.create_string_buffer(8); "
                         "iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8); "
                         f"r = libc.syscall({_PROCESS_VM_WRITEV}, int(sys.argv[1]), iov, 1, iov, 1, 0); "
                         "print('wrote') if r >= 0 else sys.exit(1)\" $H",
    "signals": "kill -STOP $H; kill -INT $H; kill -TERM $H; kill -HUP $H; sleep 0.2; "
               "grep State /proc/$H/status | grep -v stopped",
}


@pytest.mark.parametrize("owner", ["root", "user"])
async def test_commands_cannot_reach_the_helper(docker_client: docker.DockerClient, tmp_path: Path,
                                                owner: str) -> None:
    ws = _workspace(tmp_path, owner)
    async with await DockerSession.create(ws, client=docker_client) as s:
        assert s.hello is not None and s.hello["non_dumpable"] and s.hello["pid"] == 1
        env = {"H": str(s.hello["pid"])}
        for name, attack in DESCRIPTOR_ATTACKS.items():
            r = await asyncio.wait_for(s.run(attack, timeout_s=10, env=env), 30)
            if name == "signals":
                assert "sleeping" in r.stdout.text.lower() or "running" in r.stdout.text.lower(), r
            else:
                assert r.exit_code != 0, (name, r.stdout.text, r.stderr.text)
                assert not any(w in r.stdout.text for w in ("wrote", "opened", "listed", "attached", "got ")), name
            await _in_step(s)
        # Nothing else in the container holds the helper's stream: write junk into every
        # descriptor of every other process we can open, then check the protocol.
        spray = (f"for p in $(ls /proc | grep -E '^[0-9]+$'); do [ $p = $$ ] && continue; "
                 f"for fd in /proc/$p/fd/*; do printf '{_FRAME}' > $fd; done; done 2>/dev/null; true")
        await asyncio.wait_for(s.run(spray, timeout_s=10), 30)
        await _in_step(s)


async def test_the_host_environment_never_reaches_the_container(docker_client: docker.DockerClient,
                                                                 user_workspace: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-inside")
    monkeypatch.setenv("SANDLOOP_TEST_MARKER", "marker-never-inside")
    secrets = ("sk-test-never-inside", "marker-never-inside")
    async with await DockerSession.create(user_workspace, client=docker_client) as s:
        config_env = s.inspect()["Config"]["Env"] or []
        assert not [e for e in config_env if any(x in e for x in secrets) or e.startswith("OPENAI_API_KEY=")]
        r = await s.run("tr '\\0' '\\n' < /proc/self/environ; env")
        assert r.exit_code == 0 and "PATH=" in r.stdout.text
        assert not any(x in r.stdout.text for x in secrets)
        # Every process in the container, read from the host: the helper (PID 1), a background job.
        await s.run("sleep 1004 >/dev/null 2>&1 &")
        pids = host_pids(s)
        assert s.inspect()["State"]["Pid"] in pids and len(pids) >= 2
        for pid in pids:
            env = environ(pid)
            assert "OPENAI_API_KEY" not in env and "SANDLOOP_TEST_MARKER" not in env, (pid, env)
            assert not any(x in value for value in env.values() for x in secrets)


@pytest.mark.parametrize("owner", ["root", "user"])
async def test_the_helpers_socket_is_the_helpers_alone(docker_client: docker.DockerClient, tmp_path: Path,
                                                       owner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests travel over the host's unix socket, which nobody else can ever connect to: gone
    from the container before the first command, its directory read-only, no place on the host
    left behind; the protocol stays in step."""
    made: list[Path] = []

    class Recorded(docker_backend.HelperListener):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            made.append(self.dir)

    monkeypatch.setattr(docker_backend, "HelperListener", Recorded)
    ws = _workspace(tmp_path, owner)
    async with await DockerSession.create(ws, client=docker_client) as s:
        assert s.hello is not None and s.hello["socket"]
        assert (await s._client())._recv is None  # read by the event loop: the socket's client
        assert made and not made[0].exists()  # accepted, then removed from the host at once
        attack = ("python3 -I -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); "
                  "s.connect('/opt/sandloop/socket/helper.sock'); print('connected')\"; "
                  "touch /opt/sandloop/socket/planted && echo planted; ls -a /opt/sandloop/socket")
        r = await asyncio.wait_for(s.run(attack, timeout_s=10), 30)
        assert "connected" not in r.stdout.text and "planted" not in r.stdout.text, r
        assert "helper.sock" not in r.stdout.text
        await _in_step(s)
