"""What the egress proxy decides reaches the run's audit chain, with its rule: a request to a
host the policy's ``[shell] network`` list does not name is refused by the proxy (before any
connection: the name is never even resolved) and recorded as a denied egress decision."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from executor.run import RunOptions, run_task
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from policies.audit import verify

pytestmark = pytest.mark.docker

POLICY = '''version = 1
extends = ["default"]

[shell]
network = ["allowed.example.test"]

[[shell.rules]]
id = "curl-for-the-test"
pattern = ["curl"]
decision = "allow"
justification = "the test's own probe"
match = ["curl -s http://x.test/"]
'''


def test_a_refused_egress_request_is_in_the_audit_chain(tmp_path: Path, user_workspace: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    probe = "curl -s -o /dev/null -w '%{http_code}' http://refused.example.test:8000/x"
    model = ScriptedModel([[shell_call([probe], call_id="c1")], [message("done")]])
    with FakeResponsesServer(model) as server:
        opts = RunOptions(task="probe", repo=user_workspace, base_url=server.base_url, api_key="sk-test-0000",
                          policy=str(policy), log=tmp_path / "run" / "requests.jsonl")
        outcome = asyncio.run(run_task(opts, Console(file=io.StringIO())))
    assert outcome.result.exit_code == 0, outcome.result.detail
    shell_output = outcome.result.turns[0].calls[0].output
    assert shell_output is not None and shell_output["output"][0]["stdout"] == "403"  # refused by the proxy
    records = [json.loads(line) for line in (outcome.folder / "audit.jsonl").read_text().splitlines()]
    egress = [r for r in records if r.get("action") == "egress"]
    assert [(r["subject"], r["decision"], r["rule_id"]) for r in egress] == [
        ("GET refused.example.test:8000", "deny", "shell.network")]
    assert "matches none of: allowed.example.test" in egress[0]["justification"]
    assert verify(outcome.folder / "audit.jsonl", head=outcome.audit_head) == []
