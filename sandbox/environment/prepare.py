"""From an environment to the image a session starts from: reuse it, or build it once.

:func:`prepare` is the whole of it:

1. the base image — the one named, one built from a Dockerfile (its ``RUN`` steps without
   network: what needs the network belongs in setup, behind the allow-list), or sandloop's
   shell image;
2. python3, which the helper needs: an image without it gets it once, through its own package
   manager and its own package sources, in a derived image cached like an environment; an
   image that has no way to get it is refused in one line;
3. with setup: the cache key (:mod:`.key`), and either the cached image (no setup, no network,
   no proxy) or — under the key's lock, so two sessions build it once — a setup container
   (:mod:`.setup`, :mod:`.build`) behind a per-setup egress proxy that allows ``setup_network``, the
   registries of ``setup_registries`` and, for ``packages``, the image's package sources; every
   output line goes to ``on_event`` and the log; a failing step stops everything and nothing is
   committed. After setup the key is computed again: when setup changed a keyed file (``npm
   install`` writing a lockfile), the image answers to both keys, so the next run finds it.

The parts: :mod:`.base` (the base image), :mod:`.python` (python3), :mod:`.build` (running
steps behind the setup proxy, and committing), :mod:`.setup` (the container).
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from sandloop.errors import ConfigError, SandboxUnavailable
from sandloop.hostfiles import refuse_inside

from .. import images
from ..ca import host_bundle
from ..docker import WORKSPACE, confined, container_user, engine_errors, helper_mounts, workspace_mounts
from . import presets, registries, store
from .base import base_image
from .build import EnvironmentSetupFailed, Event, Reporter, quiet, set_up
from .key import environment_key, workspace_files
from .probe import ImageFacts, NoShell, Probe, find_image, image_facts, probe, run_once
from .python import with_python
from .setup import package_commands
from .spec import PREFIX, REPOSITORY, EnvironmentSpec

__all__ = ["EnvironmentSetupFailed", "Prepared", "plan", "prepare"]

#: Where setup saves the ``cache_paths`` it made in the checkout, inside the image.
SAVED = f"{PREFIX}/.workspace"


@dataclass(frozen=True)
class Prepared:
    """What a session starts from."""

    image: str | None  # None: sandloop's shell image, as it is
    source: str  # default | image | python | cached | built
    key: str | None = None
    path: str | None = None  # PATH for commands (the environment's prefix first)
    ca_bundle: str | None = None
    restored: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        return {"PATH": self.path} if self.path else {}


def _reach(spec: EnvironmentSpec, found: Probe, base: ImageFacts) -> registries.Reach:
    """Every host setup may reach, and the variables that point its clients at them."""
    reach = registries.Reach(tuple(spec.setup_network))
    for name in spec.setup_registries:
        if name == "pip":
            reach += registries.pip_reach()
        elif name == "npm":
            reach += registries.npm_reach()
        elif found.manager != name:
            raise ConfigError(f"setup_registries names {name}, but image {base.ref} uses "
                              f"{found.manager or 'no package manager'}")
    if spec.packages or found.manager in spec.setup_registries:
        if found.manager is None:
            raise ConfigError(f"packages are listed, but image {base.ref} has no package manager (apt, apk, dnf)")
        reach += registries.system_reach(found.manager, found.sources)
    return reach


def _key_fields(spec: EnvironmentSpec, base: ImageFacts, owner: str, workspace: Path) -> dict[str, object]:
    return {
        "kind": "setup", "version": images.package_version(), "base": base.id, "owner": owner,
        # Setup runs the checkout's own code (setup.py, npm scripts …) and may rewrite the files
        # the key reads: an environment is this checkout's, never another's with equal lockfiles.
        "checkout": str(workspace), "trust_host_ca": spec.trust_host_ca,
        "packages": list(spec.packages), "setup": list(spec.setup), "setup_network": list(spec.setup_network),
        "setup_registries": list(spec.setup_registries), "cache_paths": list(spec.cache_paths),
        "env": dict(spec.env), "cache_key": list(spec.cache_key),
        "files": workspace_files(workspace, spec.cache_key, exclude=spec.cache_paths),
        # only with a preset: the keys of environments without one stay what they were
        **({"preset": presets.key_part(spec)} if spec.preset else {}),
    }


#: Scripts sandloop runs in an environment's image use the system's programs only: the image's
#: PATH starts with /opt/env/bin, which setup — workspace code — fills.
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _copies(paths: Sequence[str], source: str, target: str, *, say: bool = False) -> list[str]:
    """Shell lines copying each path that exists under ``source`` to ``target`` (and, with
    ``say``, printing what arrived)."""
    lines = []
    for rel in paths:
        src, dst = shlex.quote(f"{source}/{rel}"), shlex.quote(f"{target}/{rel}")
        echo = f" && echo {dst}" if say else ""
        lines.append(f"if [ -e {src} ]; then mkdir -p \"$(dirname {dst})\" && cp -a {src} {dst}{echo}; fi")
    return lines


def _system_script(lines: Sequence[str]) -> str:
    return "\n".join([f"PATH={_SYSTEM_PATH}; export PATH", *lines])


def _save_paths(paths: tuple[str, ...]) -> str:
    return _system_script([f"rm -rf {SAVED}", *_copies(paths, WORKSPACE, SAVED)])


def _restore(client: docker.DockerClient, image: str, workspace: Path, owner: str,
             paths: tuple[str, ...], read_only_paths: tuple[str, ...], *, image_path: str = "") -> tuple[str, ...]:
    """Put the saved ``cache_paths`` back into a checkout that lacks them (as its owner).

    What runs here comes from an image setup filled, so it is treated like a session: the
    checkout's .git and read-only paths are mounted read-only (a planted hook or fsmonitor would
    run on the host), it runs under sandloop's seccomp filter (the helper's exec mode, with the
    python3 of the image's ``image_path`` less the environment's own directory, which setup
    fills), and the script with the system's PATH, not the environment's."""
    missing = [rel for rel in paths if not os.path.lexists(workspace / rel)]
    if not missing:
        return ()
    python_path = ":".join(d for d in image_path.split(":") if d.startswith("/") and d != f"{PREFIX}/bin")
    script = _system_script(_copies(missing, SAVED, WORKSPACE, say=True))
    try:
        code, out = run_once(client, image, confined(["/bin/sh", "-e", "-c", script]), user=owner,
                             mounts=[*workspace_mounts(workspace, read_only_paths),
                                     *helper_mounts([workspace], subreaper=False)],
                             env={"PATH": python_path or f"/usr/local/bin:{_SYSTEM_PATH}"},
                             doing="cannot restore the environment's workspace paths", timeout_s=600)
    except NoShell as exc:
        raise SandboxUnavailable(f"cannot restore {', '.join(missing)}: no python3 in {image} ({exc})") from None
    if code != 0:
        raise SandboxUnavailable(f"restoring {', '.join(missing)} from the cached environment failed (exit {code})")
    return tuple(line.removeprefix(f"{WORKSPACE}/") for line in out.splitlines() if line)


async def prepare(spec: EnvironmentSpec, workspace: Path, *, client: docker.DockerClient | None = None,
                  on_event: Event = quiet, log_dir: Path | None = None) -> Prepared:
    """The image a session of ``workspace`` starts from, building what is missing.

    ``on_event(kind, data)``: ``environment`` (a stage, with ``text``) and
    ``environment_output`` (one line a setup step printed), possibly from a worker thread.
    ``log_dir``: where ``environment.log`` (everything setup printed, and every proxy decision)
    goes. Raises EnvironmentSetupFailed (nothing cached) or ConfigError (an image that cannot
    be used, a registry that cannot be read)."""
    workspace = workspace.resolve()
    spec = presets.expand(spec)
    ca = str(host_bundle()) if spec.trust_host_ca else None
    if spec.is_default:
        return Prepared(image=None, source="default", ca_bundle=ca)
    refuse_inside(store.state_folder(), [workspace], "sandloop's environment state folder")
    run = Reporter(on_event, log_dir)
    with engine_errors("cannot prepare the environment"):
        client = client or await asyncio.to_thread(docker.from_env)
    base = await asyncio.to_thread(base_image, client, spec, run)
    if not spec.has_setup:
        image = await with_python(client, spec, base, run)
        source = "image" if image is base else "python"
        return Prepared(image=image.ref, source=source, path=image.path or None, ca_bundle=ca)
    owner, _ = container_user(workspace)
    key = environment_key(_key_fields(spec, base, owner, workspace))
    tag = f"{REPOSITORY}:{store.tag_for(key)}"
    source = "cached"
    facts = find_image(client, tag)  # the cached environment, read once (a session's start waits on it)
    if facts is None:
        async with store.building(key, lambda: run.say("waiting", "another session is building this "
                                                        "environment; waiting for it")):
            if store.find(client, key) is None:
                source = "built"
                await _build(client, spec, base, run, key=key, owner=owner, workspace=workspace)
        facts = image_facts(client, tag)
    else:
        run.say("cached", f"{tag} (cached; setup not run)", logged=False, key=key)
    store.mark_used(key)
    restored = await asyncio.to_thread(_restore, client, tag, workspace, owner, spec.cache_paths,
                                       spec.read_only_paths, image_path=facts.path)
    if restored:
        run.say("restored", f"put back from the environment: {', '.join(restored)}", logged=False)
    return Prepared(image=tag, source=source, key=key, path=facts.path or None, ca_bundle=ca, restored=restored)


async def _build(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, run: Reporter, *, key: str,
                 owner: str, workspace: Path) -> None:
    run.say("building", f"setting up {REPOSITORY}:{store.tag_for(key)} from {base.ref}", key=key)
    found = await asyncio.to_thread(probe, client, base.id)
    reach = _reach(spec, found, base)  # before python3: a registry that cannot be read fails fast
    start = await with_python(client, spec, base, run, found)
    if start is not base:
        found = await asyncio.to_thread(probe, client, start.id)
    steps = [("packages", line, "0:0") for line in package_commands(found, list(spec.packages))] \
        if spec.packages else []
    steps += [(f"setup {n}/{len(spec.setup)}", command, owner) for n, command in enumerate(spec.setup, 1)]
    if spec.cache_paths:
        steps.append(("saving cache_paths", _save_paths(spec.cache_paths), owner))
    await set_up(client, spec, start, found, run, key=key, kind="setup", allow=reach, steps=steps,
                  workspace=workspace, prefix_owner=owner,
                  rekey=lambda: environment_key(_key_fields(spec, base, owner, workspace)),
                  programs=presets.programs(spec, outside=[workspace]))


def plan(spec: EnvironmentSpec, workspace: Path, client: docker.DockerClient) -> dict[str, Any]:
    """What a run would use, without building or setting up anything (a Dockerfile is built:
    its image id is part of the key)."""
    workspace = workspace.resolve()
    spec = presets.expand(spec)
    info: dict[str, Any] = {"default": spec.is_default, "preset": spec.preset, "setup": list(spec.setup),
                            "packages": list(spec.packages),
                            "setup_network": list(spec.setup_network),
                            "setup_registries": list(spec.setup_registries),
                            "cache_key": list(spec.cache_key), "cache_paths": list(spec.cache_paths),
                            "trust_host_ca": spec.trust_host_ca}
    base = base_image(client, spec, Reporter(quiet, None), build_own=False)
    info["base"] = {"image": base.ref, "id": base.id}
    if not spec.has_setup:
        info.update(image=base.ref, key=None, cached=True)
        return info
    owner, _ = container_user(workspace)
    fields = _key_fields(spec, base, owner, workspace)
    key = environment_key(fields)
    info.update(key=key, image=f"{REPOSITORY}:{store.tag_for(key)}", cached=store.find(client, key) is not None,
                owner=owner, files=fields["files"])
    return info
