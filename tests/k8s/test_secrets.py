"""``[secrets]`` on the Kubernetes back-end: the proxy pod adds the token, told it over its attach
stream; the sandbox pod, the pod specs and the decisions never hold it.

The server is a pod of the fake (its pods are containers), reached by its IP as the cluster's
pods are; its certificate names that IP, so it is written into the pod once the IP is known.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox import images
from sandbox.bundle import file_archive
from sandbox.docker import DockerConfig
from sandbox.egress import EgressDecision
from sandbox.injection import SecretSpec
from sandbox.kubernetes.cluster import Cluster, pod_running
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from tests.egress import https_world
from tests.egress.https_world import PORT
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker, pytest.mark.fake_only]

ENV = "SANDLOOP_TEST_K8S_TOKEN"
# The server waits for its certificates: they name the pod's IP, known once it runs.
WAIT = ('import json, os, time\nwhile not os.path.exists("/tmp/env.json"):\n    time.sleep(0.05)\n'
        'os.environ.update(json.load(open("/tmp/env.json")))\n')


@pytest.fixture
def server(fake: FakeKubernetes, options: KubernetesOptions, docker_client: docker.DockerClient,
           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """The HTTPS server as a pod; its IP and the token it expects."""
    cluster = Cluster(options)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "secret-target", "labels": {"app": "target"}},
            "spec": {"containers": [{"name": "web", "image": images.image_name("minimal"),
                                     "command": ["python3", "-u", "-c", WAIT + https_world.SERVER, str(PORT), "8444"],
                                     "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}
    cluster.create_pod(body)
    try:
        ip = str(cluster.wait_pod("secret-target", pod_running("web"), 120)["status"]["podIP"])
        pki = https_world.make_pki((ip,))
        (tmp_path / "trust.pem").write_text(pki.ca_pem)
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "trust.pem"))
        token = f"sl-k8s-{secrets.token_hex(20)}"
        monkeypatch.setenv(ENV, token)
        name = f"fake-k8s-{fake.server_id}-{fake.namespace}-secret-target"
        [row] = docker_client.api.containers(filters={"name": name})
        env = json.dumps(https_world.server_env(pki, token)).encode()
        docker_client.api.put_archive(row["Id"], "/tmp", file_archive("env.json", env, 0o444))
        for line in docker_client.api.logs(row["Id"], stream=True, follow=True):
            if b"serving" in line:
                break
        yield ip, token
    finally:
        cluster.delete_pod("secret-target")
        cluster.close()


async def test_the_proxy_pod_adds_the_secret_the_sandbox_pod_never_sees(
        user_workspace: Path, options: KubernetesOptions, fake: FakeKubernetes, server: tuple[str, str]) -> None:
    ip, token = server
    decisions: list[EgressDecision] = []
    (user_workspace / "scan.py").write_text(https_world.SCAN)
    config = DockerConfig(memory="512m", network_allow=(f"{ip}:{PORT}",), on_egress=decisions.append,
                          secrets=(SecretSpec("api", ip, PORT, env=ENV),))
    async with await KubernetesSession.create(user_workspace, config, options) as session:
        checked = await session.run(f"curl -sS --max-time 30 https://{ip}:{PORT}/check", timeout_s=60)
        echoed = await session.run(f"curl -sS --max-time 30 https://{ip}:{PORT}/echo", timeout_s=60)
        scan = await session.run(https_world.scan_command(token), timeout_s=600)
        pods = fake.store.list("pods", fake.namespace, [("sandloop.session", session.session_id)])
    assert checked.exit_code == 0, checked.stderr.text
    assert json.loads(checked.stdout.text)["ok"] is True
    assert echoed.stdout.text == "you sent: Bearer " + "*" * len(token)
    assert scan.exit_code == 0 and json.loads(scan.stdout.text)["hits"] == [], scan.stdout.text + scan.stderr.text
    # Neither pod's spec (what the API server stores) holds it: the proxy was told over its stream.
    assert len(pods) == 2 and token not in json.dumps(pods)
    proxy = next(p for p in pods if p["metadata"]["name"].endswith("-egress"))
    assert "--secrets" in json.dumps(proxy["spec"]["containers"][0]["command"])
    assert {(d.secret, d.target) for d in decisions if d.secret} == {("api", f"{ip}:{PORT}")}
    assert token not in repr(decisions)
