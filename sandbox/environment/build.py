"""Running setup steps and committing the result: the part every build shares (an
environment's setup, python3 added to an image).

:class:`Reporter` is a build's voice: each stage and every line a step prints go to
``on_event`` (the progress view) and to ``environment.log`` in the run's folder, and every
decision of the setup proxy goes to that log. :func:`set_up` runs the steps in a
:class:`~sandbox.environment.setup.SetupContainer` behind a per-setup egress proxy and commits
it; a failing step raises :class:`EnvironmentSetupFailed` with the step, the command, its last
lines and a hint (what the proxy refused, a TLS interception, a setuid package), and nothing is
committed.

The setup proxy lets listed names reach private addresses (``private_ok``): package indexes
behind a corporate proxy or an internal mirror resolve there, and the list is the operator's.
Loopback, link-local (the metadata service), multicast and unlisted IP literals stay refused.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from sandloop.errors import ConfigError
from sandloop.hostfiles import HostDir
from sandloop.matching import host_entry, match_host

from .. import egress, images
from ..bundle import install
from ..ca import ca_env, host_bundle, with_session_ca
from ..injection import Injection, resolve_all
from ..lifecycle import owner_labels
from . import registries, store
from .probe import ImageFacts, Probe
from .setup import HOME, SetupContainer, StepFailed
from .spec import BASE_LABEL, KEY_LABEL, KIND_LABEL, REPOSITORY, VERSION_LABEL, EnvironmentSpec

__all__ = ["EnvironmentSetupFailed", "Event", "Reporter", "quiet", "set_up"]

Event = Callable[[str, dict[str, Any]], None]
_TAIL_SHOWN = 15


class EnvironmentSetupFailed(ConfigError):
    """An environment's setup failed: nothing was cached. The message names the step, the
    command and the last lines it printed (and what the proxy refused, when it did)."""


def quiet(kind: str, data: dict[str, Any]) -> None:
    """An ``on_event`` that shows nothing."""


#: How much of a setup's output environment.log keeps (the live view and the failure's tail go on).
LOG_CAP = 32 << 20


@dataclass
class Reporter:
    """One preparation's reporting: events, and the setup log when there is a folder for it."""

    on_event: Event
    log_dir: Path | None
    refused: list[str] = field(default_factory=list)
    _log: HostDir | None = None
    _logged: int = 0  # bytes written to environment.log

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
        if self.log_dir is None or self._logged > LOG_CAP:
            return
        if self._log is None:  # opened (and created) by the first line: no line, no log
            self._log = HostDir(self.log_dir)
        data = (line + "\n").encode("utf-8", "replace")
        self._logged += len(data)
        if self._logged > LOG_CAP:  # a flood of output must not fill the host's disk
            data = f"…[environment.log stops here: {LOG_CAP >> 20} MiB written]\n".encode()
        self._log.append("environment.log", data)

    def decision(self, decision: egress.EgressDecision) -> None:
        verb = "allowed" if decision.allowed else "REFUSED"
        self.write(f"[egress] {verb} {decision.method} {decision.target} ({decision.reason})")
        if not decision.allowed and decision.target not in self.refused:
            self.refused.append(decision.target)


class _Failed(Exception):
    """A step failed: leave the steps, clean up, then say why."""


def _failure(failed: StepFailed, command: str, run: Reporter) -> EnvironmentSetupFailed:
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


def _trust_pem(injections: tuple[Injection, ...]) -> str:
    """What the proxy verifies secret hosts against: this host's trust store (only read when needed)."""
    return host_bundle().read_text(errors="replace") if injections else ""


def _base_env(spec: EnvironmentSpec, path: str) -> dict[str, str]:
    return {**spec.env, "PATH": path, "HOME": HOME, "TMPDIR": "/tmp", "LANG": spec.env.get("LANG", "C.UTF-8")}


async def set_up(client: docker.DockerClient, spec: EnvironmentSpec, base: ImageFacts, found: Probe, run: Reporter, *,
                  key: str, kind: str, allow: registries.Reach, steps: list[tuple[str, str, str]],
                  workspace: Path | None, prefix_owner: str | None,
                  rekey: Callable[[], str] | None = None, programs: Mapping[str, Path] | None = None) -> str:
    """Run ``steps`` (title, command, user) in a setup container and commit it as ``key``."""
    ca = host_bundle() if spec.trust_host_ca else None
    handle = None
    # Setup's secrets are those whose hosts it may reach; each read now (one line if missing).
    entries = [host_entry(host) for host in allow.hosts]
    injections = resolve_all(s for s in spec.secrets if match_host(entries, s.host, s.port) is not None)
    trust_file: Path | None = None
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
            on_decision=run.decision, private_ok=True, secrets=injections,
            trust_pem=_trust_pem(injections))
        if injections:
            run.say("note", "the proxy adds secrets on requests to: "
                    + ", ".join(f"{i.host}:{i.port} ({i.name})" for i in injections))
            # The session CA joins what setup trusts: a bind mount, never committed to the image.
            trust_file = install(with_session_ca(ca, handle.ca_pem), "session-trust", ".crt",
                                 outside=[workspace] if workspace else [])
            ca = trust_file
    labels = {KEY_LABEL: key, KIND_LABEL: kind, BASE_LABEL: f"{base.ref}@{base.id}",
              VERSION_LABEL: images.package_version()}
    container = SetupContainer(client, base, found, spec, workspace=workspace, prefix_owner=prefix_owner,
                               network=handle.network if handle else "none", ca_bundle=ca, labels=labels,
                               on_line=run.line, programs=programs)
    env = {**_base_env(spec, container.path), **(handle.env if handle else {}), **(ca_env() if ca else {}),
           **allow.env}
    deadline = time.monotonic() + spec.setup_timeout_s
    started = time.monotonic()
    failed: tuple[StepFailed, str] | None = None
    try:
        await asyncio.to_thread(container.start)
        for title, command, user in steps:
            run.say("step", f"{title}: {command}", title=title, command=command)
            step_env = {**env, "DEBIAN_FRONTEND": "noninteractive"} if user == "0:0" else env
            try:
                await asyncio.to_thread(container.run, title, command, user=user, env=step_env, deadline=deadline)
            except StepFailed as exc:
                failed = (exc, command)
                break
        if failed is not None:
            # Told once the proxy is gone: by then every decision it made has been read.
            raise _Failed
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
        if trust_file is not None:
            trust_file.unlink(missing_ok=True)
        if failed is not None:
            raise _failure(*failed, run) from None
    # The progress view labels every stage "environment …": the text does not say it again.
    run.say("built", f"{REPOSITORY}:{tags[0]} built in {time.monotonic() - started:.1f} s "
            f"({image_id[7:19]})", key=key)
    return image_id


