"""An environment as the builder takes it: a plain, frozen configuration, and the names and
labels cached environments carry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..injection import SecretSpec

__all__ = ["BASE_LABEL", "KEY_LABEL", "KIND_LABEL", "PREFIX", "REPOSITORY", "VERSION_LABEL",
           "EnvironmentSpec"]

#: The setup's own prefix: owned by the workspace owner during setup, first on PATH in both
#: phases, read-only to the agent (the root file system is). ``python3 -m venv /opt/env`` fits.
PREFIX = "/opt/env"
#: Where cached environments live in the engine (tags are a prefix of the key).
REPOSITORY = "sandloop-env"
KEY_LABEL = "sandloop.env.key"
#: ``setup`` (an environment), ``python`` (an image given python3), ``base`` (a built Dockerfile)
KIND_LABEL = "sandloop.env.kind"
BASE_LABEL = "sandloop.env.base"
VERSION_LABEL = "sandloop.env.version"


@dataclass(frozen=True)
class EnvironmentSpec:
    """What to start from and how to set it up (a policy's ``[environment]``, resolved).

    ``dockerfile`` and ``context`` are absolute host paths (the front-end resolves them against
    the policy file). The resources, runtime, read-only paths and variables are the agent
    phase's own: setup runs in the same sandbox.
    """

    image: str | None = None
    #: a setup written once for a kind of project (:mod:`.presets`), added to the section's own
    preset: str | None = None
    dockerfile: Path | None = None
    context: Path | None = None
    packages: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    setup_network: tuple[str, ...] = ()
    setup_registries: tuple[str, ...] = ()
    cache_key: tuple[str, ...] = ()
    cache_paths: tuple[str, ...] = ()
    trust_host_ca: bool = False
    setup_timeout_s: float = 1800.0
    memory: str = "2g"
    cpus: float = 2.0
    pids_limit: int = 512
    runtime: str | None = None
    read_only_paths: tuple[str, ...] = (".git",)
    env: Mapping[str, str] = field(default_factory=dict)
    #: the policy's [secrets]: setup's proxy adds those whose hosts setup may reach (a private
    #: index's token); never part of the cache key, never in the image
    secrets: tuple[SecretSpec, ...] = ()

    @property
    def has_setup(self) -> bool:
        return bool(self.packages or self.setup or self.preset)

    @property
    def is_default(self) -> bool:
        """Nothing to build or check: the default shell image, as it is."""
        return self.image is None and self.dockerfile is None and not self.has_setup
