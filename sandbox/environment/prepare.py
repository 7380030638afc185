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
   (:mod:`.setup`) behind a per-setup egress proxy that allows ``setup_network``, the
   registries of ``setup_registries`` and, for ``packages``, the image's package sources; every
   output line goes to ``on_event`` and the log; a failing step stops everything and nothing is
   committed. After setup the key is computed again: when setup changed a keyed file (``npm
   install`` writing a lockfile), the image answers to both keys, so the next run finds it.

The setup proxy lets listed names reach private addresses (``private_ok``): package indexes
behind a corporate proxy or an internal mirror resolve there, and the list is the operator's.
Loopback, link-local (the metadata service), multicast and unlisted IP literals stay refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import Mount

from sandloop.errors import ConfigError, SandboxUnavailable
from sandloop.hostfiles import HostDir, refuse_inside

from .. import egress, images
from ..docker import WORKSPACE, container_user, engine_errors
from ..lifecycle import owner_labels
from . import registries, store
from .ca import ca_env, host_bundle
from .key import environment_key, workspace_files
from .probe import ImageFacts, Probe, image_facts, probe, run_once
from .setup import HOME, SetupContainer, StepFailed, package_commands
from .spec import BASE_LABEL, KEY_LABEL, KIND_LABEL, PREFIX, REPOSITORY, VERSION_LABEL, EnvironmentSpec

__all__ = ["EnvironmentSetupFailed", "Prepared", "plan", "prepare"]

Event = Callable[[str, dict[str, Any]], None]
#: Where setup saves the ``cache_paths`` it made in the checkout, inside the image.
SAVED = f"{PREFIX}/.workspace"
_PYTHON_CHECKED = "python-ok-"
_TAIL_SHOWN = 15


class EnvironmentSetupFailed(ConfigError):
    """An environment's setup failed: nothing was cached. The message names the step, the
    command and the last lines it printed (and what the proxy refused, when it did)."""


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


def _quiet(kind: str, data: dict[str, Any]) -> None:
    pass


@dataclass
class _Run:
    """One preparation's reporting: events, and the setup log when there is a folder for it."""

    on_event: Event
    log_dir: Path | None
    refused: list[str] = field(default_factory=list)
    _log: HostDir | None = None

    def say(self, stage: str, text: str, *, logged: bool = True, **extra: Any) -> None:
        """A stage, shown; and written to the setup log unless ``logged`` is False (a run that
        reuses a cached environment has no setup log at all)."""
        self.on_event("environment", {"stage": stage, "text": text, **extra})
        if logged:
            self.write(f"== {text}")

    def line(self, line: str) -> None:
        self.on_event("environment_output", {"line": line})
        self.write(line)

    def write(self, line: str) -> None:
        if self.log_dir is None:
            return
        if self._log is None:  # opened (and created) by the first line: no line, no log
            self._log = HostDir(self.log_dir)
        self._log.append("environment.log", (line + "\n").encode("utf-8", "replace"))

    def decision(self, decision: egress.EgressDecision) -> None:
        verb = "allowed" if decision.allowed else "REFUSED"
        self.write(f"[egress] {verb} {decision.method} {decision.target} ({decision.reason})")
        if not decision.allowed and decision.target not in self.refused:
            self.refused.append(decision.target)


# --- the base image ------------------------------------------------------------------------------


def _build_dockerfile(client: docker.DockerClient, spec: EnvironmentSpec, run: _Run) -> str:
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


def _pull(client: docker.DockerClient, ref: str, run: _Run) -> None:
    run.say("pull", f"pulling {ref}")
    repository, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    try:
        for chunk in client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if "error" in chunk:
                raise ConfigError(f"image {ref} is not there and cannot be pulled: {chunk['error']}")
    except docker.errors.APIError as exc:
        raise ConfigError(f"image {ref} is not there and cannot be pulled: {exc.explanation or exc}") from None


def base_image(client: docker.DockerClient, spec: EnvironmentSpec, run: _Run) -> ImageFacts:
    """The image the environment starts from (built or pulled when it must be)."""
    if spec.dockerfile is not None:
        return image_facts(client, _build_dockerfile(client, spec, run))
    ref = spec.image or images.image_name("shell")
    try:
        return image_facts(client, ref)
    except ConfigError:
        if spec.image is None:
            raise SandboxUnavailable(f"image {ref} is not there: run scripts/bootstrap") from None
    _pull(client, ref, run)
    return image_facts(client, ref)


# --- python3 --------------------------------------------------------------------------------------


def _known_python(client: docker.DockerClient, base: ImageFacts) -> bool:
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


async def _with_python(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, run: _Run,
                       found: Probe | None = None) -> tuple[ImageFacts, Probe | None]:
    """``base``, or the cached image that adds python3 to it (built once when missing)."""
    if found is None and await asyncio.to_thread(_known_python, client, base):
        return base, None
    looked = found if found is not None else await asyncio.to_thread(probe, client, base.id)
    if looked.python3:
        await asyncio.to_thread(_remember_python, base)
        return base, looked
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
                await _set_up(client, spec, base, looked, run, key=key, kind="python", allow=hosts,
                              steps=steps, workspace=None, prefix_owner=None)
    store.mark_used(key)
    facts = image_facts(client, f"{REPOSITORY}:{store.tag_for(key)}")
    return facts, None


# --- the setup container ---------------------------------------------------------------------------


def _failure(failed: StepFailed, command: str, run: _Run) -> EnvironmentSetupFailed:
    tail = [line for line in failed.tail if line.strip()][-_TAIL_SHOWN:]
    text = f"environment setup failed at {failed.title} ({failed.reason}): {command}"
    if tail:
        text += "\n  " + "\n  ".join(tail)
    hints = []
    if run.refused:
        hints.append(f"the setup proxy refused {', '.join(run.refused[:5])} (add to setup_network or "
                     "setup_registries)")
    if any(mark in line for line in failed.tail for mark in
           ("CERTIFICATE_VERIFY_FAILED", "SELF_SIGNED_CERT", "self-signed certificate", "unable to get local issuer")):
        hints.append("TLS verification failed: behind an intercepting proxy, set trust_host_ca = true")
    if any("error setting permissions" in line for line in failed.tail):
        hints.append("a package that installs a setuid or setgid program cannot be installed: the sandbox "
                     "never lets anything set those bits")
    if hints:
        text += "\n" + "\n".join(hints)
    text += "\nnothing was cached"
    return EnvironmentSetupFailed(text)


def _base_env(spec: EnvironmentSpec, path: str) -> dict[str, str]:
    return {**spec.env, "PATH": path, "HOME": HOME, "TMPDIR": "/tmp", "LANG": spec.env.get("LANG", "C.UTF-8")}


async def _set_up(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, found: Probe, run: _Run, *,
                  key: str, kind: str, allow: registries.Reach, steps: list[tuple[str, str, str]],
                  workspace: Path | None, prefix_owner: str | None,
                  rekey: Callable[[], str] | None = None) -> str:
    """Run ``steps`` (title, command, user) in a setup container and commit it as ``key``."""
    ca = host_bundle() if spec.trust_host_ca else None
    handle = None
    if allow.hosts:
        if spec.runtime == "runsc":
            raise ConfigError("setup needs a network, and runtime runsc runs with --network=none here: use runc")
        session = "setup-" + secrets.token_hex(5)
        run.say("network", f"setup may reach: {', '.join(allow.hosts)}")
        for note in allow.notes:
            run.say("note", note)
        handle = await egress.attach_egress(
            client, list(allow.hosts), session_id=session,
            labels=owner_labels(session, spec.setup_timeout_s + 600, spec.setup_timeout_s + 600),
            on_decision=run.decision, private_ok=True)
    labels = {KEY_LABEL: key, KIND_LABEL: kind, BASE_LABEL: f"{base.ref}@{base.id}",
              VERSION_LABEL: images.package_version()}
    container = SetupContainer(client, base, found, spec, workspace=workspace, prefix_owner=prefix_owner,
                               network=handle.network if handle else "none", ca_bundle=ca, labels=labels,
                               on_line=run.line)
    env = {**_base_env(spec, container.path), **(handle.env if handle else {}), **(ca_env() if ca else {}),
           **allow.env}
    deadline = time.monotonic() + spec.setup_timeout_s
    started = time.monotonic()
    try:
        await asyncio.to_thread(container.start)
        for title, command, user in steps:
            run.say("step", f"{title}: {command}", title=title, command=command)
            step_env = {**env, "DEBIAN_FRONTEND": "noninteractive"} if user == "0:0" else env
            try:
                await asyncio.to_thread(container.run, title, command, user=user, env=step_env, deadline=deadline)
            except StepFailed as failed:
                raise _failure(failed, command, run) from None
        tags = [store.tag_for(key)]
        if rekey is not None:
            after = await asyncio.to_thread(rekey)
            if after != key:  # setup changed a keyed file: the image answers to the new key too
                tags.append(store.tag_for(after))
        image_id = await asyncio.to_thread(container.commit, REPOSITORY, tags)
    except asyncio.CancelledError:
        container.abort("interrupted")
        raise
    finally:
        await asyncio.to_thread(container.close)
        if handle is not None:
            await handle.close()
    run.say("built", f"environment {REPOSITORY}:{tags[0]} built in {time.monotonic() - started:.1f} s "
            f"({image_id[7:19]})", key=key)
    return image_id


# --- the whole -----------------------------------------------------------------------------------


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
        "packages": list(spec.packages), "setup": list(spec.setup), "setup_network": list(spec.setup_network),
        "setup_registries": list(spec.setup_registries), "cache_paths": list(spec.cache_paths),
        "env": dict(spec.env), "cache_key": list(spec.cache_key),
        "files": workspace_files(workspace, spec.cache_key, exclude=spec.cache_paths),
    }


def _save_paths(paths: tuple[str, ...]) -> str:
    lines = [f"rm -rf {SAVED}"]
    for rel in paths:
        src, dst = shlex.quote(f"{WORKSPACE}/{rel}"), shlex.quote(f"{SAVED}/{rel}")
        lines.append(f"if [ -e {src} ]; then mkdir -p \"$(dirname {dst})\" && cp -a {src} {dst}; fi")
    return "\n".join(lines)


def _restore(client: docker.DockerClient, image: str, workspace: Path, owner: str,
             paths: tuple[str, ...]) -> tuple[str, ...]:
    """Put the saved ``cache_paths`` back into a checkout that lacks them (as its owner)."""
    missing = [rel for rel in paths if not os.path.lexists(workspace / rel)]
    if not missing:
        return ()
    lines = []
    for rel in missing:
        src, dst = shlex.quote(f"{SAVED}/{rel}"), shlex.quote(f"{WORKSPACE}/{rel}")
        lines.append(f"if [ -e {src} ]; then mkdir -p \"$(dirname {dst})\" && cp -a {src} {dst} && echo {dst}; fi")
    code, out = run_once(client, image, ["/bin/sh", "-e", "-c", "\n".join(lines)], user=owner,
                         mounts=[Mount(WORKSPACE, str(workspace), type="bind")],
                         doing="cannot restore the environment's workspace paths", timeout_s=600)
    if code != 0:
        raise SandboxUnavailable(f"restoring {', '.join(missing)} from the cached environment failed (exit {code})")
    return tuple(line.removeprefix(f"{WORKSPACE}/") for line in out.splitlines() if line)


async def prepare(spec: EnvironmentSpec, workspace: Path, *, client: docker.DockerClient | None = None,
                  on_event: Event = _quiet, log_dir: Path | None = None) -> Prepared:
    """The image a session of ``workspace`` starts from, building what is missing.

    ``on_event(kind, data)``: ``environment`` (a stage, with ``text``) and
    ``environment_output`` (one line a setup step printed), possibly from a worker thread.
    ``log_dir``: where ``environment.log`` (everything setup printed, and every proxy decision)
    goes. Raises EnvironmentSetupFailed (nothing cached) or ConfigError (an image that cannot
    be used, a registry that cannot be read)."""
    workspace = workspace.resolve()
    ca = str(host_bundle()) if spec.trust_host_ca else None
    if spec.is_default:
        return Prepared(image=None, source="default", ca_bundle=ca)
    refuse_inside(store.state_folder(), [workspace], "sandloop's environment state folder")
    run = _Run(on_event, log_dir)
    with engine_errors("cannot prepare the environment"):
        client = client or await asyncio.to_thread(docker.from_env)
    base = await asyncio.to_thread(base_image, client, spec, run)
    if not spec.has_setup:
        image, _ = await _with_python(client, spec, base, run)
        source = "image" if image is base else "python"
        return Prepared(image=image.ref, source=source, path=image.path or None, ca_bundle=ca)
    owner, _ = container_user(workspace)
    key = environment_key(_key_fields(spec, base, owner, workspace))
    tag = f"{REPOSITORY}:{store.tag_for(key)}"
    source = "cached"
    if store.find(client, key) is None:
        async with store.building(key, lambda: run.say("waiting", "another session is building this "
                                                        "environment; waiting for it")):
            if store.find(client, key) is None:
                source = "built"
                await _build(client, spec, base, run, key=key, owner=owner, workspace=workspace)
    else:
        run.say("cached", f"environment {tag} (cached; setup not run)", logged=False, key=key)
    store.mark_used(key)
    restored = await asyncio.to_thread(_restore, client, tag, workspace, owner, spec.cache_paths)
    if restored:
        run.say("restored", f"put back from the environment: {', '.join(restored)}", logged=False)
    facts = image_facts(client, tag)
    return Prepared(image=tag, source=source, key=key, path=facts.path or None, ca_bundle=ca, restored=restored)


async def _build(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, run: _Run, *, key: str,
                 owner: str, workspace: Path) -> None:
    run.say("building", f"setting up environment {REPOSITORY}:{store.tag_for(key)} from {base.ref}", key=key)
    found = await asyncio.to_thread(probe, client, base.id)
    reach = _reach(spec, found, base)  # before python3: a registry that cannot be read fails fast
    start, _ = await _with_python(client, spec, base, run, found)
    if start is not base:
        found = await asyncio.to_thread(probe, client, start.id)
    steps = [("packages", line, "0:0") for line in package_commands(found, list(spec.packages))] \
        if spec.packages else []
    steps += [(f"setup {n}/{len(spec.setup)}", command, owner) for n, command in enumerate(spec.setup, 1)]
    if spec.cache_paths:
        steps.append(("saving cache_paths", _save_paths(spec.cache_paths), owner))
    await _set_up(client, spec, start, found, run, key=key, kind="setup", allow=reach, steps=steps,
                  workspace=workspace, prefix_owner=owner,
                  rekey=lambda: environment_key(_key_fields(spec, base, owner, workspace)))


def plan(spec: EnvironmentSpec, workspace: Path, client: docker.DockerClient) -> dict[str, Any]:
    """What a run would use, without building or setting up anything (a Dockerfile is built:
    its image id is part of the key)."""
    workspace = workspace.resolve()
    info: dict[str, Any] = {"default": spec.is_default, "setup": list(spec.setup), "packages": list(spec.packages),
                            "setup_network": list(spec.setup_network),
                            "setup_registries": list(spec.setup_registries),
                            "cache_key": list(spec.cache_key), "cache_paths": list(spec.cache_paths),
                            "trust_host_ca": spec.trust_host_ca}
    base = base_image(client, spec, _Run(_quiet, None))
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
