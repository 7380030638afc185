"""Hostile paths through a real DockerSession: each fails with a reason and changes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import docker
import pytest
from openai.types.responses import ResponseApplyPatchToolCall, ResponseCustomToolCall

from executor.approvals import DenyAll
from executor.handlers.apply_patch import (
    gate_allow,
    gate_refused,
    handle_apply_patch_call,
    handle_apply_patch_custom_call,
)
from executor.policy_gate import PolicyGate
from policies.audit import AuditLog, verify
from policies.engine import load_policy
from sandbox.docker import DockerSession
from tests.patch.conftest import allow_all, tree

pytestmark = pytest.mark.docker


def _call(n: int, operation: dict[str, Any]) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall.model_validate(
        {"type": "apply_patch_call", "id": f"apc_{n}", "call_id": f"call_{n}",
         "status": "completed", "operation": operation}
    )


LEXICAL = [
    ({"type": "create_file", "path": "../x", "diff": "+x\n"}, "'..' segments"),
    ({"type": "create_file", "path": "/etc/passwd", "diff": "+x\n"}, "absolute paths"),
    ({"type": "update_file", "path": "/etc/passwd", "diff": "@@\n+x\n"}, "absolute paths"),
    ({"type": "create_file", "path": "a/../../x", "diff": "+x\n"}, "'..' segments"),
    ({"type": "create_file", "path": "x\0y", "diff": "+x\n"}, "control character U+0000"),
    ({"type": "create_file", "path": ".git/hooks/pre-commit", "diff": "+#!/bin/sh\n"}, "read-only"),
    ({"type": "delete_file", "path": ".git/HEAD"}, "read-only"),
    ({"type": "create_file", "path": "~/.bashrc", "diff": "+x\n"}, "'~'"),
]


async def test_lexically_hostile_paths_fail_with_a_reason(
    docker_client: docker.DockerClient, user_workspace: Path
) -> None:
    (user_workspace / "a.txt").write_text("a\n")
    (user_workspace / ".git" / "hooks").mkdir(parents=True)
    (user_workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = tree(user_workspace)
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        for n, (operation, reason) in enumerate(LEXICAL):
            out = await handle_apply_patch_call(_call(n, operation), session, allow=allow_all)
            assert out["status"] == "failed", operation
            text = out.get("output") or ""
            assert text.startswith("path refused: ") and reason in text, text
        outside = await session.run("test ! -e /x && test ! -e /workspace/../x && echo clean")
    assert outside.stdout.text.strip() == "clean"
    assert tree(user_workspace) == before


async def test_symlink_planted_by_a_shell_command_cannot_lead_outside(
    docker_client: docker.DockerClient, user_workspace: Path
) -> None:
    (user_workspace / "a.txt").write_text("a\n")
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        planted = await session.run("ln -s /etc link && ln -s /etc/hostname host && ls -l")
        assert planted.exit_code == 0, planted.stderr.text
        before = tree(user_workspace)
        etc_before = (await session.run("ls -la /etc; cat /etc/hostname")).stdout.text
        attempts = [
            {"type": "create_file", "path": "link/evil.conf", "diff": "+pwned\n"},
            {"type": "update_file", "path": "link/hostname", "diff": "@@\n+pwned\n"},
            {"type": "delete_file", "path": "link/hostname"},
            {"type": "update_file", "path": "host", "diff": "@@\n+pwned\n"},
            {"type": "create_file", "path": "host", "diff": "+pwned\n"},
        ]
        for n, operation in enumerate(attempts):
            out = await handle_apply_patch_call(_call(n, operation), session, allow=allow_all)
            assert out["status"] == "failed", operation
            text = out.get("output") or ""
            assert text.startswith("path refused: ") and "symlink" in text, text
        etc_after = (await session.run("ls -la /etc; cat /etc/hostname")).stdout.text
    assert etc_after == etc_before
    assert tree(user_workspace) == before


async def test_move_into_a_read_only_glob_is_refused_and_writes_nothing(
    docker_client: docker.DockerClient, user_workspace: Path
) -> None:
    (user_workspace / "a.txt").write_text("a\n")
    (user_workspace / "secret").mkdir()
    (user_workspace / "secret" / "a.txt").write_text("top secret\n")
    for p in [user_workspace / "a.txt", *user_workspace.glob("secret/**/*"), user_workspace / "secret"]:
        os.chown(p, 1000, 1000)  # writable by the sandbox user: only the check stands in the way
    before = tree(user_workspace)
    texts: list[str] = []
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        for n, dest in enumerate(["secret/a.txt", "secret/new/b.txt", "./secret//a.txt"]):
            patch = (
                f"*** Begin Patch\n*** Update File: a.txt\n*** Move to: {dest}\n"
                "@@\n-a\n+moved\n*** End Patch\n"
            )
            item = ResponseCustomToolCall.model_validate(
                {"type": "custom_tool_call", "call_id": f"call_mv{n}", "name": "apply_patch",
                 "input": patch}
            )
            out = await handle_apply_patch_custom_call(
                item, session, allow=allow_all, read_only_globs=("secret/**",)
            )
            texts.append(str(out["output"]))
        # What the container sees, not only what the host copy says.
        seen = await session.run("cat a.txt secret/a.txt; test ! -e secret/new && echo clean")
    assert seen.stdout.text == "a\ntop secret\nclean\n", texts
    assert tree(user_workspace) == before
    for text in texts:
        assert text.startswith("path refused: update_file a.txt: "), text
        assert "the path is read-only (matches 'secret/**')" in text, text
        assert "No file was changed." in text


class _PlantsBeforeCommit(DockerSession):
    """The real session, whose sandbox swaps a checked directory for a symlink out just before
    the commit: a shell command racing the patch, made to win every time."""

    async def commit(self, changes: Any) -> None:
        planted = await self.run("rm -r d && ln -s /etc d")
        assert planted.exit_code == 0, planted.stderr.text
        await super().commit(changes)


def _gate_over_a_folder_d(user_workspace: Path, tmp_path: Path) -> PolicyGate:
    """The default policy's gate, logging to tmp_path, over a checkout with a folder ``d`` (the
    one :class:`_PlantsBeforeCommit` swaps for a symlink)."""
    (user_workspace / "d").mkdir()
    os.chown(user_workspace / "d", 1000, 1000)
    return PolicyGate(load_policy("default"), DenyAll(), AuditLog(tmp_path / "audit.jsonl"))


def _decisions(tmp_path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "decision"]


async def test_a_symlink_planted_before_the_commit_is_refused_and_audited(
    docker_client: docker.DockerClient, user_workspace: Path, tmp_path: Path
) -> None:
    gate = _gate_over_a_folder_d(user_workspace, tmp_path)
    operation = {"type": "create_file", "path": "d/evil.conf", "diff": "+pwned\n"}
    async with await _PlantsBeforeCommit.create(user_workspace, client=docker_client) as session:
        out = await handle_apply_patch_call(_call(0, operation), session, allow=gate_allow(gate, "call_0", 7),
                                            refused=gate_refused(gate, "call_0"))
        leaked = await session.run("test ! -e /etc/evil.conf && echo clean")
    assert out["status"] == "failed" and leaked.stdout.text == "clean\n", out
    records = _decisions(tmp_path)
    # The policy allowed the file; the session refused it where it lives, and that is recorded.
    assert [(r["decision"], r["rule_id"], r["path"]) for r in records] == [
        ("allow", "files.writable", "d/evil.conf"), ("deny", "files.path", "d/evil.conf")]
    assert verify(tmp_path / "audit.jsonl") == []


async def test_a_refused_commit_of_several_files_records_each_under_its_own_path(
    docker_client: docker.DockerClient, user_workspace: Path, tmp_path: Path
) -> None:
    # The session refuses the commit whole: neither file is written, and each is recorded by its
    # own path (one record for a joined "a, b" would name a path nobody gave).
    gate = _gate_over_a_folder_d(user_workspace, tmp_path)
    patch = "*** Begin Patch\n*** Add File: d/evil.conf\n+pwned\n*** Add File: ok.txt\n+fine\n*** End Patch\n"
    item = ResponseCustomToolCall.model_validate(
        {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": patch})
    async with await _PlantsBeforeCommit.create(user_workspace, client=docker_client) as session:
        out = await handle_apply_patch_custom_call(item, session, allow=gate_allow(gate, "call_1", 7),
                                                   refused=gate_refused(gate, "call_1"))
        leaked = await session.run("test ! -e /etc/evil.conf && test ! -e ok.txt && echo clean")
    assert leaked.stdout.text == "clean\n", out
    records = _decisions(tmp_path)
    denies = [(r["rule_id"], r["path"]) for r in records if r["decision"] == "deny"]
    assert sorted(denies) == [("files.path", "d/evil.conf"), ("files.path", "ok.txt")]
    assert verify(tmp_path / "audit.jsonl") == []
