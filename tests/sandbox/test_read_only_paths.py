"""A checkout's read-only paths on Docker — ``.git`` and the policy's, a hooks path, submodules,
nested repositories — in the test shape every back-end shares (:mod:`tests.sandbox.read_only`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import docker
import pytest

from sandbox.base import Session
from sandbox.docker import DockerConfig, DockerSession
from tests.sandbox import read_only
from tests.sandbox.read_only import Opener

pytestmark = [pytest.mark.docker]


@pytest.fixture
def opener(docker_client: docker.DockerClient) -> Opener:
    @asynccontextmanager
    async def open_session(ws: Path) -> AsyncIterator[Session]:
        async with await DockerSession.create(ws, DockerConfig(read_only_paths=read_only.READ_ONLY),
                                              client=docker_client) as session:
            yield session

    return open_session


async def test_writes_into_read_only_paths_are_refused(opener: Opener, user_workspace: Path) -> None:
    await read_only.writes_are_refused(opener, user_workspace)


async def test_patches_into_a_nested_repository_are_refused(opener: Opener, user_workspace: Path) -> None:
    await read_only.patches_are_refused(opener, user_workspace)


async def test_links_to_repositories_are_not_followed(opener: Opener, user_workspace: Path, tmp_path: Path) -> None:
    await read_only.links_are_not_followed(opener, user_workspace, tmp_path / "outside")


async def test_past_the_search_bound_a_nested_repository_is_writable_and_said(
        opener: Opener, user_workspace: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    deep = await read_only.past_the_bound(opener, user_workspace, monkeypatch, caplog)
    assert deep.read_bytes() == read_only.NESTED_CONFIG + b"evil\n"  # the checkout itself is mounted: as documented
