"""A whole run with a ``[secrets]`` policy: the model's commands reach the service with the token,
and the token is nowhere the run leaves behind — request log, audit chain, summary, report —
nor in what the model read, even when the service echoes it.

The service is the HTTPS server of ``tests/egress/https_world.py``, on a private bridge address
(an internal service: ``private = true``); the run's proxy is joined to its network as soon as it
appears, and the model's first command waits for that.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import docker
import pytest
from rich.console import Console

from executor.report import write_report
from executor.run import RunOptions, run_task
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from policies.audit import verify
from tests.egress import https_world
from tests.egress.https_world import PORT, UNTRUSTED_PORT

pytestmark = pytest.mark.docker

ENV = "SANDLOOP_TEST_RUN_TOKEN"
POLICY = f'''version = 1
[shell]
default = "allow"
network = ["api.test:{PORT}", "other.test:{PORT}", "api.test:{UNTRUSTED_PORT}", "api.test:{PORT + 2}"]
''' + https_world.secret_table("api", ENV) + "".join(
    # The error paths: a server the host does not trust, and a port where nothing listens.
    f'[secrets.{name}]\nhost = "api.test"\nport = {port}\nenv = "{ENV}"\nprivate = true\n'
    for name, port in (("untrusted", UNTRUSTED_PORT), ("closed", PORT + 2)))


def test_the_secret_is_used_and_never_recorded(docker_client: docker.DockerClient, tmp_path: Path,
                                                user_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target, token = https_world.serve(docker_client, tmp_path, monkeypatch.setenv, ENV, "secrun")
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    wait = f"for i in $(seq 200); do curl -sf --max-time 5 https://api.test:{PORT}/check && break; sleep 0.1; done"
    model = ScriptedModel([[shell_call([wait, f"curl -s https://api.test:{PORT}/echo",
                                        f"curl -sSL https://api.test:{PORT}/redirect",
                                        f"curl -sS https://api.test:{UNTRUSTED_PORT}/echo",
                                        f"curl -sS https://api.test:{PORT + 2}/echo"], call_id="c1")],
                           [message("done")]])
    try:
        with https_world.joining_proxies(docker_client, target), FakeResponsesServer(model) as server:
            opts = RunOptions(task="call the service", repo=user_workspace, base_url=server.base_url,
                              api_key="sk-test-0000", policy=str(policy), log=tmp_path / "run" / "requests.jsonl")
            outcome = asyncio.run(run_task(opts, Console(file=io.StringIO())))
    finally:
        https_world.stop_target(docker_client, target)
    assert outcome.result.exit_code == 0, outcome.result.detail
    output = outcome.result.turns[0].calls[0].output
    assert output is not None
    assert json.loads(output["output"][0]["stdout"])["ok"] is True
    assert output["output"][1]["stdout"] == "you sent: Bearer " + "*" * len(token)
    # Followed to another host: a CONNECT of its own, matching no secret (and here refused, as
    # other.test is a private address only api.test's entry may reach).
    assert "CONNECT tunnel failed, response 403" in output["output"][2]["stderr"]
    # Neither a server that fails verification nor a closed port gets it: each a 502 to CONNECT.
    assert "502" in output["output"][3]["stderr"] and "502" in output["output"][4]["stderr"]
    assert token not in json.dumps(outcome.result.turns[0].calls[0].output)

    records = [json.loads(line) for line in (outcome.folder / "audit.jsonl").read_text().splitlines()]
    injected = [r for r in records if r.get("action") == "egress" and r.get("rule_id") == "secrets.api"]
    assert {(r["subject"], r["decision"]) for r in injected} == {(f"GET api.test:{PORT}", "allow")}
    assert len(injected) == 3 and all(r["secret"] == "api" for r in injected)
    refused = {r["subject"] for r in records if r.get("action") == "egress" and r.get("decision") == "deny"}
    assert {f"CONNECT other.test:{PORT}", f"CONNECT api.test:{UNTRUSTED_PORT}",
            f"CONNECT api.test:{PORT + 2}"} <= refused, refused
    assert verify(outcome.folder / "audit.jsonl", head=outcome.audit_head) == []

    write_report(outcome.folder)
    left = {path.name: path.read_bytes() for path in outcome.folder.rglob("*") if path.is_file()}
    assert {"requests.jsonl", "audit.jsonl", "summary.json", "report.html"} <= set(left)
    assert [name for name, data in left.items() if token.encode() in data] == []
