"""One gate, every decision: ports in browser entries, case-folded read-only paths, and the lints
that warn an auditor where a policy does less than it seems to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import load_policy
from policies.lint import lint
from sandloop.verdict import Decision


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "policy.toml"
        path.write_text(text)
        return path
    return write


@pytest.mark.parametrize(("url", "decision"), [
    ("http://127.0.0.1:8080/", Decision.ALLOW), ("http://127.0.0.1:8081/", Decision.DENY),
    ("http://127.0.0.1/", Decision.DENY), ("http://0x7f000001:8080/", Decision.ALLOW),
    ("http://2130706433:22/", Decision.DENY), ("http://[::ffff:127.0.0.1]:8080/x", Decision.ALLOW),
    ("https://docs.example.com/", Decision.ALLOW), ("https://docs.example.com:8443/", Decision.DENY),
    ("http://localhost:8080/", Decision.DENY),
])
def test_a_browser_entry_with_a_port_opens_only_that_port(url: str, decision: Decision,
                                                          write_policy: Callable[[str], Path]) -> None:
    engine = load_policy(write_policy('version = 1\n[browser]\n'
                                      'allow_domains = ["127.0.0.1:8080", "docs.example.com:443"]\n'))
    verdict = engine.url(url)
    assert verdict.decision is decision, (url, verdict)
    assert verdict.rule_id  # every decision names its rule


def test_a_bare_loopback_or_private_address_is_a_lint_finding(write_policy: Callable[[str], Path]) -> None:
    engine = load_policy(write_policy('version = 1\n[browser]\n'
                                      'allow_domains = ["127.0.0.1", "10.0.0.5", "localhost", "8.8.8.8", '
                                      '"127.0.0.1:8080", "example.com"]\n'))
    flagged = [f.message for f in lint(engine) if f.code == "address-without-port"]
    assert len(flagged) == 3
    assert all("name the port" in message for message in flagged)


def test_no_network_with_an_inherited_open_browser_is_a_lint_finding(write_policy: Callable[[str], Path]) -> None:
    engine = load_policy(write_policy('version = 1\nextends = ["default"]\n[shell]\nnetwork = "none"\n'))
    (finding,) = [f for f in lint(engine) if f.code == "browser-network-separate"]
    assert "governed by [browser] on its own" in finding.message
    said = load_policy(write_policy('version = 1\nextends = ["default"]\n[browser]\nallow_domains = ["*"]\n'))
    assert not [f for f in lint(said) if f.code == "browser-network-separate"]


@pytest.mark.parametrize("path", [".GIT/hooks/pre-commit", ".Git/config", "sub/.gIt/hooks/x", ".git"])
def test_git_is_protected_whatever_its_case(path: str) -> None:
    """On a case-insensitive file system .GIT is .git: read-only globs compare without case."""
    for preset in ("default", "ci"):
        verdict = load_policy(preset).patch(path, "update_file")
        assert verdict.decision is Decision.DENY and verdict.rule_id == "files.read_only", (path, verdict)
