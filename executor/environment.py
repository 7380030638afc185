"""A run's environment: the policy's ``[environment]`` prepared before the session starts.

:func:`prepare_environment` is the one call ``open_toolbox`` makes: the policy section becomes a
plain :class:`~sandbox.environment.spec.EnvironmentSpec` (:func:`executor.sandbox_config.environment_spec`),
the builder reuses or builds the image (:mod:`sandbox.environment.prepare`), and the result is
the session's :class:`~sandbox.docker.DockerConfig`. Setup is long work, so it is shown live:
each stage and every line a setup step prints go to the progress view (and to
``environment.log`` in the run's folder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from executor.progress import Progress
from executor.sandbox_config import docker_config, environment_spec
from executor.terminal import shown
from policies.model import LoadedPolicy
from sandbox.docker import DockerConfig
from sandbox.environment.prepare import Prepared, prepare
from sandloop.errors import ConfigError

__all__ = ["environment_config", "environment_events", "prepare_environment", "remote_config"]

#: [environment] keys only the Docker engine on this host can prepare (building, installing,
#: running setup, mounting a host file): a remote back-end starts from a pushed image instead.
_PREPARED_LOCALLY = ("dockerfile", "packages", "preset", "setup", "trust_host_ca")

Event = Callable[[str, dict[str, Any]], None]


def environment_events(on_event: Event | None, console: Console | None = None) -> Event:
    """``on_event`` that also shows the environment's stages and setup output on a console
    (the progress view's, when ``on_event`` is one)."""
    if console is None and isinstance(on_event, Progress):
        console = on_event.console

    def event(kind: str, data: dict[str, Any]) -> None:
        if console is not None:
            if kind == "environment":
                console.print(f"[bold]environment[/] {shown(data['text'], one_line=True)}", highlight=False)
            elif kind == "environment_output":
                console.print(f"  [dim]│ {shown(data['line'], one_line=True)}[/]", highlight=False)
        if on_event is not None:
            on_event(kind, data)

    return event


async def prepare_environment(loaded: LoadedPolicy, repo: Path, *, image: str | None, log_dir: Path | None,
                              on_event: Event | None) -> tuple[DockerConfig, Prepared]:
    """The session's container configuration, from the environment the policy (or ``--image``)
    asks for: the cached image, or one set up now."""
    prepared = await prepare(environment_spec(loaded, image), repo, on_event=environment_events(on_event),
                             log_dir=log_dir)
    return docker_config(loaded.policy, prepared=prepared), prepared


async def environment_config(loaded: LoadedPolicy, repo: Path, *, backend: str, image: str | None,
                             log_dir: Path | None, on_event: Event | None) -> DockerConfig:
    """The session's configuration for ``backend``: Docker sessions start from the prepared
    environment, any other back-end from :func:`remote_config`."""
    if backend == "docker":
        config, _ = await prepare_environment(loaded, repo, image=image, log_dir=log_dir, on_event=on_event)
        return config
    return remote_config(loaded, backend, image=image)


def remote_config(loaded: LoadedPolicy, backend: str, *, image: str | None) -> DockerConfig:
    """The configuration of a session on a back-end that runs elsewhere (a cluster), where this
    host's engine cannot put an image. Its image is ``--image``, else ``[backend.NAME] image``,
    else the section's ``image``, taken as it is. A pushed image (one of the first two) is the
    environment, already set up; without one, a section that asks for this host's work (setup,
    packages, a Dockerfile, the host's CA) is a one-line error that says how to get there."""
    section = loaded.policy.environment
    pushed = image or loaded.policy.backend.options(backend).get("image")
    if not pushed:
        for key in _PREPARED_LOCALLY:
            if getattr(section, key):
                raise ConfigError(
                    f"{loaded.where(('environment', key))}: [environment] {key} is prepared by this host's "
                    f"Docker engine, which the {backend} back-end does not use: build it with `sandloop env "
                    f"build`, push the image to a registry the cluster pulls from, and name it in "
                    f"[backend.{backend}] image (or give --image)")
    config = docker_config(loaded.policy)
    return replace(config, image=image or (None if pushed else section.image))
