"""What this host's package clients (pip, npm) are configured to reach, asked of the clients.

Nothing here names a registry: pip's index comes from pip itself (its option parser applies its
configuration files and ``PIP_*`` variables exactly as an install would, and knows its default
index), npm's from ``npm config``. Two parts of sandloop ask: environment setup, for the hosts its
proxy allows (:mod:`sandbox.environment.registries`), and the policy's ``[secrets]`` check, for
the hosts a ``setup_registries`` entry allows (:mod:`policies.lint`). Standard library only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sandloop.errors import ConfigError

__all__ = ["CLIENTS", "PipOptions", "host_of", "index_hosts", "npm_registries", "pip_options"]

#: The registries of ``setup_registries`` read from this host's clients (the others, apt, apk
#: and dnf, are the image's own package sources, known only once the image is looked at).
CLIENTS = ("pip", "npm")
_TIMEOUT_S = 60.0

_PIP_OPTIONS = """
import json
from pip._internal.commands import create_command
from pip._internal.models.index import PyPI
opts, _ = create_command("download").parse_args([])
print(json.dumps({"index_url": opts.index_url, "extra_index_urls": list(opts.extra_index_urls or []),
                  "find_links": list(opts.find_links or []), "trusted_hosts": list(opts.trusted_hosts or []),
                  "default_index": PyPI.simple_url, "default_files": PyPI.file_storage_domain}))
"""


def host_of(url: str) -> str | None:
    """``host`` or ``host:port`` (a port only when it is not the scheme's own) of an http(s) URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = parts.port
    except ValueError:
        return None
    default = 443 if parts.scheme == "https" else 80
    return host if port in (None, default) else f"{host}:{port}"


def _run_neutral(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a host client in an empty folder of its own: no project files, no project config."""
    with tempfile.TemporaryDirectory(prefix="sandloop-neutral-") as folder:
        return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False, cwd=folder)


# --- pip ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipOptions:
    index_url: str
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    trusted_hosts: tuple[str, ...]
    default_index: str
    default_files: str

    def index_hosts(self) -> list[str]:
        """The hosts of the index and the extra indexes (and the default index's file host)."""
        hosts = []
        for url in [self.index_url, *self.extra_index_urls]:
            host = host_of(url)
            if host is not None:
                hosts.append(host)
                if url.rstrip("/") == self.default_index.rstrip("/"):
                    hosts.append(self.default_files)
        return hosts


def pip_options(python: str | None = None) -> PipOptions:
    """pip's effective download options on this host, from pip's own option parser."""
    candidates = [python] if python else [sys.executable, shutil.which("python3") or ""]
    problems = []
    for exe in filter(None, candidates):
        try:
            # -I and a neutral folder: `python -c` would put the current folder (the checkout,
            # when sandloop runs in it) first on sys.path, and import its json.py on the host.
            done = _run_neutral([exe, "-I", "-c", _PIP_OPTIONS])
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{exe}: {exc}")
            continue
        if done.returncode == 0:
            try:
                found = json.loads(done.stdout.strip().splitlines()[-1])
                return PipOptions(
                    index_url=str(found["index_url"] or found["default_index"]),
                    extra_index_urls=tuple(map(str, found["extra_index_urls"])),
                    find_links=tuple(map(str, found["find_links"])),
                    trusted_hosts=tuple(map(str, found["trusted_hosts"])),
                    default_index=str(found["default_index"]), default_files=str(found["default_files"]))
            except (ValueError, IndexError, KeyError, TypeError):
                pass
        problems.append(f"{exe}: {(done.stderr.strip().splitlines() or ['no answer'])[-1]}")
    raise ConfigError("setup_registries names pip, but pip's configuration cannot be read on this host "
                      f"({'; '.join(problems)}): list the index hosts in setup_network instead")


# --- npm ---------------------------------------------------------------------------------------


def npm_registries(npm: str | None = None) -> dict[str, str]:
    """npm's ``registry`` and every ``@scope:registry`` (name → URL), as this host's npm is
    configured."""
    exe = npm or shutil.which("npm")
    if not exe:
        raise ConfigError("setup_registries names npm, but this host has no npm to read its registry from: "
                          "list the registry host in setup_network instead")
    try:
        # From a neutral folder: npm reads a project's .npmrc from the folder it runs in (and
        # those above it), and the checkout must never decide which hosts setup may reach.
        done = _run_neutral([exe, "config", "ls", "-l", "--json"])
        config = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ConfigError(f"setup_registries names npm, but `npm config ls` did not answer ({exc})") from None
    return {name: value for name, value in sorted(config.items())
            if isinstance(value, str) and (name == "registry" or re.fullmatch(r"@[^:/]+:registry", name))}


def index_hosts(names: Iterable[str]) -> tuple[str, ...]:
    """The registry hosts of the clients among ``names`` (``pip``, ``npm``) as this host has them
    configured; nothing is fetched. (Setup also allows the hosts an index serves its files from,
    which only asking the index tells.)"""
    hosts: list[str] = []
    for name in dict.fromkeys(names):
        if name == "pip":
            hosts.extend(pip_options().index_hosts())
        elif name == "npm":
            hosts.extend(h for h in map(host_of, npm_registries().values()) if h)
    return tuple(dict.fromkeys(hosts))
