"""Sessions give back what they take: a harness that opens and closes hundreds of sessions from
one process must not run out of file descriptors (each session's own Docker client is closed)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerSession

pytestmark = pytest.mark.docker


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_open_close_cycles_leave_no_descriptors(docker_client: docker.DockerClient,
                                                      user_workspace: Path) -> None:
    async def cycle() -> None:
        async with await DockerSession.create(user_workspace, reap_stale=False) as session:
            assert (await session.run("true")).exit_code == 0

    await cycle()  # warm-up: the thread pool and whatever a first session sets up once
    gc.collect()
    before = _open_fds()
    for _ in range(20):
        await cycle()
    # No gc.collect() here: descriptors must be closed by close(), not by the garbage collector.
    assert _open_fds() - before <= 5, f"{_open_fds() - before} descriptors leaked over 20 sessions"
