"""``sandloop run --resume`` at its edges, through the command line on real containers with the
real openai client against the fake Responses server: a run that decided nothing (its audit log
never written) resumes, and its chain verifies as empty; a log removed after decisions is told;
an answered conversation resumed without a TASK is a one-line usage error that opens nothing;
the policy's difference is shown as it is written."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from executor.snapshot import ANSWERED
from executor.testing import FakeResponsesServer, ScriptedModel, Usage, message, shell_call
from tests.api.test_snapshot_api import _policy
from tests.api.test_snapshot_cli import SANDLOOP, _env, _sandloop

pytestmark = pytest.mark.docker


def _runs(state: Path) -> set[str]:
    runs = state / "sandloop" / "runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


def _wait_for_a_decision(state: Path, front: subprocess.Popen[str]) -> None:
    """Until the run has decided on its first command (which then runs)."""
    deadline = time.monotonic() + 120
    while not any('"kind":"decision"' in log.read_text() for log in state.glob("sandloop/runs/*/audit.jsonl")):
        assert time.monotonic() < deadline and front.poll() is None, front.stderr.read() if front.stderr else ""
        time.sleep(0.05)


@pytest.mark.parametrize("stateless", [False, True])
def test_a_run_that_decided_nothing_resumes(repo: Path, tmp_path: Path, stateless: bool) -> None:
    policy = _policy(tmp_path)
    state = tmp_path / "state"
    env = _env(state)
    model = ScriptedModel([[message("released")], [message("next done")]])
    with FakeResponsesServer(model) as server:
        common = ["--base-url", server.base_url, "--model", "scripted"]
        first = _sandloop("run", "rel", "--repo", str(repo), "--policy", str(policy), *common,
                          *(["--stateless"] if stateless else []), env=env)
        assert first.returncode == 0, first.stderr
        (run,) = _runs(state)
        folder = state / "sandloop" / "runs" / run
        assert not (folder / "audit.jsonl").exists()  # no decision: no record, no file
        # its chain is the empty one, and the run's head says so
        verified = _sandloop("audit", "verify", str(folder / "audit.jsonl"),
                             "--summary", str(folder / "summary.json"), env=env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "chain intact: 0 records" in verified.stdout

        # answered, and no TASK: one line, exit 2, and no run folder, no sandbox
        bare = _sandloop("run", "--resume", run, *common, env=env)
        assert bare.returncode == 2, bare.stderr
        assert bare.stderr.strip().splitlines() == [f"sandloop run: {ANSWERED}"]
        assert _runs(state) == {run}

        resumed = _sandloop("run", "--resume", run, "next", "--json", *common, env=env)
        assert resumed.returncode == 0, resumed.stderr
    assert not server.rejections, server.rejections
    result = json.loads(resumed.stdout)
    assert result["final_text"] == "next done"
    assert server.requests[1]["input"][-1] == {"role": "user", "content": "next"}
    if not stateless:
        assert server.requests[1]["previous_response_id"] == server.responses[0]["id"]
    # the resumed run's chain: its resume record only, verified against its own head
    verified = _sandloop("audit", "verify", str(Path(result["run_dir"]) / "audit.jsonl"),
                         "--head", result["audit_head"], env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_removed_audit_log_and_a_changed_policy_are_told(repo: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    state = tmp_path / "state"
    env = _env(state)
    model = ScriptedModel([[shell_call(["echo hi"])], [message("said hi")]])
    with FakeResponsesServer(model) as server:
        common = ["--base-url", server.base_url, "--model", "scripted"]
        first = _sandloop("run", "say hi", "--repo", str(repo), "--policy", str(policy), *common, env=env)
        assert first.returncode == 0, first.stderr
    (run,) = _runs(state)
    folder = state / "sandloop" / "runs" / run

    # the policy's difference as written: "[session]" is no markup to escape
    original = policy.read_text()
    policy.write_text(original + "\n[budget]\nmax_turns = 9\n")
    refused = _sandloop("run", "--resume", run, "go on", *common, env=env)
    assert refused.returncode == 2, refused.stderr
    shown = refused.stdout + refused.stderr
    assert " [session]\n" in shown and "+[budget]\n" in shown and "\\[" not in shown, shown
    policy.write_text(original)

    # the log of a run that made decisions, removed: told, for the resume and for verify
    (folder / "audit.jsonl").unlink()
    gone = _sandloop("run", "--resume", run, "go on", *common, env=env)
    assert gone.returncode == 2, gone.stderr
    assert "was removed" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1, gone.stderr
    assert _runs(state) == {run}
    verified = _sandloop("audit", "verify", str(folder / "audit.jsonl"),
                         "--summary", str(folder / "summary.json"), env=env)
    assert verified.returncode == 1 and "the log is missing" in verified.stdout, verified.stdout


def test_ctrl_c_in_a_turn_keeps_what_the_turn_used(repo: Path, tmp_path: Path) -> None:
    """SIGINT while the first turn's command runs: its response's tokens and the time so far
    are in the snapshot's budgets, though the resume asks the model again from before it."""
    state = tmp_path / "state"
    env = _env(state)
    model = ScriptedModel([[shell_call(["sleep 60"])], [message("done")]], usage=Usage(40, 16))
    with FakeResponsesServer(model) as server:
        common = ["--base-url", server.base_url, "--model", "scripted"]
        front = subprocess.Popen([SANDLOOP, "run", "wait", "--repo", str(repo), "--policy", str(_policy(tmp_path)),
                                  *common], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_a_decision(state, front)
            time.sleep(1.0)  # the command runs: the turn's time goes on
            front.send_signal(signal.SIGINT)
            front.wait(120)
        finally:
            if front.poll() is None:
                front.kill()
                front.wait()
        (run,) = _runs(state)
        snap = state / "sandloop" / "runs" / run / "snapshot"
        manifest = json.loads((snap / "manifest.json").read_text())
        assert manifest["reason"] == "interrupted"
        kept = json.loads((snap / manifest["state"]).read_text())
        assert kept["usage"]["total_tokens"] == 56, kept  # the interrupted turn's response
        assert kept["wall_s"] >= 1.0, kept
        assert kept["turns"] == 0 and kept["pending"][-1] == {"role": "user", "content": "wait"}
        resumed = _sandloop("run", "--resume", run, "--json", *common, env=env)
        assert resumed.returncode == 0, resumed.stderr
    assert not server.rejections, server.rejections
    result = json.loads(resumed.stdout)
    assert result["final_text"] == "done"
    assert result["usage"]["total_tokens"] == 56 + 56, result["usage"]  # both turns' tokens count


def test_a_snapshot_request_that_timed_out_is_withdrawn(repo: Path, tmp_path: Path) -> None:
    """`sandloop snapshot RUN --timeout 1` while a command runs (the safe point is after it):
    it gives up, says the request is withdrawn, and the run takes no snapshot later."""
    policy = _policy(tmp_path)
    policy.write_text(policy.read_text().replace('snapshot = "on_stop"\n', ""))  # only what is asked
    state = tmp_path / "state"
    env = _env(state)
    model = ScriptedModel([[shell_call(["sleep 4"])], [message("slept")]])
    with FakeResponsesServer(model) as server:
        front = subprocess.Popen([SANDLOOP, "run", "sleep", "--repo", str(repo), "--policy", str(policy),
                                  "--base-url", server.base_url, "--model", "scripted"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_a_decision(state, front)
            (run,) = _runs(state)
            asked = _sandloop("snapshot", run, "--timeout", "1", env=env)
            assert front.poll() is None  # the command still ran when the request was given up
            front.wait(120)
        finally:
            if front.poll() is None:
                front.kill()
                front.wait()
    assert asked.returncode == 1, asked.stderr
    assert "the request is withdrawn, none will be taken" in asked.stderr, asked.stderr
    assert front.returncode == 0, front.stderr.read() if front.stderr else ""
    folder = state / "sandloop" / "runs" / run
    assert not (folder / "snapshot").exists(), sorted(p.name for p in (folder / "snapshot").iterdir())
    assert not [p.name for p in folder.iterdir() if p.name.startswith("snapshot-request-")]


def test_a_snapshot_while_the_model_thinks_counts_the_time_so_far(repo: Path, tmp_path: Path) -> None:
    """Asked for while the request is in flight, the snapshot's wall time runs until it is
    taken, not until the turn began (a run killed after it resumes with that time spent)."""
    arrived, release = threading.Event(), threading.Event()

    def thinking(body: dict[str, Any], history: list[Any]) -> Any:
        arrived.set()
        release.wait(120)
        return [message("thought")]

    state = tmp_path / "state"
    env = _env(state)
    with FakeResponsesServer(ScriptedModel([thinking])) as server:
        front = subprocess.Popen([SANDLOOP, "run", "think", "--repo", str(repo), "--policy", str(_policy(tmp_path)),
                                  "--base-url", server.base_url, "--model", "scripted"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert arrived.wait(120)
            time.sleep(1.0)  # the model thinks
            (run,) = _runs(state)
            asked = _sandloop("snapshot", run, env=env)
            assert asked.returncode == 0, asked.stderr
            snap = state / "sandloop" / "runs" / run / "snapshot"
            manifest = json.loads((snap / "manifest.json").read_text())
            kept = json.loads((snap / manifest["state"]).read_text())
        finally:
            release.set()
            if front.poll() is None:
                front.wait(120)
    assert manifest["reason"] == "signal"
    assert kept["wall_s"] >= 1.0 and kept["turns"] == 0, kept
