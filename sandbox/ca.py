"""Trusting the host's CA bundle inside a sandbox (an environment's ``trust_host_ca``), and a
session's own CA beside it when the egress proxy adds secrets (:func:`with_session_ca`).

On a network whose TLS goes through an intercepting proxy, a stock image fails certificate
verification against every package index: only the host's bundle holds the interception CA.
The bundle is bind-mounted read-only at a private path — never over the image's own bundle,
which a package install (ca-certificates) must still be able to replace — and every variable a
common client reads is pointed at it: OpenSSL and urllib (``SSL_CERT_FILE``), requests and pip
(``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``PIP_CERT``), curl, git (``GIT_SSL_CAINFO``),
node (``NODE_EXTRA_CA_CERTS``) and npm (``npm_config_cafile``). No single variable covers them
all.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from docker.types import Mount

from sandloop.errors import ConfigError

__all__ = ["CA_PATH", "CA_VARIABLES", "ca_env", "ca_mount", "host_bundle", "with_session_ca"]

#: Where the bundle appears inside a sandbox (beside sandloop's other read-only programs).
CA_PATH = "/opt/sandloop/ca.crt"
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                "NODE_EXTRA_CA_CERTS", "npm_config_cafile")


def host_bundle() -> Path:
    """The bundle this host's own clients trust: ``SSL_CERT_FILE`` when it names a file, else
    the file OpenSSL reads by default (through its links)."""
    given = os.environ.get("SSL_CERT_FILE", "")
    if given and Path(given).is_file():
        return Path(given).resolve()
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.openssl_cafile, paths.cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    raise ConfigError("trust_host_ca: this host has no CA bundle file to share (set SSL_CERT_FILE to one)")


def ca_env() -> dict[str, str]:
    """Every client's CA variable, pointed at the mounted bundle."""
    return dict.fromkeys(CA_VARIABLES, CA_PATH)


def ca_mount(bundle: str | os.PathLike[str]) -> Mount:
    return Mount(CA_PATH, os.fspath(bundle), type="bind", read_only=True)


def with_session_ca(base: str | os.PathLike[str] | None, ca_pem: str) -> bytes:
    """A session's bundle when its proxy adds secrets: what the sandbox trusted already (the
    host bundle it was given, else this host's) and the session CA, for that session only."""
    text = Path(base if base is not None else host_bundle()).read_text(encoding="utf-8", errors="replace")
    return f"{text.rstrip()}\n{ca_pem}".encode()
