"""sandloop's seccomp filter in Docker sandboxes, with runc and with gVisor, for the usual laptop
user (uid 1000) and for a root-owned checkout (uid 0, every capability dropped): the helper
reports it in force, every route to a setid bit fails and leaves none on the host's files,
calls of another ABI kill the process, and ordinary work (pip, git, gcc, node, threads) goes on.
Pods: tests/k8s/test_seccomp.py; the filter itself: tests/sandbox/test_seccomp.py."""

from __future__ import annotations

import io
import os
import platform
from pathlib import Path

import docker
import pytest

from sandbox import images
from sandbox.docker import DockerConfig, DockerSession, confined
from sandloop.errors import SandboxUnavailable

from .filter_cases import check, prepare, setid_files

pytestmark = pytest.mark.docker


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
        # Processes the helper never started (docker exec): through the helper's exec mode they
        # get its filter; plain, the engine's copy of the rules — except under gVisor, whose
        # runsc applies a container's profile to its first process alone (measured: an exec'd
        # process shows Seccomp: 0 there), so nothing of sandloop's is exec'd plainly.
        assert s.container is not None
        plain = ["sh", "-c", "touch by-exec && chmod u+s by-exec"]
        for argv in ([confined(plain)] if runtime == "runsc" else [confined(plain), plain]):
            code, out = s.container.exec_run(argv, user=s.user, workdir="/workspace")
            assert code != 0 and b"Operation not permitted" in out, (argv, out)
    assert setid_files(workspace) == []


async def test_an_image_whose_python_cannot_install_the_filter_runs_nothing(docker_client: docker.DockerClient,
                                                                           user_workspace: Path) -> None:
    dockerfile = (f"FROM {images.image_name('minimal')}\nUSER 0\n"
                  "RUN rm /usr/lib/python3*/lib-dynload/_ctypes.*.so\n")
    tag = f"sandloop-test-noctypes:{os.getpid()}"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, network_mode="none", rm=True,
                               forcerm=True, pull=False)
    try:
        with pytest.raises(SandboxUnavailable) as info:
            await DockerSession.create(user_workspace, DockerConfig(image=tag), client=docker_client)
        text = str(info.value)
        assert "seccomp filter could not be installed (this image's python3 has no ctypes)" in text
        assert "runs no command" in text and "\n" not in text
    finally:
        docker_client.images.remove(tag, force=True)
