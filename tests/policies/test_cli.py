from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from policies.audit import SUMMARY_KEY, AuditLog, Head
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


def test_check_shows_notes_and_passes(run: Run, write_policy: Callable[..., Path]) -> None:
    path = write_policy('version = 1\nextends = ["default"]\n')
    code, out, _ = run("policy", "check", str(path))
    assert code == 0 and "note browser-network-separate policies/presets/default.toml:" in out
    assert "no findings (1 note(s)" in out
    code, out, _ = run("policy", "check", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["findings"] == []
    assert [(n["code"], n["severity"]) for n in data["notes"]] == [("browser-network-separate", "note")]


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


def test_a_rule_written_in_no_file_is_located_as_built_in(run: Run, tmp_path: Path) -> None:
    """A write outside the workspace is decided by sandloop's own rule (files.outside), which no
    policy line holds: every place that prints a rule's location says built-in, never None."""
    code, out, _ = run("policy", "explain", "default", "--", "echo x > /etc/passwd")
    assert code == 0 and "by files.outside at built-in:" in out and "None" not in out
    cases = tmp_path / "cases.toml"
    cases.write_text('[[case]]\ncommand = "echo x > /etc/passwd"\ndecision = "deny"\n')
    code, out, _ = run("policy", "test", "default", str(cases))
    assert code == 1 and "(policies/presets/default.toml:" in out and "None" not in out
    cases.write_text('[[case]]\ncommand = "> /etc/passwd"\ndecision = "deny"\n')
    code, out, _ = run("policy", "test", "default", str(cases))
    assert code == 1 and "by files.outside (built-in)" in out and "None" not in out


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
    code, out, _ = run("audit", "verify", str(path), "--head", str(log.head()), "--json")
    assert code == 0 and json.loads(out) == {
        "ok": True, "problems": [], "records": 2, "log_head": str(log.head()),
        "head": str(log.head()), "after_head": 0}
    code, out, _ = run("audit", "summary", str(path))
    assert code == 0 and "git push" in out and "a.py" in out
    code, out, _ = run("audit", "summary", str(path), "--json")
    assert json.loads(out)["denied_commands"] == ["git push"]
    path.write_text(path.read_text().replace("git push", "git pusH"))
    code, out, _ = run("audit", "verify", str(path), "--json")
    assert code == 1 and json.loads(out)["problems"]
    code, out, err = run("audit", "verify", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "give its head, --summary or --head" in out + err
    # with a head, a missing log is the empty chain: valid at the empty head, removed at another
    empty = AuditLog(tmp_path / "none.jsonl").head()
    code, out, _ = run("audit", "verify", str(tmp_path / "missing.jsonl"), "--head", str(empty))
    assert code == 0 and "chain intact: 0 records" in out
    code, out, _ = run("audit", "verify", str(tmp_path / "missing.jsonl"), "--head", str(log.head()), "--json")
    assert code == 1 and "the log is missing" in json.loads(out)["problems"][0]


def _audit_log(path: Path, n: int = 5) -> Head:
    log = AuditLog(path)
    for i in range(n):
        log.record("decision", action="shell", subject=f"echo {i}", decision="allow", call_id=f"c{i}")
    return log.head()


def _keep(path: Path, keep: slice) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[keep]))


@pytest.fixture
def anchored(tmp_path: Path) -> tuple[Path, Head, Path]:
    """A five-record log, its head, and a run summary that keeps the head."""
    path = tmp_path / "audit.jsonl"
    head = _audit_log(path)
    run_summary = tmp_path / "run.json"
    run_summary.write_text(json.dumps({"run_id": "r1", "result": {"reason": "answered"},
                                       SUMMARY_KEY: head.to_json()}))
    return path, head, run_summary


def test_audit_verify_against_the_head(run: Run, anchored: tuple[Path, Head, Path]) -> None:
    path, head, run_summary = anchored
    code, out, _ = run("audit", "verify", str(path), "--head", str(head))
    assert code == 0 and "chain intact: 5 records, every one up to the head" in out
    assert f"this log's head now: {head}" in out
    code, out, _ = run("audit", "verify", str(path), "--summary", str(run_summary))
    assert code == 0 and "every one up to the head" in out
    code, out, _ = run("audit", "verify", str(path))
    assert code == 0 and "no head given" in out


def test_audit_verify_reports_a_cut_tail_given_the_head(run: Run, anchored: tuple[Path, Head, Path]) -> None:
    path, head, run_summary = anchored
    _keep(path, slice(0, 4))  # the last record removed
    code, out, _ = run("audit", "verify", str(path))
    assert code == 0 and "chain intact: 4 records (no head given" in out  # what it cannot see
    for anchor in (["--head", str(head)], ["--summary", str(run_summary)]):
        code, out, _ = run("audit", "verify", str(path), *anchor)
        assert code == 1 and "1 record(s) were removed from the end" in out, anchor
    code, out, _ = run("audit", "verify", str(path), "--head", head.sha256)  # no count
    assert code == 1 and "no line of the log hashes to the head" in out
    code, out, _ = run("audit", "verify", str(path), "--summary", str(run_summary), "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["records"] == 4 and data["head"] == str(head)


def test_audit_verify_reports_a_rewrite_given_the_head(run: Run, anchored: tuple[Path, Head, Path]) -> None:
    path, head, _ = anchored
    path.unlink()
    _audit_log(path)  # the same records again, every hash recomputed: a valid chain
    assert run("audit", "verify", str(path))[0] == 0  # the chain is not a signature
    code, out, _ = run("audit", "verify", str(path), "--head", str(head))
    assert code == 1 and "changed or rewritten" in out


@pytest.mark.parametrize(("what", "keep"), [("deletion inside", [0, 1, 3, 4]),
                                            ("reordering", [0, 2, 1, 3, 4])])
def test_audit_verify_reports_deletion_and_reordering(run: Run, anchored: tuple[Path, Head, Path],
                                                      what: str, keep: list[int]) -> None:
    path, head, _ = anchored
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[i] for i in keep))
    for anchor in ([], ["--head", str(head)]):
        code, out, _ = run("audit", "verify", str(path), *anchor)
        assert code == 1 and "does not follow line" in out, (what, anchor)


def test_audit_verify_reports_an_edit_in_the_last_line(run: Run, anchored: tuple[Path, Head, Path]) -> None:
    path, _, _ = anchored
    path.write_text(path.read_text().replace("echo 4", "echo 5"))
    code, out, _ = run("audit", "verify", str(path))
    assert code == 1 and "line 5: the record was changed" in out


def test_audit_verify_counts_records_after_the_head(run: Run, anchored: tuple[Path, Head, Path]) -> None:
    path, head, _ = anchored
    AuditLog(path).record("outcome", action="patch", subject="a.py", outcome="completed")
    code, out, _ = run("audit", "verify", str(path), "--head", str(head))
    assert code == 0 and "1 record(s) after the head" in out
    code, out, _ = run("audit", "verify", str(path), "--head", str(head), "--json")
    assert code == 0 and json.loads(out)["after_head"] == 1


def test_audit_verify_usage_errors(run: Run, anchored: tuple[Path, Head, Path], tmp_path: Path) -> None:
    path, head, run_summary = anchored
    for bad in (["--head", "not-a-hash"], ["--head", str(head), "--summary", str(run_summary)]):
        with pytest.raises(SystemExit) as exit_info:
            run("audit", "verify", str(path), *bad)
        assert exit_info.value.code == 2, bad
    no_head = tmp_path / "no-head.json"
    no_head.write_text("{}")
    code, _, err = run("audit", "verify", str(path), "--summary", str(no_head))
    assert code == 2 and SUMMARY_KEY in err
    code, _, err = run("audit", "verify", str(path), "--summary", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err


def test_audit_verify_help_says_what_is_and_is_not_detected(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="sandloop")
    register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["audit", "verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Detected: any edit" in text and "records removed from the end" in text
    assert "Not detected: a cut tail, or a whole log rewritten with recomputed hashes, when no head" in text
    assert "the chain is not signed" in text and SUMMARY_KEY in text


def test_help_documents_exit_codes(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="sandloop")
    register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["policy", "check", "--help"])
    assert "0 ok" in capsys.readouterr().out
