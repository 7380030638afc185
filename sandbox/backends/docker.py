"""The Docker back-end, registered: :class:`~sandbox.docker.DockerSession` behind the seam."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandloop.errors import SandboxUnavailable, SandloopError

from .. import images
from ..base import Session
from ..docker import DockerConfig, DockerSession, container_user, reap
from ..seam import Backend, BackendOptions
from ..seccomp import describe

__all__ = ["BACKEND", "DockerBackend", "DockerOptions", "doctor_report"]


class DockerOptions(BackendOptions):
    """``[backend.docker]``: nothing yet — the policy's ``[shell]`` says everything Docker needs."""


class DockerBackend(Backend):
    name = "docker"
    options_model = DockerOptions

    async def open(self, workspace: Path, config: DockerConfig, options: Any) -> Session:
        return await DockerSession.create(workspace, config)

    def reap(self, options: Any, *, everything: bool = False) -> list[tuple[str, str]]:
        try:
            return reap(docker.from_env(), everything=everything)
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"no Docker engine answers: {exc}") from None

    def doctor(self, workspace: Path, options: Any, config: DockerConfig | None = None) -> dict[str, Any]:
        return doctor_report(workspace, config.runtime if config else None)


async def _probe_session(repo: Path, runtime: str | None, client: docker.DockerClient) -> dict[str, Any]:
    async with await DockerSession.create(repo, DockerConfig(runtime=runtime), client=client) as session:
        r = await session.run(
            "id -u; grep -E '^CapEff' /proc/self/status | cut -f2; ls /sys/class/net | tr '\\n' ' '; echo; uname -r"
        )
        uid, caps, nets, kernel = ([*r.stdout.text.splitlines(), "", "", "", ""])[:4]
        return {
            "runtime_requested": runtime or "engine default",
            "runtime_in_force": session.runtime_in_force(),
            "kernel_inside": kernel,
            "kernel_host": os.uname().release,
            "gvisor": kernel != os.uname().release,
            "uid_inside": uid,
            "capabilities_effective": caps,
            "network_interfaces": nets.split(),
            "seccomp": describe(session.hello),
            "helper": session.hello,
        }


def doctor_report(repo: Path, runtime: str | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {"ok": False, "workspace": str(repo.resolve())}
    try:
        client = docker.from_env()
        info = client.info()
    except docker.errors.DockerException as exc:
        report["engine"] = f"no engine answers: {exc}"
        return report
    report["engine"] = f"Docker {info.get('ServerVersion')} ({info.get('Driver')}, cgroup v{info.get('CgroupVersion')})"
    report["runtimes_available"] = sorted((info.get("Runtimes") or {}).keys())
    report["default_runtime"] = info.get("DefaultRuntime")
    report["images"] = {
        images.image_name(t): f"current, {images.size_mb(client, t)} MB" if images.is_current(client, t)
        else "missing or stale (run scripts/bootstrap)"
        for t in images.TARGETS
    }
    user, why = container_user(repo.resolve())
    report["container_user"] = {"uid_gid": user, "why": why}
    report["host_chromium"] = shutil.which("chromium") or "not found (local browser placement unavailable)"
    try:
        report["session"] = asyncio.run(_probe_session(repo.resolve(), runtime, client))
        report["ok"] = True
    except SandloopError as exc:
        report["session"] = f"failed: {exc}"
    return report


BACKEND = DockerBackend()
