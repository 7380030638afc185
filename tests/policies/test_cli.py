from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from policies.audit import AuditLog
from policies.cli import register

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*argv: str) -> tuple[int, str, str]:
        parser = argparse.ArgumentParser(prog="sandloop")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(list(argv))
        code = args.func(args)
        out, err = capsys.readouterr()
        return code, out, err

    return call


BROKEN = 'version = 1\n[shell]\ndefault = "allow"\n\n[files]\nwritable = "all"\n'


@pytest.mark.parametrize("preset", ["default", "strict", "ci"])
def test_check_presets_pass(run: Run, preset: str) -> None:
    code, out, _ = run("policy", "check", preset)
    assert code == 0 and "no findings" in out
    code, out, _ = run("policy", "check", preset, "--json")
    assert code == 0 and json.loads(out)["findings"] == []


def test_check_preset_file_by_path(run: Run) -> None:
    path = Path(__file__).parents[2] / "policies" / "presets" / "default.toml"
    assert run("policy", "check", str(path))[0] == 0


def test_check_broken_policy_fails_with_the_line(run: Run, write_policy: Callable[..., Path]) -> None:
    path = write_policy(BROKEN)
    code, _, err = run("policy", "check", str(path))
    assert code == 2 and "policy.toml:6:" in err and "files.writable" in err
    code, out, _ = run("policy", "check", str(path), "--json")
    assert code == 2 and "policy.toml:6:" in json.loads(out)["errors"][0]


def test_check_reports_lint_findings(run: Run, write_policy: Callable[..., Path]) -> None:
    path = write_policy('version = 1\n[[shell.rules]]\nid = "sh"\npattern = ["bash"]\n'
                        'decision = "allow"\njustification = "j"\n')
    code, out, _ = run("policy", "check", str(path), "--json")
    data = json.loads(out)
    assert code == 1 and data["findings"][0]["code"] == "escapable-allow"
    assert data["findings"][0]["source"].endswith("policy.toml:2")
    code, out, _ = run("policy", "check", str(path))
    assert code == 1 and "escapable-allow" in out


def test_explain_command(run: Run) -> None:
    code, out, _ = run("policy", "explain", "default", "--", "git push origin main")
    assert code == 0 and "prompt" in out and "git-push" in out and "default.toml:" in out
    code, out, _ = run("policy", "explain", "--json", "default", "--", "ls && $(echo rm) -rf /")
    data = json.loads(out)
    assert data["verdict"]["decision"] == "prompt"
    assert [c["decision"] for c in data["commands"]] == ["allow", "allow", "prompt"]
    assert data["commands"][2]["unknown"]
    code, out, _ = run("policy", "explain", "--json", "strict", "--", "echo", "a b")
    assert json.loads(out)["input"] == "echo 'a b'"


def test_explain_patch_and_url(run: Run, tmp_path: Path) -> None:
    op = tmp_path / "op.json"
    op.write_text(json.dumps({"type": "update_file", "path": ".git/config", "diff": "@@\n-a\n+b\n"}))
    code, out, _ = run("policy", "explain", "default", "--patch", str(op), "--json")
    assert code == 0 and json.loads(out)["verdict"]["rule_id"] == "files.read_only"
    code, out, _ = run("policy", "explain", "default", "--url", "http://169.254.169.254/")
    assert code == 0 and "deny" in out and "browser.block_domains" in out
    assert run("policy", "explain", "default")[0] == 2  # nothing to explain
    op.write_text("{}")
    assert run("policy", "explain", "default", "--patch", str(op))[0] == 2


def test_test_command_with_cases(run: Run, tmp_path: Path) -> None:
    cases = tmp_path / "cases.toml"
    cases.write_text(
        '[[case]]\ncommand = "git push origin main"\ndecision = "prompt"\nrule = "git-push"\n'
        '[[case]]\npatch = { path = ".git/config", kind = "update_file" }\ndecision = "deny"\n'
        '[[case]]\nurl = "https://example.com/"\ndecision = "allow"\n'
        '[[case]]\nmcp = { server = "wiki", tool = "read" }\ndecision = "prompt"\n'
        '[[case]]\nfunction = "get_weather"\ndecision = "allow"\n')
    code, out, _ = run("policy", "test", "default", str(cases))
    assert code == 0 and "0 failed" in out
    cases.write_text(cases.read_text() + '[[case]]\ncommand = "ls"\ndecision = "deny"\n')
    code, out, _ = run("policy", "test", "default", str(cases), "--json")
    data = json.loads(out)
    assert code == 1 and len(data["failures"]) == 1 and "'ls'" in data["failures"][0]


def test_test_command_reports_every_failing_example(run: Run,
                                                    write_policy: Callable[..., Path]) -> None:
    path = write_policy('version = 1\n[[shell.rules]]\nid = "r"\npattern = ["git", "push"]\n'
                        'decision = "prompt"\njustification = "j"\nmatch = ["git pull", "git push"]\n'
                        'not_match = ["git push -f"]\n')
    code, out, _ = run("policy", "test", str(path))
    assert code == 1 and "2 failed" in out and "'git pull'" in out


def test_test_command_bad_cases_file(run: Run, tmp_path: Path) -> None:
    cases = tmp_path / "cases.toml"
    cases.write_text('[[case]]\ncommand = "ls"\nurl = "x"\ndecision = "allow"\n')
    code, _, err = run("policy", "test", "default", str(cases))
    assert code == 2 and "exactly one" in err and "cases.toml:1" in err


def test_diff(run: Run, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("# comment\ngit push origin main\nls\n")
    code, out, _ = run("policy", "diff", "default", "ci", "--corpus", str(corpus), "--json")
    data = json.loads(out)
    assert code == 1
    changed = {c["input"]: (c["old"]["decision"], c["new"]["decision"]) for c in data["changed"]}
    assert changed["git push origin main"] == ("prompt", "deny")
    assert "ls" not in changed
    assert {"key": "unattended", "old": False, "new": True} in data["settings"]
    code, out, _ = run("policy", "diff", "default", "default")
    assert code == 0 and "0 of" in out
    assert run("policy", "diff", "default", "ci", "--corpus", str(tmp_path / "none"))[0] == 2


def test_schema(run: Run) -> None:
    code, out, _ = run("policy", "schema")
    assert code == 0 and json.loads(out)["title"] == "sandloop policy"


def test_audit_verify_and_summary(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record("decision", action="shell", subject="git push", decision="deny", rule_id="git-push")
    log.record("outcome", action="patch", subject="a.py", outcome="completed")
    code, out, _ = run("audit", "verify", str(path))
    assert code == 0 and "chain intact" in out
    code, out, _ = run("audit", "verify", str(path), "--head", log.head, "--json")
    assert code == 0 and json.loads(out) == {"ok": True, "problems": []}
    code, out, _ = run("audit", "summary", str(path))
    assert code == 0 and "git push" in out and "a.py" in out
    code, out, _ = run("audit", "summary", str(path), "--json")
    assert json.loads(out)["denied_commands"] == ["git push"]
    path.write_text(path.read_text().replace("git push", "git pusH"))
    code, out, _ = run("audit", "verify", str(path), "--json")
    assert code == 1 and json.loads(out)["problems"]
    assert run("audit", "verify", str(tmp_path / "missing.jsonl"))[0] == 2


def test_help_documents_exit_codes(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="sandloop")
    register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["policy", "check", "--help"])
    assert "0 ok" in capsys.readouterr().out
