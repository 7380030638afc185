"""Tests that exercise the suite's own guards (tests/conftest.py) from a child pytest.

``tests/testing/test_suite_guards.py`` runs them one at a time with a chosen environment and
reads the child's outcome. The file name has no ``test_`` prefix, so a normal run does not
collect them: one of them leaks on purpose.
"""

from __future__ import annotations

import os

import docker

from sandbox import images
from sandbox.lifecycle import owner_labels, proc_start_time


def test_needs_the_engine(docker_client: docker.DockerClient) -> None:
    assert docker_client.ping()


def test_leaves_a_container_and_a_network(docker_client: docker.DockerClient) -> None:
    """Leaves a container and a network owned by this process, and a container owned by the
    parent (the test that runs us: alive, so no concurrent reaper takes it meanwhile)."""
    token = os.environ["PROBE_TOKEN"]
    mine = owner_labels(f"probe-{token}", 600, 600)
    docker_client.api.create_network(f"sandloop-probe-{token}", internal=True, labels=mine)
    image = images.image_name("shell")
    docker_client.containers.run(image, ["sleep", "600"], detach=True, network_mode="none",
                                 name=f"sandloop-probe-{token}", labels=mine)
    parent = os.getppid()
    theirs = {**mine, "sandloop.owner_pid": str(parent), "sandloop.owner_start": proc_start_time(parent) or ""}
    docker_client.containers.run(image, ["sleep", "600"], detach=True, network_mode="none",
                                 name=f"sandloop-probe-{token}-theirs", labels=theirs)
