"""The Docker engine going away and coming back, simulated with a proxy in front of the real one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerSession
from sandloop.errors import SandboxUnavailable

from .engine_proxy import EngineProxy

pytestmark = [pytest.mark.docker]


@pytest.fixture
def proxy(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[EngineProxy]:
    with EngineProxy(tmp_path / "engine.sock") as p:
        yield p


def _one_line_engine_error(exc: BaseException) -> None:
    assert type(exc) is SandboxUnavailable, type(exc)
    assert "\n" not in str(exc)
    assert "the Docker engine does not answer" in str(exc)


async def test_engine_down_is_sandbox_unavailable_and_the_session_recovers(proxy: EngineProxy,
                                                                         user_workspace: Path) -> None:
    client = docker.DockerClient(base_url=proxy.url, timeout=30)
    session = await DockerSession.create(user_workspace, client=client)
    try:
        assert (await session.run("echo before")).stdout.text == "before\n"
        running = asyncio.create_task(session.run("sleep 30", timeout_s=60))
        await asyncio.sleep(0.2)
        proxy.cut()
        # The call in flight loses its stream: an answer, not a hang.
        with pytest.raises(SandboxUnavailable):
            await running
        # While the engine is away every call says so, in one line; nothing raw leaks.
        for _ in range(2):
            with pytest.raises(SandboxUnavailable) as info:
                await session.run("echo during")
            _one_line_engine_error(info.value)
        with pytest.raises(SandboxUnavailable) as info:
            await session.read_file("anything")
        _one_line_engine_error(info.value)
        proxy.restore()
        r = await session.run("echo after")
        assert r.stdout.text == "after\n" and r.exit_code == 0
        assert session.restarts == 1 and "died" in session.notes[-1]
    finally:
        proxy.restore()
        await session.close()
        client.close()


async def test_engine_down_at_start_is_sandbox_unavailable(proxy: EngineProxy, user_workspace: Path) -> None:
    client = docker.DockerClient(base_url=proxy.url, timeout=30)
    try:
        proxy.cut()
        with pytest.raises(SandboxUnavailable) as info:
            await DockerSession.create(user_workspace, client=client)
        _one_line_engine_error(info.value)
    finally:
        client.close()
