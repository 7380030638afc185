"""Snapshot and resume through the command line: a real ``sandloop run`` is asked for a snapshot
(``sandloop snapshot RUN``) while the model thinks, then SIGKILLed; ``sandloop run --resume``
goes on. The package installed into $HOME is there, the background writer is not (running
processes are not captured), the fake Responses server sees the conversation continue from the
snapshot's response, one audit chain verifies across both runs, and no secret of the host — the
API key, a variable of the front-end's environment — is in the snapshot."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from tests.api.scenario import outputs
from tests.api.test_snapshot_api import INSTALL, USE, _policy, _stdout

pytestmark = pytest.mark.docker

SANDLOOP = str(Path(sys.executable).with_name("sandloop"))
API_KEY = "sk-snapshot-cli-secret-5678"
HOST_SECRET = "host-secret-value-9f3c1a"
WRITER = "(while true; do echo tick >> ~/bg.log; sleep 0.1; done) > /dev/null 2>&1 &"
COUNT = "a=$(wc -l < ~/bg.log); sleep 0.6; b=$(wc -l < ~/bg.log); echo lines $a $b"


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(state), "OPENAI_API_KEY": API_KEY,
            "SANDLOOP_TEST_SECRET": HOST_SECRET, "OPENAI_BASE_URL": ""}


def _sandloop(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SANDLOOP, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("when", ["asked", "every_turn", "ctrl_c"])
def test_a_killed_run_resumes_from_its_snapshot(repo: Path, tmp_path: Path, when: str) -> None:
    """``asked``: ``sandloop snapshot RUN`` while the model thinks, then SIGKILL; ``every_turn``:
    nobody asks, the policy snapshots each turn's end, then SIGKILL; ``ctrl_c``: SIGINT while
    the model thinks, and the policy's on_stop snapshot."""
    arrived, release = threading.Event(), threading.Event()

    def thinking(body: dict[str, Any], history: list[Any]) -> Any:
        arrived.set()  # the front-end now waits for the model: a safe point
        release.wait(120)
        return [message("this answer is never read")]

    model = ScriptedModel([[shell_call([INSTALL, WRITER, "sleep 0.5"])], thinking,
                           [shell_call([USE, COUNT])], [message("snapmod is still there")]])
    policy = _policy(tmp_path, 'snapshot = "every_turn"\n' if when == "every_turn" else "")
    if when == "every_turn":
        policy.write_text(policy.read_text().replace('snapshot = "on_stop"\n', ""))
    state = tmp_path / "state"
    env = _env(state)
    with FakeResponsesServer(model) as server:
        front = subprocess.Popen([SANDLOOP, "run", "install snapmod, then start a writer", "--repo", str(repo),
                                  "--policy", str(policy), "--base-url", server.base_url, "--model", "scripted"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert arrived.wait(120), front.stderr.read() if front.poll() is not None else "no second request"
            (run,) = list((state / "sandloop" / "runs").iterdir())
            if when == "asked":
                took = _sandloop("snapshot", run.name, env=env)
                assert took.returncode == 0, took.stderr
                assert f"--resume {run.name}" in took.stdout
            if when == "ctrl_c":
                front.send_signal(signal.SIGINT)  # a clean stop: the snapshot is taken on the way out
                front.wait(120)
                assert "interrupted" in front.stderr.read()
            else:
                front.send_signal(signal.SIGKILL)  # the owner dies: its container goes with it
                front.wait(30)
        finally:
            release.set()
            if front.poll() is None:
                front.kill()
                front.wait()
        snap = run / "snapshot"
        manifest = json.loads((snap / "manifest.json").read_text())
        # never in a snapshot: the API key, the host's environment
        for path in snap.iterdir():
            data = path.read_bytes()
            assert API_KEY.encode() not in data and HOST_SECRET.encode() not in data, path

        # the policy file changed: refused in one line, the difference shown
        original = policy.read_text()
        policy.write_text(original + "\n[budget]\nmax_turns = 9\n")
        refused = _sandloop("run", "--resume", run.name, env=env)
        assert refused.returncode == 2, refused.stderr
        assert "+max_turns = 9" in refused.stdout + refused.stderr
        assert "--policy-changed-ok" in refused.stderr.strip().splitlines()[-1]
        policy.write_text(original)

        resumed = _sandloop("run", "--resume", run.name, "check snapmod", "--json", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert ("the model is asked again" in resumed.stderr) == (when == "ctrl_c")
    assert not server.rejections, server.rejections
    result = json.loads(resumed.stdout)
    assert result["final_text"] == "snapmod is still there"
    # the model's next turn sees the conversation so far: chained on the first response, the
    # first turn's outputs, then the new task
    first_response = server.responses[0]["id"]
    body = server.requests[2]
    assert body["previous_response_id"] == first_response
    assert [item.get("type") for item in body["input"]] == ["shell_call_output", None]
    assert body["input"][-1] == {"role": "user", "content": "check snapmod"}
    check = _stdout(outputs(server.requests, "shell_call_output")[-1])
    assert "snapmod 42" in check
    lines = check.split("lines")[1].split()
    assert int(lines[0]) > 0 and lines[0] == lines[1], check  # written before; no writer runs now
    # one chain across both runs, verified from the command line against the first run's head
    log = Path(result["run_dir"]) / "audit.jsonl"
    verified = _sandloop("audit", "verify", str(log), "--head", manifest["audit_head"], env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    verified = _sandloop("audit", "verify", str(log), "--head", result["audit_head"], env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = _sandloop("snapshot", "ls", "--json", env=env)
    assert run.name in {snap["run_id"] for snap in json.loads(listed.stdout)}
    counted = _sandloop("gc", env=env)
    assert "snapshot(s) kept" in counted.stdout  # gc leaves them alone, and says so
    pruned = _sandloop("snapshot", "prune", "--all", "--json", env=env)
    assert run.name in {snap["run_id"] for snap in json.loads(pruned.stdout)}
    assert not (run / "snapshot").exists() and (run / "audit.jsonl").exists()
    assert json.loads(_sandloop("snapshot", "ls", "--json", env=env).stdout) == []


def test_snapshot_of_a_run_that_is_not_running_is_one_line(tmp_path: Path, user_workspace: Path) -> None:
    env = _env(tmp_path / "state")
    folder = tmp_path / "state" / "sandloop" / "runs" / "20260101T000000-abcdef"
    folder.mkdir(parents=True)
    (folder / "frontend.json").write_text(json.dumps({"pid": os.getpid(), "start": "0"}))
    done = _sandloop("snapshot", folder.name, env=env)
    assert done.returncode == 2 and "is not running any more" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
