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
from tests.sandbox.read_only import NESTED_CONFIG, READ_ONLY, Opener, ReadOnlyPaths

pytestmark = [pytest.mark.docker]


class TestReadOnlyPaths(ReadOnlyPaths):
    @pytest.fixture
    def opener(self, docker_client: docker.DockerClient) -> Opener:
        @asynccontextmanager
        async def open_session(ws: Path) -> AsyncIterator[Session]:
            async with await DockerSession.create(ws, DockerConfig(read_only_paths=READ_ONLY),
                                                  client=docker_client) as session:
                yield session

        return open_session

    @pytest.fixture
    def deep_on_host(self) -> bytes:
        return NESTED_CONFIG + b"evil\n"  # the checkout itself is mounted: written, as documented
