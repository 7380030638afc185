"""Shared fixtures: the Docker engine, workspaces owned like a user's checkout, leak checks."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import docker
    import docker.errors
except ImportError:  # pragma: no cover - docker is a runtime dependency
    docker = None


def _engine() -> docker.DockerClient | None:
    if docker is None:
        return None
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception:
        return None


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = _engine()
    if client is None:
        # CI bootstraps an engine; a developer without one gets a clear skip, never a fake.
        pytest.skip("no Docker engine answers (run scripts/bootstrap)")
    yield client
    client.close()


@pytest.fixture
def user_workspace(tmp_path: Path) -> Path:
    """A checkout owned by uid 1000, like a laptop user's (we made it, so chown is ours to do)."""
    ws = tmp_path / "repo"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may leave a sandloop container behind."""
    client = _engine()
    if client is None:
        return
    mine = [
        c for c in client.containers.list(all=True, filters={"label": "sandloop.session"})
        if (c.labels or {}).get("sandloop.owner_pid") == str(os.getpid())
    ]
    if mine:
        names = ", ".join(c.name for c in mine)
        for c in mine:
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True, v=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nLEAK: the test suite left sandloop containers behind: {names}")


def copy_tree(src: Path, dst: Path, uid: int = 1000) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(dst, uid, uid)
    return dst
