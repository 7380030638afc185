"""Environment setup from a private package index with a token: setup's proxy adds it, pip
installs from the index, and neither the cached image nor the agent's session holds it."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from executor.testing import ScriptedModel, message, shell_call
from tests.egress import https_world
from tests.egress.https_world import PORT

from .conftest import env_show, remove_key, run_cli

pytestmark = pytest.mark.docker

ENV = "SANDLOOP_TEST_INDEX_TOKEN"
INDEX = f"https://api.test:{PORT}/simple/"


def test_setup_installs_from_a_private_index_without_holding_the_token(
        docker_client: docker.DockerClient, tmp_path: Path, user_workspace: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    target, token = https_world.serve(docker_client, tmp_path, monkeypatch.setenv, ENV, "secenv")
    # The setup proxy is joined to the index's network as it starts: the first step waits for it.
    wait = f"for i in $(seq 200); do curl -sf -o /dev/null {INDEX}tinypkg/ && break; sleep 0.1; done"
    policy = tmp_path / "policy.toml"
    # The agent's commands are this test's own (python3 runs them): every command allowed, no network.
    policy.write_text(f'''version = 1
unattended = true
[shell]
default = "allow"

[environment]
setup = ["{wait}",
         "python3 -m venv /opt/env && /opt/env/bin/pip install -q --index-url {INDEX} tinypkg"]
setup_network = ["api.test:{PORT}"]
''' + https_world.secret_table("index", ENV))
    key = str(env_show(policy, user_workspace, capsys)["key"])
    # Removing a committed image can take far longer than the suite client's 10 s on a busy engine.
    patient = docker.from_env(timeout=300)
    remove_key(patient, key)
    (user_workspace / "scan.py").write_text(https_world.SCAN)
    model = ScriptedModel([[shell_call(["/opt/env/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'",
                                        https_world.scan_command(token)], call_id="c1")],
                           [message("done")]])
    try:
        with https_world.joining_proxies(docker_client, target):
            code, _, err = run_cli(user_workspace, policy, tmp_path / "run", model, capsys)
    finally:
        https_world.stop_target(docker_client, target)
        remove_key(patient, key)
        patient.close()
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    outputs = [item for r in records if r["kind"] == "request" for item in r["body"].get("input") or []
               if isinstance(item, dict) and item.get("type") == "shell_call_output"]
    assert outputs, records
    found, scan = outputs[0]["output"]
    assert found["stdout"] == "from the private index\n", found
    # The agent's session starts from the committed setup: nothing in it holds the token.
    assert json.loads(scan["stdout"])["hits"] == [], scan
    log = (tmp_path / "run" / "environment.log").read_text()
    assert "the proxy adds secrets on requests to: api.test:8443 (index)" in log
    assert token not in log
