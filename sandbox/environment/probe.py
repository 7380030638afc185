"""What an image has: python3 (the helper needs it), a shell, a package manager and its sources.

One short container answers, hardened like every sandbox and with no network: the image is
whatever the operator named, and its answers are only ever parsed as text.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
from docker.types import Mount

from sandloop.errors import ConfigError, SandboxUnavailable

from ..docker import engine_errors, hardened_host_config

__all__ = ["ImageFacts", "NoShell", "Probe", "image_facts", "probe", "run_once"]

_MANAGERS = {"apt-get": "apt", "apk": "apk", "microdnf": "dnf", "dnf": "dnf", "yum": "dnf"}
_SCRIPT = """
echo "python3=$(command -v python3 || true)"
echo "bash=$(command -v bash || true)"
for m in apt-get apk microdnf dnf yum; do
  if command -v "$m" >/dev/null 2>&1; then echo "manager=$m"; break; fi
done
if [ -d /opt ]; then echo "opt=1"; fi
echo "---apt-list"; cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
echo "---apt-sources"; cat /etc/apt/sources.list.d/*.sources 2>/dev/null
echo "---apk"; cat /etc/apk/repositories 2>/dev/null
echo "---dnf"; cat /etc/yum.repos.d/*.repo 2>/dev/null
echo "---end"
"""
_TIMEOUT_S = 120


@dataclass(frozen=True)
class ImageFacts:
    """An image as the engine describes it (what a commit must restore, and its PATH)."""

    ref: str
    id: str
    path: str
    entrypoint: list[str] | None
    cmd: list[str] | None
    user: str
    workdir: str
    labels: dict[str, str]


def image_facts(client: docker.DockerClient, ref: str) -> ImageFacts:
    """The image's configuration; ConfigError when the engine does not have it."""
    facts = find_image(client, ref)
    if facts is None:
        raise ConfigError(f"image {ref} is not there (pull or build it first)")
    return facts


def find_image(client: docker.DockerClient, ref: str) -> ImageFacts | None:
    """The image's configuration, or None when the engine does not have it."""
    try:
        attrs: dict[str, Any] = client.api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(f"cannot inspect image {ref}: {exc.explanation or exc}") from exc
    config = attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return ImageFacts(ref=ref, id=str(attrs["Id"]), path=env.get("PATH", ""),
                      entrypoint=config.get("Entrypoint"), cmd=config.get("Cmd"),
                      user=str(config.get("User") or ""), workdir=str(config.get("WorkingDir") or ""),
                      labels=dict(config.get("Labels") or {}))


@dataclass(frozen=True)
class Probe:
    """What a look inside the image found."""

    shell: bool  # /bin/sh runs: without it nothing else could be found (or set up)
    python3: str | None = None
    bash: str | None = None
    manager: str | None = None  # the package manager's family: apt, apk or dnf
    manager_program: str | None = None  # apt-get, apk, microdnf, dnf or yum
    has_opt: bool = False
    sources: dict[str, str] = field(default_factory=dict)  # apt-list, apt-sources, apk, dnf → text


def parse(text: str) -> Probe:
    head, sources, section = {}, {}, None
    for line in text.splitlines():
        if line.startswith("---"):
            section = line[3:]
            sources[section] = ""
            continue
        if section is None:
            key, _, value = line.partition("=")
            head[key] = value.strip()
        elif section != "end":
            sources[section] += line + "\n"
    program = head.get("manager") or None
    return Probe(shell=True, python3=head.get("python3") or None, bash=head.get("bash") or None,
                 manager=_MANAGERS.get(program or ""), manager_program=program, has_opt=head.get("opt") == "1",
                 sources={k: v for k, v in sources.items() if k != "end" and v.strip()})


def run_once(client: docker.DockerClient, image: str, argv: list[str], *, user: str, mounts: list[Mount],
             doing: str, timeout_s: float = _TIMEOUT_S, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv`` (as the entrypoint: the image's own is not in the way) in a short-lived
    container, hardened like every sandbox, with no network; its exit code and stdout.
    Raises NoShell when the program cannot even start."""
    api = client.api
    with engine_errors(doing):
        host_config = hardened_host_config(api, mounts=mounts, network="none", memory="256m", cpus=1.0,
                                           pids_limit=64, tmpfs_size="16m", runtime=None,
                                           auto_remove=False)
        created = api.create_container(image, entrypoint=argv, command=[], user=user, network_disabled=True,
                                       environment=env or {}, host_config=host_config, labels={})
    try:
        try:
            api.start(created["Id"])
        except docker.errors.APIError as exc:
            text = str(exc.explanation or exc)
            if "no such file" in text.lower() or "not found" in text:
                raise NoShell(text) from None
            raise SandboxUnavailable(f"{doing}: {text}") from exc
        with engine_errors(doing):
            status = api.wait(created["Id"], timeout=timeout_s)
            out = api.logs(created["Id"], stdout=True, stderr=False).decode("utf-8", "replace")
        return int(status.get("StatusCode", -1)), out
    finally:
        with contextlib.suppress(docker.errors.APIError):
            api.remove_container(created["Id"], force=True, v=True)


class NoShell(Exception):
    """The program a one-off container was to run does not exist in the image."""


def probe(client: docker.DockerClient, image: str) -> Probe:
    """Look inside ``image`` (as root: the source lists are root's to read)."""
    doing = f"cannot look inside image {image}"
    try:
        code, out = run_once(client, image, ["/bin/sh", "-c", _SCRIPT], user="0:0", mounts=[], doing=doing)
    except NoShell:
        return Probe(shell=False)
    if code != 0 or "---end" not in out:
        raise SandboxUnavailable(f"{doing}: the probe exited {code}")
    return parse(out)
