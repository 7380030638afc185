"""The suite's own guards (tests/conftest.py), run in a child pytest so they can misbehave.

* No engine: the tests that need one FAIL with the reason, unless the developer opted out with
  SANDLOOP_TESTS_ALLOW_SKIP=1, and then the skip is listed with its reason.
* A container or network the test process left behind fails the session, is named, and is
  removed; one owned by another process is neither reported nor touched.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.conftest import ALLOW_SKIP

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/testing/probes/probe_suite.py"


def child_pytest(test: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one probe test in a fresh pytest from the repository root (so tests/conftest.py
    applies) with ``env`` on top of ours, minus any opt-out we were started with."""
    environ = {k: v for k, v in os.environ.items() if k not in (ALLOW_SKIP, "PYTEST_ADDOPTS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"{PROBE}::{test}"],
        cwd=ROOT, env={**environ, **env}, capture_output=True, text=True, timeout=600, check=False)


def dead_engine(tmp_path: Path) -> str:
    return f"unix://{tmp_path}/no-engine-here.sock"


def test_no_engine_fails_loudly(tmp_path: Path) -> None:
    child = child_pytest("test_needs_the_engine", DOCKER_HOST=dead_engine(tmp_path))
    out = child.stdout
    assert child.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "1 error" in out and "skipped" not in out, out
    assert "no Docker engine answers" in out and f"{ALLOW_SKIP}=1" in out, out


def test_no_engine_skips_only_when_the_developer_opts_out(tmp_path: Path) -> None:
    child = child_pytest("test_needs_the_engine", DOCKER_HOST=dead_engine(tmp_path), **{ALLOW_SKIP: "1"})
    out = child.stdout
    assert child.returncode == pytest.ExitCode.OK, out
    assert "1 skipped" in out, out
    # -rs lists each skip with its reason
    assert any(line.startswith("SKIPPED [1]") and "no Docker engine answers" in line
               for line in out.splitlines()), out


def test_the_probe_passes_with_the_engine(docker_client: docker.DockerClient) -> None:
    """The failure above is the engine's absence, not a broken probe."""
    child = child_pytest("test_needs_the_engine")
    assert child.returncode == pytest.ExitCode.OK and "1 passed" in child.stdout, child.stdout


def _exists(client: docker.DockerClient, name: str) -> bool:
    return bool(client.api.containers(all=True, filters={"name": f"^/{name}$"}))


def test_a_leaked_container_and_network_fail_the_session_and_are_removed(
        docker_client: docker.DockerClient) -> None:
    token = secrets.token_hex(4)
    name = f"sandloop-probe-{token}"
    try:
        child = child_pytest("test_leaves_a_container_and_a_network", PROBE_TOKEN=token)
        out = child.stdout
        assert child.returncode == pytest.ExitCode.TESTS_FAILED, out
        assert "1 passed" in out, out  # the test itself passed: the session check failed it
        leak = next(line for line in out.splitlines() if line.startswith("LEAK:"))
        assert f"containers: {name}" in leak and f"networks: {name}" in leak, leak
        assert "theirs" not in leak, leak
        assert not _exists(docker_client, name)
        assert docker_client.api.networks(names=[name]) == []
        assert _exists(docker_client, f"{name}-theirs")  # another owner's: not ours to remove
    finally:
        for container in (name, f"{name}-theirs"):
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.api.remove_container(container, force=True)
        for row in docker_client.api.networks(names=[name]):
            docker_client.api.remove_network(row["Id"])
