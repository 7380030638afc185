"""What the host sees of a session's container: its cgroup, its processes. For assertions that
must not trust anything the container itself says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from sandbox.docker import DockerSession


def _cgroup_dir(session: DockerSession, controller: str) -> Path:
    pid = session.inspect()["State"]["Pid"]
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" or controller in controllers.split(","):  # v2 has one unnamed line
            base = Path("/sys/fs/cgroup") if controllers == "" else Path("/sys/fs/cgroup") / controller
            return base / path.lstrip("/")
    raise AssertionError(f"no {controller} cgroup for pid {pid}")


def pids_used(session: DockerSession) -> tuple[int, int]:
    """The container's pids cgroup: (current, max)."""
    d = _cgroup_dir(session, "pids")
    return int((d / "pids.current").read_text()), int((d / "pids.max").read_text())


def host_pids(session: DockerSession) -> list[int]:
    """Every process of the container, as host pids."""
    d = _cgroup_dir(session, "pids")
    return [int(p) for p in (d / "cgroup.procs").read_text().split()]


def environ(pid: int) -> dict[str, str]:
    """A process's environment read from the host's /proc (needs CAP_SYS_PTRACE over it)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw.split(b"\0") if e)


async def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 120) -> None:
    """Poll ``condition`` until it holds; the deadline only stops a test that would hang."""
    end = time.monotonic() + deadline_s
    while not await asyncio.to_thread(condition):
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)
