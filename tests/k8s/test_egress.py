"""A policy's network allow-list on the Kubernetes back-end: the session pod reaches its egress
proxy pod and nothing else, the proxy forwards only what the list names, and every decision
reaches the session's ``on_egress`` — with nothing aimed outside the project's own containers
(the target is a pod of the fake, serving ``http.server``)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import images
from sandbox.docker import DockerConfig
from sandbox.egress import EgressDecision
from sandbox.kubernetes.cluster import Cluster, pod_running
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker, pytest.mark.fake_only]

PROBE = r'''
import json, os, socket, sys, urllib.error, urllib.request
ip = sys.argv[1]
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return [r.status, r.read().decode()[:40]]
    except urllib.error.HTTPError as e:
        return [e.code, e.headers.get("X-Sandloop-Rule")]
    except OSError as e:
        return [None, type(e).__name__]
out = {"allowed": get(f"http://{ip}:8000/"), "other_port": get(f"http://{ip}:8001/")}
try:
    socket.create_connection((ip, 8000), timeout=5).close()
    out["direct"] = "connected"
except OSError as e:
    out["direct"] = type(e).__name__
print(json.dumps(out))
'''


@pytest.fixture
def target(fake: FakeKubernetes, options: KubernetesOptions) -> Iterator[str]:
    """A pod serving HTTP on port 8000; its IP."""
    cluster = Cluster(options)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "target", "labels": {"app": "target"}},
            "spec": {"containers": [{"name": "web", "image": images.image_name("minimal"),
                                     "command": ["python3", "-m", "http.server", "8000", "-d", "/"],
                                     "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}
    cluster.create_pod(body)
    try:
        pod = cluster.wait_pod("target", pod_running("web"), 120)
        yield str(pod["status"]["podIP"])
    finally:
        cluster.delete_pod("target")
        cluster.close()


async def test_allow_list_through_the_proxy_pod(user_workspace: Path, options: KubernetesOptions,
                                                target: str) -> None:
    decisions: list[EgressDecision] = []
    config = DockerConfig(memory="512m", network_allow=(f"{target}:8000",), on_egress=decisions.append)
    async with await KubernetesSession.create(user_workspace, config, options) as session:
        assert session.egress is not None
        r = await session.run(f"python3 -c {shlex.quote(PROBE)} {target}")
        assert r.exit_code == 0, r.stderr.text
        out = json.loads(r.stdout.text)
        proxy_ip = session.egress.address
        env = (await session.run("echo $HTTPS_PROXY")).stdout.text.strip()
    assert env == f"http://{proxy_ip}:3128"
    assert out["allowed"][0] == 200
    assert out["other_port"] == [403, "shell.network"]  # refused by the proxy, naming the rule
    assert out["direct"] != "connected"  # no way around the proxy
    seen = {(d.allowed, d.target) for d in decisions}
    assert (True, f"{target}:8000") in seen and (False, f"{target}:8001") in seen


async def test_the_proxy_pod_goes_with_the_session(user_workspace: Path, options: KubernetesOptions,
                                                   fake: FakeKubernetes) -> None:
    config = replace(DockerConfig(memory="512m"), network_allow=("example.com",))
    session = await KubernetesSession.create(user_workspace, config, options)
    names = {p["metadata"]["name"] for p in fake.store.list("pods", fake.namespace, [])}
    assert f"sandloop-{session.session_id}-egress" in names
    await session.close()
    assert fake.store.list("pods", fake.namespace, [("sandloop.session", session.session_id)]) == []
