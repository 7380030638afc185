"""The fake API server itself, where what the back-end's tests rely on is not obvious."""

from __future__ import annotations

import pytest

from sandbox import images
from sandbox.kubernetes.cluster import Cluster, pod_running
from sandbox.kubernetes.options import KubernetesOptions
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker, pytest.mark.fake_only]


def test_more_pods_at_once_than_the_loop_has_threads(options: KubernetesOptions, fake: FakeKubernetes) -> None:
    """Every running pod keeps a thread waiting for its container: in the loop's default executor
    (6 threads on 2 cores) the seventh pod stayed ContainerCreating for ever."""
    cluster = Cluster(options)
    names = [f"many-{i}" for i in range(8)]
    try:
        for name in names:
            cluster.create_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                "spec": {"containers": [{"name": "c", "image": images.image_name("minimal"),
                                                         "command": ["sleep", "600"]}]}})
        for name in names:
            cluster.wait_pod(name, pod_running("c"), 60)
    finally:
        for name in names:
            cluster.delete_pod(name)
        cluster.close()
    assert all(fake.container(name) is None for name in names)
