"""A patch the transaction refuses itself — a read-only path, ``.git/...``, a path that climbs
out of the checkout, a symlink — is refused like a policy denial: nothing written, one DENY
record with its rule in the audit chain, a ``policy deny`` line in the progress, the rule in the
report. Driven through ``sandloop run`` by the real ``openai`` client against the fake
Responses server, the files in a real container."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from executor.cli import main
from executor.testing import FakeResponsesServer, ScriptedModel, apply_patch_call, create_file, message, update_file

pytestmark = pytest.mark.docker

POLICY = """\
version = 1
extends = ["default"]
unattended = true

[files]
read_only = ["**/.git/**", "locked/**"]
"""

#: call id → (the operation, the rule that must refuse it)
CALLS: dict[str, tuple[dict[str, str], str]] = {
    "p_git": (create_file(".git/hooks/pre-commit", "+#!/bin/sh\n+touch /tmp/pwned\n"), "files.read_only"),
    "p_out": (create_file("../outside.txt", "+overwritten\n"), "files.path"),
    "p_ro": (update_file("locked/data.txt", "@@\n-keep\n+changed\n"), "files.read_only"),
    "p_abs": (create_file("/workspace/abs.txt", "+x\n"), "files.path"),
    "p_link": (update_file("alias.txt", "@@\n-keep me\n+changed\n"), "files.path"),
    "p_escape": (create_file("escape/planted.txt", "+x\n"), "files.path"),  # a directory symlink out
}


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]


def test_refused_patches_are_audited_with_their_rule(
        tmp_path: Path, user_workspace: Path, docker_client: object,
        capsys: pytest.CaptureFixture[str]) -> None:
    (user_workspace / ".git" / "hooks").mkdir(parents=True)
    (user_workspace / "locked").mkdir()
    (user_workspace / "locked" / "data.txt").write_text("keep\n")
    (user_workspace / "victim").write_text("keep me\n")
    os.symlink("victim", user_workspace / "alias.txt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chown(elsewhere, 1000, 1000)
    os.symlink(elsewhere, user_workspace / "escape")
    for path in user_workspace.rglob("*"):
        os.lchown(path, 1000, 1000)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    folder = tmp_path / "run"
    model = ScriptedModel([[apply_patch_call(op, call_id=cid) for cid, (op, _) in CALLS.items()],
                           [message("done")]])
    with FakeResponsesServer(model) as server:
        code = main(["run", "patch things", "--repo", str(user_workspace), "--base-url", server.base_url,
                     "--policy", str(policy), "--log", str(folder / "requests.jsonl")])
    err = capsys.readouterr().err
    assert code in (0, 4), err

    # Nothing written: not in the checkout, not beside it, not through the symlink.
    assert not (user_workspace / ".git" / "hooks" / "pre-commit").exists()
    assert outside.read_text() == "keep\n" and not (tmp_path / "abs.txt").exists()
    assert (user_workspace / "locked" / "data.txt").read_text() == "keep\n"
    assert (user_workspace / "victim").read_text() == "keep me\n"
    assert sorted(p.name for p in user_workspace.iterdir()) == [".git", "alias.txt", "escape", "locked", "victim"]
    assert list(elsewhere.iterdir()) == []

    # One DENY per call, with the rule; the read-only one names where the policy writes it.
    decisions = {r["call_id"]: r for r in _records(folder) if r["kind"] == "decision" and r["action"] == "patch"}
    assert set(decisions) == set(CALLS)
    for cid, (_, rule) in CALLS.items():
        assert (decisions[cid]["decision"], decisions[cid]["rule_id"]) == ("deny", rule), decisions[cid]
    assert decisions["p_ro"]["source"].endswith("policy.toml:6")
    assert decisions["p_ro"]["path"] == "locked/data.txt"
    # The symlink is found once the policy has allowed the file: its refusal follows that ALLOW.
    assert [r["decision"] for r in _records(folder) if r.get("call_id") == "p_link"
            and r["kind"] == "decision"] == ["allow", "deny"]
    assert "symlink" in decisions["p_link"]["justification"]

    # The progress shows them as it shows the policy's denials.
    assert err.count("policy deny") >= len(CALLS), err
    assert "files.read_only" in err and "files.path" in err

    # The chain verifies, and the report carries the refusals with their rules.
    assert main(["audit", "verify", str(folder / "audit.jsonl")]) == 0
    assert main(["report", str(folder)]) == 0
    html = (folder / "report.html").read_text()
    assert "files.read_only" in html and "files.path" in html and ".git/hooks/pre-commit" in html
