"""sandloop's seccomp filter in Docker sandboxes, with runc and with gVisor, for the usual laptop
user (uid 1000) and for a root-owned checkout (uid 0, every capability dropped): the helper
reports it in force, every route to a setid bit fails and leaves none on the host's files,
calls of another ABI kill the process, and ordinary work (pip, git, gcc, node, threads) goes on.
Pods: tests/k8s/test_seccomp.py; the filter itself: tests/sandbox/test_seccomp.py."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerConfig, DockerSession

from .filter_cases import check, prepare, setid_files

pytestmark = pytest.mark.docker


@pytest.fixture(params=["uid1000", "uid0"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    ws = tmp_path / "repo"
    ws.mkdir()
    if request.param == "uid1000":
        os.chown(ws, 1000, 1000)
    return ws


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
async def test_the_helpers_filter_holds_in_a_container(docker_client: docker.DockerClient, workspace: Path,
                                                       runtime: str) -> None:
    if runtime == "runsc" and "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("the engine has no runsc runtime (scripts/bootstrap registers it where apt has it)")
    prepare(workspace)
    async with await DockerSession.create(workspace, DockerConfig(runtime=runtime), client=docker_client) as s:
        assert s.hello is not None
        # The engine's profile (the same rules) and ours; gVisor reports the mode alone.
        assert s.hello["seccomp"] == {"filter": "installed", "mode": 2, "filters": None if runtime == "runsc" else 2,
                                      "arch": platform.machine()}
        await check(s, gvisor=runtime == "runsc")
    assert setid_files(workspace) == []
