"""The hosts a package client needs during setup, from the client's own configuration.

Nothing here names a registry: pip's index comes from pip itself (its option parser applies
its configuration files and ``PIP_*`` variables exactly as an install would, and knows its
default index), npm's from ``npm config``, and the system package manager's from the image's
own source lists. What a setup's proxy may reach follows from those answers at build time:

* **pip** — the index and extra indexes (``http(s)`` only; a ``file://`` index is the host's
  and useless in a container), and the host(s) their files are served from, which differ from
  the index's: pip's default index names its file host itself, any other index is asked for
  one project page (PEP 691 JSON, else the HTML links). The index URLs are passed to setup as
  ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``: a container's pip has no configuration.
* **npm** — ``registry`` and every ``@scope:registry``, passed on as ``npm_config_*``.

Reading pip's and npm's configuration is :mod:`sandloop.package_clients` (the policy's secrets
check asks it too); what needs the network or an image is here.
* **apt / apk / dnf** — the URIs in the image's sources (one-line and deb822 apt files, apk's
  repositories, dnf's ``baseurl`` / ``mirrorlist`` / ``metalink``).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urljoin

from sandloop.package_clients import PipOptions, host_of, npm_registries, pip_options

__all__ = ["SYSTEM", "PipOptions", "Reach", "host_of", "npm_reach", "pip_options", "pip_reach", "system_reach"]

#: Registries read from the image (its package manager's sources) rather than from this host.
SYSTEM = ("apt", "apk", "dnf")


@dataclass(frozen=True)
class Reach:
    """What one registry needs: host entries for the proxy, variables for setup, and notes."""

    hosts: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __add__(self, other: Reach) -> Reach:
        return Reach(tuple(dict.fromkeys((*self.hosts, *other.hosts))), {**self.env, **other.env},
                     (*self.notes, *other.notes))


def _web(urls: Iterable[str]) -> list[str]:
    return [u for u in urls if host_of(u) is not None]


# --- pip ---------------------------------------------------------------------------------------


def _file_hosts(index: str) -> tuple[list[str], str | None]:
    """The hosts one project page of an index links its files to (PEP 691 JSON, else HTML)."""
    page = index.rstrip("/") + "/pip/"
    request = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read(8 << 20).decode("utf-8", "replace")
            kind = response.headers.get("Content-Type", "")
    except OSError as exc:
        return [], f"could not ask {host_of(index)} where its files are ({exc}); only the index host is allowed"
    if "json" in kind:
        try:
            links = [str(f.get("url", "")) for f in json.loads(body).get("files", [])]
        except (ValueError, AttributeError):
            links = []
    else:
        links = re.findall(r'href="([^"]+)"', body)
    hosts = dict.fromkeys(h for h in (host_of(urljoin(page, link)) for link in links) if h)
    return list(hosts), None


def pip_reach(python: str | None = None, *, probe_files: bool = True) -> Reach:
    """pip's index hosts and file hosts, and the variables that give setup the same indexes."""
    opts = pip_options(python)
    index = opts.index_url
    extras = _web(opts.extra_index_urls)
    links = _web(opts.find_links)
    hosts: list[str] = opts.index_hosts()
    notes: list[str] = []
    for url in [index, *extras]:
        if probe_files and host_of(url) is not None and url.rstrip("/") != opts.default_index.rstrip("/"):
            found, note = _file_hosts(url)
            hosts.extend(found)
            notes.extend([note] if note else [])
    hosts.extend(h for h in map(host_of, links) if h)
    env = {"PIP_INDEX_URL": index} if host_of(index) else {}
    if extras:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extras)
    if links:
        env["PIP_FIND_LINKS"] = " ".join(links)
    if opts.trusted_hosts:
        env["PIP_TRUSTED_HOST"] = " ".join(opts.trusted_hosts)
    return Reach(tuple(dict.fromkeys(hosts)), env, tuple(notes))


# --- npm ---------------------------------------------------------------------------------------


def npm_reach(npm: str | None = None) -> Reach:
    """npm's registry and scoped registries, as this host's npm is configured."""
    hosts: list[str] = []
    env: dict[str, str] = {}
    for name, value in npm_registries(npm).items():
        host = host_of(value)
        if host is None:
            continue
        hosts.append(host)
        env[f"npm_config_{name}"] = value
    return Reach(tuple(dict.fromkeys(hosts)), env)


# --- the image's package manager ---------------------------------------------------------------


def _apt_uris(lists: str, deb822: str) -> list[str]:
    uris = []
    for line in lists.splitlines():
        words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 2 and words[0] in ("deb", "deb-src"):
            uris.append(words[1])
    for line in deb822.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "uris":
            uris.extend(value.split())
    return uris


def _apk_uris(text: str) -> list[str]:
    uris = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            uris.append(words[-1])  # "@tag URL" or "URL"
    return uris


def _dnf_uris(text: str) -> tuple[list[str], list[str]]:
    uris, notes = [], []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in ("baseurl", "mirrorlist", "metalink"):
            uris.extend(value.split())
            if key != "baseurl":
                notes.append(f"{key} {value.strip()} picks mirrors at run time: those not listed are refused "
                             "(name them in setup_network, or use a baseurl)")
    # $releasever, $basearch … make no difference to the host
    return uris, notes


def system_reach(manager: str, sources: dict[str, str]) -> Reach:
    """The hosts the image's own package sources name (``sources``: file kind → their text)."""
    notes: list[str] = []
    if manager == "apt":
        uris = _apt_uris(sources.get("apt-list", ""), sources.get("apt-sources", ""))
    elif manager == "apk":
        uris = _apk_uris(sources.get("apk", ""))
    elif manager == "dnf":
        uris, notes = _dnf_uris(sources.get("dnf", ""))
    else:
        return Reach()
    hosts = [h for h in map(host_of, uris) if h]
    if not hosts:
        notes.append(f"the image's {manager} sources name no http(s) host")
    return Reach(tuple(dict.fromkeys(hosts)), {}, tuple(dict.fromkeys(notes)))
