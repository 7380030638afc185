"""ShellTool and ApplyPatchTool over one sandloop session: the real Runner, the real policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import executor
from executor.agents_sdk import SandloopTools
from executor.agents_sdk.policy import APPROVED, REJECTED
from executor.testing import apply_patch_call, create_file, message, shell_call, update_file
from policies.audit import check
from tests.agents.harness import NeverAsked, sdk
from tests.api.scenario import GIT_CONFIG, exit_codes, fixing_turns, outputs

pytestmark = pytest.mark.docker


def _records(run: executor.Run) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run.folder / "audit.jsonl").read_text().splitlines()]


def _decisions(run: executor.Run) -> list[tuple[Any, ...]]:
    return [(r["subject"], r["decision"], r["rule_id"], r["approval"]) for r in _records(run)
            if r["kind"] == "decision"]


def _no_null_exit_codes(requests: list[dict[str, Any]]) -> None:
    for out in outputs(requests, "shell_call_output"):
        for entry in out["output"]:
            outcome = entry["outcome"]
            assert outcome["type"] == "timeout" or isinstance(outcome["exit_code"], int), out


async def test_a_failing_suite_passes_through_shell_and_apply_patch(repo: Path, never_asked: NeverAsked) -> None:
    approvals = executor.Callback(never_asked)
    async with executor.open_run(repo, approvals=approvals) as run, sdk(SandloopTools(run), fixing_turns()) as agent:
        result = await agent.run("make the tests pass")
        requests = agent.server.requests
    assert result.final_output == "calc.add subtracted; it adds now and the tests pass."
    first, second = outputs(requests, "shell_call_output")
    assert exit_codes(first) == [1] and "FAILED" in first["output"][0]["stderr"]
    assert exit_codes(second) == [0]
    (patched,) = outputs(requests, "apply_patch_call_output")
    assert patched["status"] == "completed" and patched["output"] == "updated calc.py: 1 hunk, +1 \u22121"
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    _no_null_exit_codes(requests)
    assert [d[:3] for d in _decisions(run)] == [("python3 -m unittest -q", "allow", "python-test-runners"),
                                                ("update_file calc.py", "allow", "files.writable"),
                                                ("python3 -m unittest -q", "allow", "python-test-runners")]
    assert check(run.folder / "audit.jsonl", head=run.audit_head).problems == []
    assert never_asked.asked == []


async def test_a_shell_call_and_a_patch_of_one_turn_run_together(repo: Path) -> None:
    # The SDK runs tool categories concurrently, the shell first: the command waits for the
    # file the patch creates, so it succeeds only if the patch is served while the command runs.
    # A lock shared by the adapters, or a session serving one request at a time, would make it
    # give up (exit 9).
    wait = "n=0; until [ -f made.txt ]; do sleep 0.05; n=$((n+1)); [ $n -gt 400 ] && exit 9; done; cat made.txt"
    turns = [[shell_call([wait]), apply_patch_call(create_file("made.txt", "+made\n"))], [message("both")]]
    async with executor.open_run(repo) as run, sdk(SandloopTools(run), turns) as agent:
        await agent.run("go")
        requests = agent.server.requests
    (shell,) = outputs(requests, "shell_call_output")
    assert exit_codes(shell) == [0] and shell["output"][0]["stdout"] == "made\n"
    (patch,) = outputs(requests, "apply_patch_call_output")
    assert patch["status"] == "completed"


async def test_timeouts_and_failures_carry_their_outcome(repo: Path) -> None:
    turns = [[shell_call(["exit 3", "sleep 5"], timeout_ms=500)], [message("done")]]
    async with executor.open_run(repo) as run, sdk(SandloopTools(run), turns) as agent:
        await agent.run("go")
        requests = agent.server.requests
    (out,) = outputs(requests, "shell_call_output")
    assert [e["outcome"] for e in out["output"]] == [{"type": "exit", "exit_code": 3}, {"type": "timeout"}]
    assert "timed out after 500 ms" in out["output"][1]["stderr"]
    _no_null_exit_codes(requests)


async def test_rm_rf_is_rejected_with_its_rule_and_nothing_runs(repo: Path) -> None:
    turns = [[shell_call(["ls", "rm -rf victim"])], [message("could not")]]
    async with executor.open_run(repo, policy="ci") as run, sdk(SandloopTools(run), turns) as agent:
        result = await agent.run("clean up")
        requests = agent.server.requests
    assert result.interruptions == [] and result.final_output == "could not"
    (out,) = outputs(requests, "shell_call_output")
    stderr = out["output"][0]["stderr"]
    assert stderr.startswith("sandloop: denied by policy (rule rm): rm deletes files with no undo")
    assert "unattended" in stderr
    assert (repo / "victim").read_text() == "keep me\n"
    assert _decisions(run) == [("rm -rf victim", "deny", "rm", None)]  # ls never ran: whole call refused


async def test_a_git_config_patch_is_refused_and_the_file_untouched(repo: Path) -> None:
    hook = "@@\n [core]\n \trepositoryformatversion = 0\n+\thooksPath = /tmp/evil\n"
    turns = [[apply_patch_call(update_file(".git/config", hook))], [message("refused")]]
    async with executor.open_run(repo) as run, sdk(SandloopTools(run), turns) as agent:
        await agent.run("configure git")
        requests = agent.server.requests
    (out,) = outputs(requests, "apply_patch_call_output")
    assert out["status"] == "failed"
    assert out["output"].startswith("path refused: update_file .git/config: '.git/config': the path is read-only")
    assert out["output"].endswith("No file was changed.")
    assert (repo / ".git" / "config").read_text() == GIT_CONFIG
    # refused by the patch's own path check, and recorded as the policy's refusals are
    assert [d[:3] for d in _decisions(run)] == [("update_file .git/config", "deny", "files.read_only")]
    assert check(run.folder / "audit.jsonl", head=run.audit_head).problems == []


async def test_a_patch_the_policy_denies_is_rejected_with_sandloops_text(repo: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nextends = ["default"]\n[files]\nwritable = ["*.py"]\n')
    turns = [[apply_patch_call(create_file("notes.txt", "+hi\n"))], [message("denied")]]
    async with executor.open_run(repo, policy=policy) as run, sdk(SandloopTools(run), turns) as agent:
        result = await agent.run("write notes")
        requests = agent.server.requests
    assert result.interruptions == []
    (out,) = outputs(requests, "apply_patch_call_output")
    assert out["status"] == "failed"
    assert out["output"] == ("denied by policy: create_file notes.txt: create_file notes.txt: notes.txt "
                             "matches no writable glob (rule files.default)\nNo file was changed.")
    assert not (repo / "notes.txt").exists()
    assert [d[:3] for d in _decisions(run)] == [("create_file notes.txt", "deny", "files.default")]


async def test_a_prompt_interrupts_and_the_approved_call_runs_once(repo: Path, never_asked: NeverAsked) -> None:
    turns = [[shell_call(["rm victim"])], [message("removed")]]
    async with executor.open_run(repo, approvals=executor.Callback(never_asked)) as run:
        tools = SandloopTools(run)
        async with sdk(tools, turns) as agent:
            result = await agent.run("remove the victim")
            assert result.final_output is None and len(agent.server.requests) == 1
            (item,) = result.interruptions
            assert await tools.describe(item) == (
                "shell: rm victim — prompt (rule rm: rm deletes files with no undo; a human confirms "
                "what goes (apply_patch deletes are checked per file))")
            assert (repo / "victim").exists()
            # resumed from the serialized state, as another process would: raw items are dicts now
            state = await agent.round_trip(result)
            (pending,) = state.get_interruptions()
            assert isinstance(pending.raw_item, dict)
            state.approve(pending)  # the SDK's own call: nothing of sandloop's needed
            result = await agent.run(state)
            requests = agent.server.requests
    assert result.final_output == "removed" and not (repo / "victim").exists()
    (out,) = outputs(requests, "shell_call_output")
    assert exit_codes(out) == [0]
    records = _records(run)
    asked = [r for r in records if r["kind"] in ("approval", "decision")]
    assert [(r["kind"], r.get("status"), r["policy_decision"]) for r in asked] == [
        ("approval", "pending", "prompt"), ("decision", None, "prompt")]
    assert _decisions(run) == [("rm victim", "allow", "rm", APPROVED)]
    assert never_asked.asked == []  # nobody was prompted a second time


async def test_a_rejection_tells_the_model_the_rule_and_the_audit_log_the_deny(repo: Path) -> None:
    turns = [[shell_call(["rm -rf victim"])], [message("kept it")]]
    async with executor.open_run(repo) as run:
        tools = SandloopTools(run)
        async with sdk(tools, turns) as agent:
            result = await agent.run("remove the victim")
            (item,) = result.interruptions
            state = result.to_state()
            text = await tools.reject(state, item)  # a fresh item: its raw item is the SDK's model
            result = await agent.run(state)
            requests = agent.server.requests
    assert result.final_output == "kept it" and (repo / "victim").exists()
    (out,) = outputs(requests, "shell_call_output")
    assert out["output"][0]["stderr"] == text
    assert text.startswith(f"sandloop: denied by policy (rule rm): {REJECTED} (rule: rm deletes files")
    assert _decisions(run) == [("rm -rf victim", "deny", "rm", REJECTED)]


async def test_a_prompted_patch_is_approved_and_recorded_under_its_call(repo: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nextends = ["default"]\n[files]\nwritable = ["*.py"]\ndefault = "prompt"\n')
    turns = [[apply_patch_call(create_file("notes.txt", "+hi\n"), call_id="call_notes")], [message("written")]]
    async with executor.open_run(repo, policy=policy) as run:
        tools = SandloopTools(run)
        async with sdk(tools, turns) as agent:
            result = await agent.run("write notes")
            assert len(result.interruptions) == 1 and not (repo / "notes.txt").exists()
            state = await agent.round_trip(result)
            (pending,) = state.get_interruptions()
            await tools.approve(state, pending)
            result = await agent.run(state)
            requests = agent.server.requests
    assert result.final_output == "written" and (repo / "notes.txt").read_text() == "hi\n"
    (out,) = outputs(requests, "apply_patch_call_output")
    assert out["status"] == "completed"
    records = _records(run)
    assert {r["call_id"] for r in records} == {"call_notes"}
    assert _decisions(run) == [("create_file notes.txt", "allow", "files.default", APPROVED)]
    assert [(r["subject"], r["outcome"]) for r in records if r["kind"] == "outcome"] == [("notes.txt", "ok")]
