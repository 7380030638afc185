"""The Docker back-end, registered: :class:`~sandbox.docker.DockerSession` behind the seam."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandloop.errors import SandboxUnavailable

from ..base import Session
from ..docker import DockerConfig, DockerSession, reap
from . import Backend, BackendOptions

__all__ = ["BACKEND", "DockerBackend", "DockerOptions"]


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
        from ..cli import doctor_report  # the Docker report lives with the command that prints it

        return doctor_report(workspace, config.runtime if config else None)


BACKEND = DockerBackend()
