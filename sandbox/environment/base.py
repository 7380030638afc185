"""The image an environment starts from: the one named (pulled when the engine lacks it), one
built from a Dockerfile — its ``RUN`` steps without network, since what needs the network
belongs in setup, behind the allow-list — or one of sandloop's images (the shell image by default),
built here on first use."""

from __future__ import annotations

import hashlib

import docker
import docker.errors

from sandloop.errors import ConfigError, SandboxUnavailable

from .. import images
from ..docker import build_own_image, engine_errors
from . import store
from .build import EnvironmentSetupFailed, Reporter
from .probe import ImageFacts, image_facts
from .spec import BASE_LABEL, KEY_LABEL, KIND_LABEL, REPOSITORY, VERSION_LABEL, EnvironmentSpec

__all__ = ["base_image"]


def _build_dockerfile(client: docker.DockerClient, spec: EnvironmentSpec, run: Reporter) -> str:
    assert spec.dockerfile is not None
    dockerfile = spec.dockerfile
    context = spec.context or dockerfile.parent
    if not dockerfile.is_file():
        raise ConfigError(f"dockerfile {dockerfile} is not a file")
    if not context.is_dir():
        raise ConfigError(f"context {context} is not a directory")
    name = "base-" + hashlib.sha256(str(dockerfile).encode()).hexdigest()[:16]
    tag = f"{REPOSITORY}:{name}"
    run.say("dockerfile", f"building {dockerfile} (context {context}; RUN steps have no network)")
    with engine_errors(f"cannot build {dockerfile}"):
        for chunk in client.api.build(path=str(context), dockerfile=str(dockerfile), tag=tag, network_mode="none",
                                      rm=True, forcerm=True, pull=False, decode=True,
                                      labels={KIND_LABEL: "base", KEY_LABEL: name, BASE_LABEL: str(dockerfile),
                                              VERSION_LABEL: images.package_version()}):
            for line in str(chunk.get("stream", "")).splitlines():
                if line.strip():
                    run.line(line)
            if "error" in chunk:
                raise EnvironmentSetupFailed(f"building {dockerfile} failed: {chunk['error'].strip()}")
    store.mark_used(name)
    return tag


def _pull(client: docker.DockerClient, ref: str, run: Reporter) -> None:
    run.say("pull", f"pulling {ref}")
    try:  # the SDK splits the reference (name, tag or digest) itself
        for chunk in client.api.pull(ref, stream=True, decode=True):
            if "error" in chunk:
                raise ConfigError(f"image {ref} is not there and cannot be pulled: {chunk['error']}")
    except docker.errors.APIError as exc:
        raise ConfigError(f"image {ref} is not there and cannot be pulled: {exc.explanation or exc}") from None


def base_image(client: docker.DockerClient, spec: EnvironmentSpec, run: Reporter, *,
               build_own: bool = True) -> ImageFacts:
    """The image the environment starts from (built or pulled when it must be; sandloop's own
    images only with ``build_own``: describing a run waits for no image build)."""
    if spec.dockerfile is not None:
        return image_facts(client, _build_dockerfile(client, spec, run))
    ref = spec.image or images.image_name("shell")
    if build_own and (target := images.target_of(ref)) is not None:
        # sandloop's own images are built on first use, or waited for while the background
        # build `make demo` leaves running makes them (the demo builds only its own first).
        return image_facts(client, build_own_image(client, target, lambda text: run.say("image", text)))
    try:
        return image_facts(client, ref)
    except ConfigError:
        if spec.image is None or images.target_of(ref) is not None:
            building = images.background_pid() is not None
            raise SandboxUnavailable(f"image {ref} is not there: " + (
                f"it is being built in the background (log {images.state_folder() / images.BACKGROUND_LOG})"
                if building else "run scripts/bootstrap")) from None
    _pull(client, ref, run)
    return image_facts(client, ref)
