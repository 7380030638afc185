"""Registry hosts from the clients' own configuration and the image's own sources."""

from __future__ import annotations

import shutil

import pytest

from sandbox.environment import registries
from sandbox.environment.probe import parse
from sandbox.environment.registries import host_of, pip_options, system_reach
from sandloop.errors import ConfigError


def test_host_of_keeps_only_a_non_default_port_and_web_schemes() -> None:
    assert host_of("https://mirror.test/simple") == "mirror.test"
    assert host_of("https://user:secret@mirror.test:8443/simple") == "mirror.test:8443"
    assert host_of("http://mirror.test:80/x") == "mirror.test"
    assert host_of("file:///opt/pypi/simple") is None
    assert host_of("http://[::1]:3141/root/pypi") == "[::1]:3141"


def test_apt_sources_one_line_and_deb822() -> None:
    found = parse(
        "python3=\nbash=/bin/bash\nmanager=apt-get\nopt=1\n"
        "---apt-list\n# comment\ndeb [signed-by=/k.gpg arch=amd64] http://mirror.test/debian bookworm main\n"
        "deb-src https://src.test:8080/debian bookworm main\n"
        "---apt-sources\nTypes: deb\nURIs: http://a.test/debian http://b.test/debian\nSuites: bookworm\n"
        "---apk\n---dnf\n---end\n")
    assert found.manager == "apt" and found.has_opt and found.python3 is None
    assert system_reach("apt", found.sources).hosts == ("mirror.test", "src.test:8080", "a.test", "b.test")


def test_apk_and_dnf_sources() -> None:
    apk = system_reach("apk", {"apk": "https://apk.test/v3.20/main\n@edge https://edge.test/edge/main\n#x\n"})
    assert apk.hosts == ("apk.test", "edge.test")
    dnf = system_reach("dnf", {"dnf": "[base]\nbaseurl=https://dnf.test/$releasever/\n"
                                      "metalink=https://meta.test/metalink?repo=x\n"})
    assert dnf.hosts == ("dnf.test", "meta.test") and "picks mirrors" in dnf.notes[0]
    assert "name no http" in system_reach("apt", {}).notes[0]


def test_pip_hosts_come_from_pips_own_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """With PIP_INDEX_URL set (as a host with a mirror would), the mirror is what setup reaches
    and is handed down to the container's pip; nothing else is invented."""
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid:8443/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/local https://extra.invalid/simple")
    opts = pip_options()
    assert opts.index_url == "https://mirror.invalid:8443/simple"
    reach = registries.pip_reach(probe_files=False)
    assert reach.hosts == ("mirror.invalid:8443", "extra.invalid")
    assert reach.env["PIP_INDEX_URL"] == "https://mirror.invalid:8443/simple"
    assert reach.env["PIP_EXTRA_INDEX_URL"] == "https://extra.invalid/simple"


def test_pips_default_index_brings_its_file_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    opts = pip_options()
    reach = registries.pip_reach(probe_files=False)
    if opts.index_url.rstrip("/") != opts.default_index.rstrip("/"):
        pytest.skip("this host's pip uses another index")
    assert reach.hosts[:2] == (host_of(opts.default_index), opts.default_files)


def test_npm_registry_from_npm_config(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("no npm on this host")
    monkeypatch.setenv("npm_config_registry", "https://npm.invalid:4873/")
    monkeypatch.setenv("npm_config_@corp:registry", "https://corp.invalid/npm/")
    reach = registries.npm_reach()
    assert reach.hosts == ("corp.invalid", "npm.invalid:4873")
    assert reach.env == {"npm_config_@corp:registry": "https://corp.invalid/npm/",
                         "npm_config_registry": "https://npm.invalid:4873/"}


def test_a_missing_npm_is_a_one_line_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="no npm"):
        registries.npm_reach()


def test_a_checkout_in_the_current_folder_decides_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """`sandloop run --repo .` runs in the checkout: a json.py there must not run on the host
    when pip's options are read, and its .npmrc must not add hosts to setup's allow-list."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    marker = tmp_path / "ran-on-the-host"
    (checkout / "json.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n"
                                      "raise SystemExit('planted json.py imported')\n")
    (checkout / "package.json").write_text('{"name": "x", "version": "1.0.0"}\n')
    (checkout / ".npmrc").write_text("registry=https://exfil.attacker.test/\n@x:registry=https://10.1.2.3:8443/\n")
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("npm_config_registry", raising=False)
    opts = pip_options()
    assert opts.index_url and not marker.exists()
    if shutil.which("npm") is not None:
        reach = registries.npm_reach()
        assert not {"exfil.attacker.test", "10.1.2.3:8443"} & set(reach.hosts), reach.hosts
        assert "exfil" not in str(reach.env)
