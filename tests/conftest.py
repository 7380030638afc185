"""Shared fixtures: the Docker engine, workspaces owned like a user's checkout, leak checks.

The suite promises a real engine (and a real Chromium): when the engine does not answer, every
test that needs it FAILS with the reason, rather than quietly skipping. A developer who knows
what they are giving up opts out with ``SANDLOOP_TESTS_ALLOW_SKIP=1``; the skips are then
listed at the end of the run (``make test`` passes ``-rs``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import docker
    import docker.errors
except ImportError:  # pragma: no cover - docker is a runtime dependency
    docker = None

from sandbox.lifecycle import LABEL

#: Set to 1 to let the tests that need a Docker engine skip when none answers.
ALLOW_SKIP = "SANDLOOP_TESTS_ALLOW_SKIP"


def _engine() -> tuple[docker.DockerClient | None, str]:
    """A client whose engine answers, or None and why not."""
    if docker is None:
        return None, "the docker package is not installed"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        return client, ""
    except Exception as exc:
        return None, str(exc) or type(exc).__name__


def missing(what: str, why: str) -> None:
    """Fail the test (or skip it, when the developer opted out) because ``what`` is missing."""
    message = f"{what} ({why}): run scripts/bootstrap, or set {ALLOW_SKIP}=1 to skip what needs it"
    if os.environ.get(ALLOW_SKIP) == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client, why = _engine()
    if client is None:
        # A session fixture's failure is cached: every test that needs the engine reports
        # this one reason, and the engine is asked once.
        missing("no Docker engine answers", why)
    assert client is not None
    yield client
    client.close()


@pytest.fixture
def user_workspace(tmp_path: Path) -> Path:
    """A checkout owned by uid 1000, like a laptop user's (we made it, so chown is ours to do)."""
    ws = tmp_path / "repo"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


def _name(row: dict[str, Any]) -> str:
    names = row.get("Names") or [row.get("Name") or row["Id"]]
    return str(names[0]).lstrip("/")


def leftovers(client: docker.DockerClient, pid: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sandloop containers and networks process ``pid`` created and did not remove.

    The low-level listings carry names and labels themselves: inspecting each container after
    listing it (``containers.list``) would race with containers that remove themselves.
    """
    filters = {"label": [LABEL, f"sandloop.owner_pid={pid}"]}
    containers = client.api.containers(all=True, filters=filters)
    networks = client.api.networks(filters=filters)
    return list(containers), list(networks)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may leave a sandloop container or network behind."""
    client, _ = _engine()
    if client is None:
        return
    with contextlib.closing(client):
        containers, networks = leftovers(client, os.getpid())
        if not containers and not networks:
            return
        for row in containers:  # containers first: a network with members cannot go
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(row["Id"], force=True, v=True)
        for row in networks:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_network(row["Id"])
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    kinds = [("containers", containers), ("networks", networks)]
    found = "; ".join(f"{kind}: {', '.join(map(_name, rows))}" for kind, rows in kinds if rows)
    print(f"\nLEAK: the test suite left sandloop {found} behind")


def copy_tree(src: Path, dst: Path, uid: int = 1000) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(dst, uid, uid)
    return dst
