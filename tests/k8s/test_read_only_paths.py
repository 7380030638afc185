"""A checkout's read-only paths inside a pod — ``.git`` and the policy's, a hooks path,
submodules, nested repositories — in the test shape every back-end shares
(:mod:`tests.sandbox.read_only`): the pod's ``copy-in`` init container writes them, the helper's
container mounts them ``readOnly``, and a command meets a read-only file system, as on Docker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sandbox.base import Session
from sandbox.docker import DockerConfig
from sandbox.kubernetes.manifest import CHECKOUT, COPY_IN_CONTAINER, read_only_subpath
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from tests.k8s.fake import FakeKubernetes
from tests.sandbox.read_only import NESTED_CONFIG, READ_ONLY, Opener, ReadOnlyPaths, own

pytestmark = [pytest.mark.docker]


class TestReadOnlyPaths(ReadOnlyPaths):
    @pytest.fixture
    def opener(self, options: KubernetesOptions) -> Opener:
        @asynccontextmanager
        async def open_session(ws: Path) -> AsyncIterator[Session]:
            config = DockerConfig(memory="512m", read_only_paths=READ_ONLY)
            async with await KubernetesSession.create(ws, config, options) as session:
                yield session

        return open_session

    @pytest.fixture
    def deep_on_host(self) -> bytes:
        return NESTED_CONFIG  # writable in the pod, as documented; never copied back all the same (no .git is)


async def test_the_pod_mounts_each_read_only_path_from_its_copy_in_container(
        user_workspace: Path, options: KubernetesOptions, fake: FakeKubernetes | None) -> None:
    (user_workspace / ".git").mkdir()
    (user_workspace / "lib").mkdir()
    (user_workspace / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    own(user_workspace)
    async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"), options) as session:
        assert session.read_only == (".git", "lib/.git")
        spec = session.inspect()["spec"]
        (init,) = spec["initContainers"]
        assert init["name"] == COPY_IN_CONTAINER and init["securityContext"] == spec["containers"][0]["securityContext"]
        mounts = [(m["mountPath"], m.get("subPath"), m.get("readOnly", False))
                  for m in spec["containers"][0]["volumeMounts"] if m["name"] == "workspace"]
        assert mounts == [("/workspace", CHECKOUT, False), ("/workspace/.git", read_only_subpath(0), True),
                          ("/workspace/lib/.git", read_only_subpath(1), True)]
        statuses = session.inspect()["status"]["initContainerStatuses"]
        assert [s["state"]["terminated"]["exitCode"] for s in statuses] == [0]  # it exited when the copy was in
        r = await session.run("ls -A; cat lib/.git; touch lib/x && echo writable")
        assert r.stdout.text == ".git\nlib\ngitdir: ../.git/modules/lib\nwritable\n"  # nothing of the copy-in's own
        if fake is not None:
            attaches = [p.split("?")[1].split("&")[0] for _, p in fake.requests if f"/pods/{session.pod}/attach?" in p]
            assert attaches == [f"container={COPY_IN_CONTAINER}", "container=helper"]


async def test_a_read_only_workspace_is_read_only_in_the_pod(user_workspace: Path, options: KubernetesOptions) -> None:
    (user_workspace / "a.txt").write_text("one\n")
    own(user_workspace)
    config = DockerConfig(memory="512m", read_only_workspace=True)
    async with await KubernetesSession.create(user_workspace, config, options) as session:
        r = await session.run("cat a.txt; echo two > a.txt")
        assert r.stdout.text == "one\n" and "Read-only file system" in r.stderr.text
    assert (user_workspace / "a.txt").read_text() == "one\n"


async def test_no_git_folder_is_ever_copied_back(user_workspace: Path, options: KubernetesOptions) -> None:
    # A .git the sandbox makes is the sandbox's; on a case-insensitive disk .GIT would be .git.
    own(user_workspace)
    async with await KubernetesSession.create(user_workspace, DockerConfig(memory="512m"), options) as session:
        r = await session.run("mkdir -p made/.git/hooks vendor/.GIT/hooks src lib && "
                              "echo evil > made/.git/hooks/pre-commit && echo evil > vendor/.GIT/hooks/pre-commit && "
                              "echo 'gitdir: /tmp' > lib.git-file && echo 'gitdir: /tmp/x' > lib/.git && "
                              "echo ok > src/ok.txt")
        assert r.exit_code == 0, r.stderr.text
        result = await session.copy_back()
    assert result.written == ["lib.git-file", "src/ok.txt"]
    assert not (user_workspace / "made").exists() and not (user_workspace / "vendor").exists()
    assert not (user_workspace / "lib" / ".git").exists()
