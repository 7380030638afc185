"""How system packages are installed, per package manager (apt is exercised for real by the
python3 bootstrap in test_setup.py; apk and dnf images are not on this machine)."""

from __future__ import annotations

from sandbox.environment.probe import Probe
from sandbox.environment.setup import package_commands


def test_apt_runs_as_capless_root_and_fails_when_a_source_fails() -> None:
    lines = package_commands(Probe(shell=True, manager="apt", manager_program="apt-get"), ["libpq-dev", "jq=1.6*"])
    assert "APT::Sandbox::User=root" in lines[0] and "APT::Update::Error-Mode=any" in lines[0]
    assert lines[1].endswith("--no-install-recommends libpq-dev 'jq=1.6*'")
    assert "rm -rf /var/lib/apt/lists" in lines[2]


def test_apk_and_the_dnf_family() -> None:
    assert package_commands(Probe(shell=True, manager="apk", manager_program="apk"), ["python3"]) == [
        "apk add --no-cache python3"]
    assert package_commands(Probe(shell=True, manager="dnf", manager_program="microdnf"), ["python3"]) == [
        "microdnf install -y python3", "microdnf clean all"]
    assert package_commands(Probe(shell=True, manager="dnf", manager_program="dnf"), ["python3"])[0] == \
        "dnf install -y --setopt=install_weak_deps=False python3"
    assert package_commands(Probe(shell=True), ["python3"]) == []
