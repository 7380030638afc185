"""The container placement: Chromium in a hardened container with no network, driven over a pipe.

The container has only a loopback interface. Playwright launches :mod:`sandbox.browser.relay` as
its "Chromium": the relay starts the container and carries the debugging pipe over the
container's attached stdin/stdout, so no debugging port exists anywhere. Page traffic is fetched
on the host after the domain rules (:mod:`sandbox.browser.routing`), websockets are bridged from
the host (:mod:`sandbox.browser.sockets`): nothing the page does can open a connection of its own.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Browser as PWBrowser
from playwright.async_api import Playwright

from sandbox.browser import relay
from sandbox.browser.config import COMMON_ARGS, BrowserConfig
from sandbox.browser.session import PlaywrightBrowser
from sandbox.computer.notes import first_line
from sandloop.errors import SandboxUnavailable

__all__ = ["ContainerBrowser", "ContainerLimits", "docker_available"]


@dataclass(frozen=True)
class ContainerLimits:
    memory: str = "2g"
    pids: int = 512
    shm: str = "256m"
    ttl_s: int = 4 * 3600  # written as sandloop.expires, for the reaper
    labels: Mapping[str, str] = field(default_factory=dict)


class ContainerBrowser(PlaywrightBrowser):
    """Chromium in a hardened container with no network, driven from the host over a pipe.

    Network: ``network_mode="none"`` — the container has only a loopback interface. Playwright
    launches :mod:`sandbox.browser.relay` as its "Chromium": it starts the container and relays
    the debugging pipe (fds 3/4) over the container's attached stdin/stdout, so no debugging port
    exists for another local user or a compromised renderer to reach. Page traffic is fetched
    on the host by Playwright after the domain rules (:class:`~sandbox.browser.routing.Router`),
    websockets are bridged from the host (:class:`~sandbox.browser.sockets.Sockets`); nothing
    the page does can open a connection of its own. Everything else is locked down as before:
    no capabilities, no privilege gain, read-only root, tmpfs for /tmp and the profile, memory
    and pid limits, uid 1000.
    """

    def __init__(
        self,
        config: BrowserConfig | None = None,
        *,
        session_id: str | None = None,
        limits: ContainerLimits | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(config)
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.limits = limits or ContainerLimits()
        self.start_timeout_s = start_timeout_s
        self.container_id: str | None = None
        self._container_name: str | None = None
        self._docker: Any = None
        self._workdir: Path | None = None  # the relay's spec and wrapper script

    def _spec(self, name: str) -> dict[str, Any]:
        """What the relay creates: the hardened container (docker SDK ``create`` arguments)."""
        import docker  # imported here so the local placement works without the docker SDK

        from sandbox import images

        if self._docker is None:
            self._docker = docker.from_env()
        from sandbox.lifecycle import owner_labels

        # The same owner labels as the shell containers (pid, its start time, host, expiry), so
        # the reaper removes a browser whose front-end died, not only an expired one.
        labels = {
            **owner_labels(self.session_id, self.limits.ttl_s, self.limits.ttl_s),
            "sandloop.kind": "browser",
            **self.limits.labels,
        }
        create = {
            # Gone as soon as Chromium exits, even when the relay and the front-end were both
            # SIGKILLed and nobody is left to remove it.
            "auto_remove": True,
            "init": True,  # reap Chromium's helper processes
            "user": "1000:1000",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {
                "/tmp": "rw,nosuid,nodev,size=256m,mode=1777",
                "/home/sandbox": "rw,nosuid,nodev,size=512m,uid=1000,gid=1000,mode=0700",
            },
            "environment": {"HOME": "/home/sandbox"},
            "network_mode": "none",
            "mem_limit": self.limits.memory,
            "pids_limit": self.limits.pids,
            "shm_size": self.limits.shm,
            "labels": labels,
            "name": name,
        }
        return {"image": images.ensure(self._docker, "browser"), "executable": "chromium", "create": create}

    def _wrapper(self, spec: dict[str, Any]) -> Path:
        """Write the spec and the executable Playwright launches (it runs the relay)."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="sandloop-browser-"))
        spec_path = self._workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        wrapper = self._workdir / "chromium"
        # The relay runs as a file, not as `-m sandbox.browser.relay`, which would import this
        # package first (Playwright and the SDKs: seconds per start) for a program that needs the
        # standard library and the docker SDK only; -P keeps the relay's folder off sys.path.
        command = shlex.join([sys.executable, "-P", relay.__file__, str(spec_path)])
        wrapper.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        wrapper.chmod(0o700)
        return wrapper

    async def _launch(self, pw: Playwright) -> PWBrowser:
        name = f"sandloop-browser-{self.session_id}-{self.restarts}"
        try:
            spec = await asyncio.to_thread(self._spec, name)
        except Exception as exc:  # docker SDK errors, engine down, image build failed
            raise SandboxUnavailable(f"browser container did not start: {exc}") from exc
        self._container_name = name
        try:
            browser = await pw.chromium.launch(
                executable_path=self._wrapper(spec),
                headless=True,  # Playwright adds --no-sandbox: the container is the sandbox
                args=[*COMMON_ARGS, *self.config.extra_args],
                timeout=self.start_timeout_s * 1000,
            )
            self.container_id = await asyncio.to_thread(self._container_id, name)
        except Exception as exc:  # launch failed (the relay's log is in the message) or no container
            await self._release()
            self._drop_workdir()  # nobody may call close() after a failed start
            raise SandboxUnavailable(f"Chromium in the container did not start: {first_line(exc)}") from exc
        return browser

    def _container_id(self, name: str) -> str:
        return str(self._docker.containers.get(name).id)

    def _remove(self, name: str) -> None:
        import docker.errors

        deadline = time.monotonic() + 30
        while True:
            try:
                self._docker.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                # 409: the relay is removing it right now; wait until it is gone
                if exc.status_code != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    async def _release(self) -> None:
        # The relay removes its container when it exits; this covers a relay that was killed.
        name, self._container_name, self.container_id = self._container_name, None, None
        if name is not None and self._docker is not None:
            await asyncio.to_thread(self._remove, name)

    def _drop_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    async def close(self) -> None:
        await super().close()
        self._drop_workdir()


def docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False
