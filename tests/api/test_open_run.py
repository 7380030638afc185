"""The public API end to end: a run opened from a policy (real Docker session, real audit chain),
a task driven through the loop by the real openai client against the strict fake server, and
the sandbox used directly with the policy in front."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

import executor
from executor.testing import FakeResponsesServer, ScriptedModel, message
from policies.audit import check
from sandloop.errors import ConfigError, HostPathRefused, PathRefused
from tests.api.scenario import GIT_CONFIG, exit_codes, fixing_model, outputs

pytestmark = pytest.mark.docker


def _records(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]


async def test_a_task_runs_from_a_policy_and_its_files_stay_outside_the_workspace(
        repo: Path, state_dir: Path) -> None:
    with FakeResponsesServer(fixing_model()) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test-api", max_retries=0)
        async with executor.open_run(repo, policy="default", model="scripted", client=client) as run:
            outcome = await run.task("make the tests pass")
            head_now = run.audit_head
            folder = run.folder
        await client.close()
    assert not server.rejections, server.rejections
    assert outcome.result.exit_code is executor.ExitCode.ANSWERED
    assert outcome.result.final_text.startswith("calc.add subtracted")
    first, second = outputs(server.requests, "shell_call_output")
    assert exit_codes(first) != [0] and exit_codes(second) == [0]  # failing, then passing
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    # The run's folder: under the state directory, not the workspace; its chain verifies up to
    # the head the outcome carries, which is the head the run reports.
    assert folder.parent.parent == state_dir and repo not in folder.parents
    assert outcome.folder == folder and outcome.audit_head == head_now
    assert check(folder / "audit.jsonl", head=outcome.audit_head).problems == []
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["audit_head"]["sha256"] == outcome.audit_head.split(":")[0]
    assert [r["rule_id"] for r in _records(folder) if r["kind"] == "decision"] == [
        "python-test-runners", "files.writable", "python-test-runners"]


async def test_the_sandbox_asks_the_policy_and_the_audit_log_records_it(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    sandbox = await executor.open_sandbox(repo, policy="default", log=folder / "requests.jsonl")
    try:
        result = await sandbox.run("cat calc.py")
        assert result.exit_code == 0 and "def add" in result.stdout.text
        # rm prompts; nobody is at a terminal here, so the default approvals deny it
        with pytest.raises(executor.PolicyDenied, match=r"^command 'rm -rf victim' \(rule rm\): no approver"):
            await sandbox.run("rm -rf victim")
        assert (repo / "victim").read_text() == "keep me\n"
        await sandbox.write_file("notes/todo.txt", "fix add\n")
        assert (repo / "notes" / "todo.txt").read_text() == "fix add\n"
        assert await sandbox.read_file("notes/todo.txt") == b"fix add\n"
        with pytest.raises(PathRefused, match="read-only"):
            await sandbox.write_file(".git/config", "[core]\n\thooksPath = /tmp\n")
        assert (repo / ".git" / "config").read_text() == GIT_CONFIG
        with pytest.raises(PathRefused, match="inside the workspace"):
            await sandbox.write_file("../outside.txt", "x")
        assert not (repo.parent / "outside.txt").exists()
        # the opt-out: the raw session runs what it is given, and nothing is recorded
        raw = await sandbox.raw.run("echo unrecorded > raw.txt")
        assert raw.exit_code == 0 and (repo / "raw.txt").exists()
    finally:
        await sandbox.close()
        await sandbox.close()  # idempotent
    records = _records(folder)
    decisions = [(r["subject"], r["decision"], r["rule_id"]) for r in records if r["kind"] == "decision"]
    assert decisions == [("cat calc.py", "allow", "read-tools"), ("rm -rf victim", "deny", "rm"),
                         ("create_file notes/todo.txt", "allow", "files.writable"),
                         # refused by the path check itself, recorded as the policy's refusals are
                         ("create_file .git/config", "deny", "files.read_only"),
                         ("create_file ../outside.txt", "deny", "files.path")]
    assert [(r["subject"], r["outcome"], r["detail"]) for r in records if r["kind"] == "outcome"] == [
        ("cat calc.py", "ok", "exit 0"), ("notes/todo.txt", "ok", "written")]
    assert check(folder / "audit.jsonl").problems == []


async def test_a_policy_denial_names_its_rule_whoever_asks(repo: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nextends = ["default"]\n[files]\nwritable = ["*.py"]\n')
    async with executor.open_sandbox(repo, policy=policy) as sandbox:
        denied = r"^create_file notes.txt \(rule files.default\): notes.txt matches no writable"
        with pytest.raises(executor.PolicyDenied, match=denied):
            await sandbox.write_file("notes.txt", b"x")
        await sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    assert not (repo / "notes.txt").exists()
    assert (repo / "calc.py").read_text().endswith("a + b\n")


async def test_approvals_answer_the_policys_prompts(repo: Path) -> None:
    asked: list[str] = []

    def approve_rm_victim(request: executor.ApprovalRequest) -> bool:
        asked.append(request.subject)
        return request.subject == "rm victim"

    async with executor.open_sandbox(repo, approvals=executor.Callback(approve_rm_victim)) as sandbox:
        await sandbox.run("rm victim")
        with pytest.raises(executor.PolicyDenied, match=r"^command 'rm calc.py' \(rule rm\): denied by callback"):
            await sandbox.run("rm calc.py")
    assert asked == ["rm victim", "rm calc.py"]
    assert not (repo / "victim").exists() and (repo / "calc.py").exists()


async def test_run_files_inside_the_workspace_are_refused_before_anything_starts(repo: Path) -> None:
    with pytest.raises(HostPathRefused, match="inside"):
        await executor.open_run(repo, log=repo / "logs" / "requests.jsonl")
    assert not (repo / "logs").exists()


async def test_a_task_without_a_client_says_what_is_missing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with executor.open_run(repo) as run:
        with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
            await run.task("anything")


async def test_a_run_takes_several_tasks_on_one_chain(repo: Path) -> None:
    model = ScriptedModel([[message("one")], [message("two")]])
    with FakeResponsesServer(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test-api", max_retries=0)
        async with executor.open_run(repo, client=client) as run:
            first = await run.task("first")
            second = await run.task("second")
        await client.close()
    assert (first.result.final_text, second.result.final_text) == ("one", "two")
    assert first.folder == second.folder
    assert int(second.audit_head.split(":")[1]) >= int(first.audit_head.split(":")[1])
    requests = (first.folder / "requests.jsonl").read_text().splitlines()
    assert sum(json.loads(line).get("kind") == "summary" for line in requests) == 2


async def test_the_sync_twins_refuse_a_running_event_loop(repo: Path) -> None:
    with pytest.raises(RuntimeError, match=r"running.*async with executor.open_run\(") as info:
        executor.open_run_sync(repo)
    assert "open_run_sync" in str(info.value)
    with pytest.raises(RuntimeError, match=r"async with executor.open_sandbox\("):
        executor.open_sandbox_sync(repo)
