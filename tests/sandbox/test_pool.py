"""The session pool: sessions ready before they are asked for, a fresh one for every one given
back (never a reused container), failures reported instead of waited on, nothing left open."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerSession
from sandbox.pool import SessionPool
from sandloop.errors import SandboxUnavailable


def _factory(template: Path, scratch: Path, docker_client: docker.DockerClient):  # type: ignore[no-untyped-def]
    counter = iter(range(1000))

    async def fresh() -> DockerSession:
        workspace = scratch / f"ws{next(counter)}"
        shutil.copytree(template, workspace)
        for path in [workspace, *workspace.rglob("*")]:
            os.chown(path, 1000, 1000)
        return await DockerSession.create(workspace, client=docker_client, reap_stale=False)

    return fresh


def _alive(client: docker.DockerClient, session: DockerSession) -> bool:
    return bool(client.api.containers(all=True, filters={"label": f"sandloop.session={session.session_id}"}))


@pytest.mark.docker
async def test_sessions_are_ready_and_every_returned_one_is_replaced(docker_client: docker.DockerClient,
                                                                     tmp_path: Path) -> None:
    template = tmp_path / "template"
    template.mkdir()
    (template / "README").write_text("hello\n")
    async with SessionPool(_factory(template, tmp_path, docker_client), size=2) as pool:
        assert pool.ready == 2
        first = await pool.acquire()  # handed out at once: nothing was started for it
        assert (await first.run("cat README && echo dirty > mark")).stdout.text == "hello\n"
        await pool.release(first)
        assert not _alive(docker_client, first)  # closed, never given out again
        seen = {first}
        for _ in range(3):
            async with pool.session() as session:
                assert session not in seen
                seen.add(session)
                # a fresh workspace copy: what an earlier user left is not there
                assert (await session.run("test -e mark || echo clean")).stdout.text == "clean\n"
        held = await pool.acquire()
    assert not _alive(docker_client, held)  # closing the pool closed what was handed out too


class _Flaky:
    """A factory that fails: the pool must say so, not wait for ever."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> DockerSession:
        self.calls += 1
        raise SandboxUnavailable("no engine")


async def test_a_factory_that_keeps_failing_is_reported() -> None:
    factory = _Flaky()
    pool = SessionPool(factory, size=2, max_failures=3)
    with pytest.raises(SandboxUnavailable, match=r"could not start a session.*no engine"):
        await asyncio.wait_for(pool.start(), 30)
    with pytest.raises(SandboxUnavailable):
        await asyncio.wait_for(pool.acquire(), 30)
    await pool.close()
    assert factory.calls >= 3
