"""The Kubernetes back-end's tests run against the fake API server (:mod:`tests.k8s.fake`,
pods backed by local Docker containers) — or, with ``SANDLOOP_K8S_CONTEXT`` set (``make
test-k8s``), against that real cluster: the same tests, except those marked ``fake_only``, which
reach behind the API (killing a pod's container, playing an old API server)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.docker import DockerConfig
from sandbox.kubernetes.options import KubernetesOptions
from tests.k8s.fake import FakeKubernetes

#: a kubeconfig context naming a real cluster: the back-end tests run there instead
REAL_CONTEXT = os.environ.get("SANDLOOP_K8S_CONTEXT")
REAL_NAMESPACE = os.environ.get("SANDLOOP_K8S_NAMESPACE", "sandloop-test")
#: the image a real cluster pulls (push the sandbox image there first; see docs/kubernetes.md)
REAL_IMAGE = os.environ.get("SANDLOOP_K8S_IMAGE")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not REAL_CONTEXT:
        return
    skip = pytest.mark.skip(reason="reaches behind the API server: the fake's only")
    for item in items:
        if "fake_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def fake(request: pytest.FixtureRequest) -> Iterator[FakeKubernetes | None]:
    """The fake API server (None against a real cluster, where no Docker engine is needed)."""
    if REAL_CONTEXT:
        yield None
        return
    docker_client: Any = request.getfixturevalue("docker_client")
    with FakeKubernetes(docker_client, runtime_classes={"gvisor": "runsc"}) as server:
        yield server


@pytest.fixture
def options(fake: FakeKubernetes | None) -> KubernetesOptions:
    if fake is None:
        return KubernetesOptions(context=REAL_CONTEXT, namespace=REAL_NAMESPACE, image=REAL_IMAGE,
                                 start_timeout_s=600)
    return KubernetesOptions(kubeconfig=str(fake.kubeconfig()), start_timeout_s=120)


@pytest.fixture
def config() -> DockerConfig:
    return DockerConfig(memory="512m", cpus=1.0)


def policy_file(tmp_path: Path, text: str, options: KubernetesOptions) -> Path:
    """A policy running on Kubernetes with ``options`` (as its [backend.kubernetes] table)."""
    lines = ["", "[backend]", 'type = "kubernetes"', "", "[backend.kubernetes]"]
    for key, value in options.model_dump(exclude_defaults=True).items():
        lines.append(f"{key} = {value!r}".replace("'", '"'))
    path = tmp_path / "policy.toml"
    path.write_text(text + "\n".join(lines) + "\n")
    return path
