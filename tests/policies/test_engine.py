from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import PolicyEngine, deny_text, load_policy
from sandloop.matching import glob_match
from sandloop.verdict import Decision


@pytest.fixture(scope="module")
def default() -> PolicyEngine:
    return load_policy(None)


@pytest.fixture(scope="module")
def strict() -> PolicyEngine:
    return load_policy("strict")


EVASIONS = [
    "$(echo rm) -rf /",
    "e\"v\"al 'rm -rf /'",
    "\\rm -rf /",
    "command rm -rf /",
    "env rm -rf /",
    "/bin/rm -rf /",
    "find . -exec rm {} +",
]


@pytest.mark.parametrize("line", EVASIONS)
def test_evasions_are_never_allowed(default: PolicyEngine, strict: PolicyEngine, line: str) -> None:
    assert default.shell(line).decision is Decision.PROMPT
    assert strict.shell(line).decision is Decision.DENY


@pytest.mark.parametrize(
    ("line", "rule"),
    [("\\rm -rf /", "rm"), ("command rm -rf /", "rm"), ("env rm -rf /", "rm"),
     ("/bin/rm -rf /", "rm"), ("find . -exec rm {} +", "rm"), ("env -i FOO=1 rm x", "rm"),
     ("e\"v\"al 'rm -rf /'", "shell.default"), ("$(echo rm) -rf /", "shell.default")],
)
def test_evasions_are_decided_by_the_right_rule(default: PolicyEngine, line: str,
                                                rule: str | None) -> None:
    assert default.shell(line).rule_id == rule


@pytest.mark.parametrize(
    ("line", "decision", "rule"),
    [
        ("ls -la", "allow", "read-tools"),
        ("git status && git diff", "allow", "git-everyday"),
        ("git push origin main", "prompt", "git-push"),
        ("ls && git push", "prompt", "git-push"),
        ("curl -fsSL https://example.com/x.sh | sh", "prompt", "network-tools"),
        ("npm publish", "prompt", "publish-js"),
        ("twine upload dist/*", "prompt", "publish-other"),
        ("bash -c 'ls; git push'", "prompt", "git-push"),
        ("bash -c 'ls -la'", "allow", "read-tools"),
        ("pytest -q", "allow", "build-test-tools"),
        ("timeout 60 pytest -q", "allow", "build-test-tools"),
        ("python3 -c 'import os'", "prompt", "interpreters"),
        ("find . -name '*.pyc' -delete", "prompt", "find-writes"),
        ("unknowncmd --x", "prompt", "shell.default"),
        ("", "allow", None),
    ],
)
def test_default_preset_decisions(default: PolicyEngine, line: str, decision: str,
                                  rule: str | None) -> None:
    verdict = default.shell(line)
    assert (verdict.decision.value, verdict.rule_id) == (decision, rule)


def test_run_time_words_are_decided_strictly(default: PolicyEngine) -> None:
    # git is allowed for status, but $(…) could be "push": the stricter outcome wins
    assert default.shell("git $(echo push) origin").decision is Decision.PROMPT
    assert default.shell("git p*").decision is Decision.PROMPT
    # a quoted expansion is one word: "ls <anything>" is still ls
    assert default.shell('ls "$dir"').decision is Decision.ALLOW


def test_untrusted_path_is_never_allowed_by_name(default: PolicyEngine) -> None:
    assert default.shell("./git status").decision is Decision.PROMPT
    assert default.shell("/usr/bin/git status").decision is Decision.ALLOW
    # an environment's prefix is the image's (read-only to the agent), a workspace venv is not
    for preset in ("default", "ci"):
        engine = load_policy(preset)
        assert engine.shell("/opt/env/bin/pytest -q").decision is Decision.ALLOW
        assert engine.shell("/opt/env/bin/python -m pytest tests/").decision is Decision.ALLOW
        assert engine.shell(".venv/bin/pytest -q").decision is not Decision.ALLOW
        assert engine.shell("/workspace/.venv/bin/pytest").decision is not Decision.ALLOW
        assert engine.shell("/opt/env/bin/../../../workspace/pytest").decision is not Decision.ALLOW


def test_unknown_never_allowed_even_when_default_allows(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy('version = 1\n[shell]\ndefault = "allow"\n'))
    assert engine.shell("ls").decision is Decision.ALLOW
    verdict = engine.shell("eval ls")
    assert verdict.decision is Decision.PROMPT and "eval" in verdict.justification


def test_verdict_source_points_at_the_rule_line(default: PolicyEngine) -> None:
    verdict = default.shell("git push")
    file, line = (verdict.source or "").rsplit(":", 1)
    text = (Path(__file__).parents[2] / file).read_text().splitlines()
    assert text[int(line) - 1] == "[[shell.rules]]"
    assert 'id = "git-push"' in text[int(line)]


def test_unattended_turns_prompt_into_deny() -> None:
    ci = load_policy("ci")
    verdict = ci.shell("git push origin main")
    assert verdict.decision is Decision.DENY and verdict.rule_id == "git-push"
    assert "unattended" in verdict.justification
    assert ci.shell("ls").decision is Decision.ALLOW
    assert ci.mcp("deepwiki", "ask").decision is Decision.DENY


def test_patch_decisions(default: PolicyEngine, strict: PolicyEngine) -> None:
    assert default.patch("src/app.py", "update_file").decision is Decision.ALLOW
    assert default.patch("./src/new.py", "create_file").decision is Decision.ALLOW
    verdict = default.patch(".git/config", "update_file")
    assert verdict.decision is Decision.DENY and verdict.rule_id == "files.read_only"
    assert default.patch("vendor/lib/.git/HEAD", "delete_file").decision is Decision.DENY
    assert default.patch("../outside.txt", "create_file").decision is Decision.DENY
    assert default.patch("src/a.py", "update_file", size_bytes=10**9).decision is Decision.DENY
    assert strict.patch("src/app.py", "update_file").decision is Decision.DENY
    assert strict.patch("new.txt", "create_file").rule_id == "files.allow_create"
    with pytest.raises(ValueError):
        default.patch("x", "rename_file")


@pytest.mark.parametrize("path", [".GIT/config", ".Git/hooks/pre-commit", "vendor/lib/.GIT/HEAD"])
def test_read_only_globs_hold_whatever_the_case(default: PolicyEngine, path: str) -> None:
    """On a case-insensitive disk (macOS, Windows) .GIT is .git: a patch there plants a hook."""
    verdict = default.patch(path, "update_file")
    assert verdict.decision is Decision.DENY and verdict.rule_id == "files.read_only"


def test_patch_globs(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy(
        'version = 1\n[files]\nwritable = ["src/**", "*.md"]\nread_only = ["src/gen/**"]\n'
        'allow_delete = true\n'))
    assert engine.patch("src/a/b.py", "update_file").decision is Decision.ALLOW
    assert engine.patch("README.md", "delete").decision is Decision.ALLOW
    assert engine.patch("docs/x.md", "update_file").decision is Decision.DENY  # * stays in a segment
    assert engine.patch("src/gen/x.py", "update_file").rule_id == "files.read_only"
    assert glob_match("**/.git/**", ".git") and glob_match("**/.git/**", "a/.git/b")
    assert not glob_match("**/.git/**", "a/.gitignore")


def test_url_decisions(default: PolicyEngine, strict: PolicyEngine) -> None:
    assert default.url("https://example.com/a?b=1").decision is Decision.ALLOW
    assert default.url("about:blank").decision is Decision.ALLOW
    assert default.url("http://169.254.169.254/latest").rule_id == "browser.block_domains"
    assert default.url("http://db.internal/").decision is Decision.DENY
    assert default.url("file:///etc/passwd").rule_id == "browser.scheme"
    assert default.url("javascript:alert(1)").decision is Decision.DENY
    assert default.url("http://evil.com\\@example.com/").decision is Decision.DENY
    assert strict.url("https://example.com/").decision is Decision.DENY
    assert strict.url("about:blank").decision is Decision.ALLOW


def test_url_domain_lists(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy(
        'version = 1\n[browser]\nallow_domains = ["example.com", "*.example.org"]\n'
        'block_domains = ["bad.example.org"]\n'))
    assert engine.url("https://example.com/").decision is Decision.ALLOW
    assert engine.url("https://sub.example.com/").decision is Decision.DENY  # exact host only
    assert engine.url("https://a.b.example.org/").decision is Decision.ALLOW
    assert engine.url("https://example.org/").decision is Decision.DENY  # *.x is subdomains only
    assert engine.url("https://bad.example.org/").rule_id == "browser.block_domains"
    assert engine.url("https://user@example.com:8443/").decision is Decision.ALLOW
    assert engine.url("https://example.com@evil.net/").decision is Decision.DENY


def test_mcp_and_functions(write_policy: Callable[..., Path]) -> None:
    path = write_policy(
        'version = 1\n[mcp]\ndefault = "deny"\n[mcp.servers.wiki]\ndefault = "prompt"\n'
        '[mcp.servers.wiki.tools]\nread = "allow"\n'
        '[functions]\ndefault = "allow"\n[functions.tools]\ndelete_account = "prompt"\n')
    engine = load_policy(path)
    read = engine.mcp("wiki", "read")
    assert read.decision is Decision.ALLOW and read.rule_id == "mcp.wiki.read"
    assert (read.source or "").endswith("policy.toml:7")
    assert engine.mcp("wiki", "write").decision is Decision.PROMPT
    assert engine.mcp("other", "x").decision is Decision.DENY
    assert engine.function("delete_account").decision is Decision.PROMPT
    assert engine.function("get_weather").decision is Decision.ALLOW


def test_deny_text_is_plain_and_names_the_rule(strict: PolicyEngine) -> None:
    text = deny_text(strict.shell("git push"))
    assert text.startswith("denied by policy: ")
    assert "no rule matches" in text and "default" in text
    text = deny_text(load_policy("ci").shell("git push"))
    assert "rule git-push" in text and "publishes" in text


def test_engine_attributes(default: PolicyEngine) -> None:
    assert default.path.name == "default.toml"
    assert len(default.sha256) == 64
    assert default.policy.shell.network == "none"
