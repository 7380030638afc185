"""The timeline read back from a real run (tests.report.scenario): every call with what it did
and what the policy decided, in the order it happened."""

from __future__ import annotations

import pytest

from executor.report import load_run
from executor.report.model import Call, ComputerView, GenericView, PatchView, Run, ShellView
from policies.engine import load_policy
from tests.report.scenario import Scenario

pytestmark = [pytest.mark.docker, pytest.mark.browser]


@pytest.fixture(scope="module")
def run(scenario: Scenario) -> Run:
    return load_run(scenario.folder)


def by_summary(run: Run) -> dict[str, Call]:
    return {c.summary: c for c in run.calls}


def test_the_header_facts(run: Run, scenario: Scenario) -> None:
    meta = run.meta
    assert meta["task"] == "Tidy the repository, then search for 'hello' on the local page."
    assert meta["model"] == "scripted" and meta["endpoint"].startswith("http://127.0.0.1:")
    policy = scenario.folder.parent / "policy.toml"
    assert meta["policy_path"] == str(policy)
    assert meta["policy_sha256"] == load_policy(str(policy)).sha256
    assert (meta["placement"], meta["runtime"]) == ("local", "runc")
    assert run.result is not None and run.result["reason"] == "answered"
    assert len(run.turns) == len(scenario.result.turns) == 7
    assert len(run.calls) == scenario.result.tool_calls == 15
    assert run.audit.verified and len(run.decisions) == 15 <= run.audit.records  # and outcomes
    assert run.decision_counts() == {"allowed": 10, "prompted": 2, "approved": 1, "refused": 1,
                                     "denied": 3}
    assert run.problems == [] and run.stray_decisions == []


def test_each_call_has_its_outcome_and_decisions(run: Run) -> None:
    calls = by_summary(run)
    navigate = next(s for s in calls if s.startswith("navigate"))
    printf = "3 commands"  # printf, seq, ls: each listed in the call's body, never joined with &&
    assert {s: c.status for s, c in calls.items()} == {
        "2 commands": "ok", printf: "failed", "curl http://127.0.0.1:9/": "denied",
        "sleep 5": "timeout", "update_file a.txt": "ok", "update_file locked/x.txt": "denied",
        "rm old.txt": "ok", "rm keep.txt": "denied", navigate: "ok", "screenshot": "ok",
        "click, type, keypress": "ok", "scroll, drag, move": "ok",
        'lookup({"query": "what is <b>bold</b>?"})': "failed", "gh.list_issues": "ok",
        "gh.delete_repo": "denied"}
    printing = calls[printf]
    assert isinstance(printing.view, ShellView)
    assert [c.command.split(" ")[0] for c in printing.view.commands] == ["printf", "seq", "ls"]
    assert [(c.exit_code, c.timed_out) for c in printing.view.commands] == [(0, False), (0, False),
                                                                            (2, False)]
    assert [c.decision.rule_id for c in printing.view.commands if c.decision] == ["shell.default"] * 3
    assert printing.status == "failed" and printing.flags == ["error"]
    curl = calls["curl http://127.0.0.1:9/"]
    assert [(d.decision, d.rule_id, d.justification) for d in curl.decisions] == [
        ("deny", "no-curl", "no network tools in this sandbox")]
    assert curl.decisions[0].source is not None and curl.decisions[0].source.endswith("policy.toml:7")
    assert curl.flags == ["denied"]  # refused, not an error
    sleep = calls["sleep 5"]
    assert isinstance(sleep.view, ShellView) and sleep.view.commands[0].timed_out
    assert sleep.status == "timeout"
    old, keep = calls["rm old.txt"], calls["rm keep.txt"]
    assert [(d.policy_decision, d.decision, d.approval) for d in old.decisions] == [
        ("prompt", "allow", "approved by callback")]
    assert [(d.policy_decision, d.decision) for d in keep.decisions] == [("prompt", "deny")]
    assert old.flags == ["prompted"] and keep.flags == ["denied", "prompted"]


def test_patches_views(run: Run) -> None:
    calls = by_summary(run)
    patch = calls["update_file a.txt"]
    assert isinstance(patch.view, PatchView)
    (file,) = patch.view.files
    assert file.lines == [("hunk", "@@"), ("del", "one"), ("add", "two"), ("add", "three")]
    assert (file.added, file.removed, patch.view.status) == (2, 1, "completed")
    assert file.decision is not None and file.decision.rule_id == "files.writable"
    locked = calls["update_file locked/x.txt"]
    assert isinstance(locked.view, PatchView) and locked.view.status == "failed"
    assert "read-only" in locked.view.message
    # refused by the patch's own read-only check, and in the audit log like a policy denial
    assert [(d.decision, d.rule_id) for d in locked.decisions] == [("deny", "files.read_only")]


def test_computer_calls_chain_their_screenshots(run: Run) -> None:
    calls = by_summary(run)
    first, click, scroll = calls["screenshot"], calls["click, type, keypress"], calls["scroll, drag, move"]
    views = [c.view for c in (first, click, scroll)]
    assert all(isinstance(v, ComputerView) for v in views)
    a, b, c = views
    assert isinstance(a, ComputerView) and isinstance(b, ComputerView) and isinstance(c, ComputerView)
    assert a.before is None and a.after is not None
    assert b.before == a.after and c.before == b.after and c.after is not None
    assert len({a.after, b.after, c.after}) == 3  # typing and scrolling changed the page
    shots = run.files.screenshots
    assert all((shots / f"{sha}.png").is_file() for sha in run.screenshots())
    assert b.url is not None and b.url.endswith("/page") and b.url_known_from == "the browser, after the actions"
    assert [(s.code, s.answer) for s in c.safety] == [("malicious_instructions", "acknowledged")]
    assert [a["type"] for a in c.actions] == ["scroll", "drag", "move"]


def test_function_and_mcp_calls(run: Run) -> None:
    calls = by_summary(run)
    lookup = calls['lookup({"query": "what is <b>bold</b>?"})']
    assert isinstance(lookup.view, GenericView)
    assert lookup.view.arguments == '{\n  "query": "what is <b>bold</b>?"\n}'
    assert lookup.view.output.startswith("internal error (RuntimeError): the index is down")
    assert lookup.status == "failed"
    allowed, refused = calls["gh.list_issues"], calls["gh.delete_repo"]
    assert isinstance(allowed.view, GenericView) and allowed.view.output.startswith("approved")
    assert isinstance(refused.view, GenericView) and refused.view.output.startswith("refused")
    assert [d.rule_id for d in allowed.decisions + refused.decisions] == ["mcp.gh.list_issues", "mcp.gh"]
    assert refused.denied and not allowed.denied
