"""python3 for images without it: the in-container helper needs it (standard library only).

An image without python3 gets it once, through its own package manager and its own package
sources (read from the image), in a derived image cached like an environment (kind
``python``); an image with no shell or no package manager is refused in one line naming the
image and what is missing. Images sandloop made have it; others are looked into once, and the
answer is kept by image id in the state folder."""

from __future__ import annotations

import asyncio

import docker

from sandloop.errors import ConfigError
from sandloop.hostfiles import HostDir

from .. import images
from . import registries, store
from .build import Reporter, set_up
from .key import environment_key
from .probe import ImageFacts, Probe, image_facts, probe
from .setup import package_commands
from .spec import KEY_LABEL, REPOSITORY, EnvironmentSpec

__all__ = ["with_python"]

_PYTHON_CHECKED = "python-ok-"


def _known_python(base: ImageFacts) -> bool:
    """Images sandloop made (its sandbox images, its environments) have python3; others were
    looked into once, and the answer kept by image id."""
    if KEY_LABEL in base.labels or "sandloop.dockerfile-sha256" in base.labels:
        return True
    with HostDir(store.state_folder()) as folder:
        return folder.exists(_PYTHON_CHECKED + base.id.removeprefix("sha256:"))


def _remember_python(base: ImageFacts) -> None:
    with HostDir(store.state_folder()) as folder:
        folder.create_once(_PYTHON_CHECKED + base.id.removeprefix("sha256:"), b"python3\n")


def _refuse(ref: str, found: Probe) -> ConfigError:
    if not found.shell:
        what = "no /bin/sh to install it with"
    else:
        what = "no package manager (apt, apk, dnf) to install it with"
    return ConfigError(f"image {ref} cannot be used: it has no python3 (sandloop's in-container helper needs it) "
                       f"and {what}")


async def with_python(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, run: Reporter,
                       found: Probe | None = None) -> ImageFacts:
    """``base``, or the cached image that adds python3 to it (built once when missing).
    ``found``: what a look inside ``base`` already found."""
    if found is None and await asyncio.to_thread(_known_python, base):
        return base
    looked = found if found is not None else await asyncio.to_thread(probe, client, base.id)
    if looked.python3:
        await asyncio.to_thread(_remember_python, base)
        return base
    manager = looked.manager
    if not looked.shell or manager is None:
        raise _refuse(base.ref, looked)
    key = environment_key({"kind": "python", "base": base.id, "manager": looked.manager_program,
                           "version": images.package_version()})
    image = store.find(client, key)
    if image is None:
        async with store.building(key, lambda: run.say("waiting", "another session is adding python3; waiting")):
            if store.find(client, key) is None:
                run.say("python", f"image {base.ref} has no python3: adding it with {looked.manager_program} "
                        "(once; cached)")
                hosts = registries.system_reach(manager, looked.sources)
                steps = [("python3", line, "0:0") for line in package_commands(looked, ["python3"])]
                await set_up(client, spec, base, looked, run, key=key, kind="python", allow=hosts,
                              steps=steps, workspace=None, prefix_owner=None)
    store.mark_used(key)
    return image_facts(client, f"{REPOSITORY}:{store.tag_for(key)}")
