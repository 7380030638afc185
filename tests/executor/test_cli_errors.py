"""The command line a person expects: no traceback for anything a user can cause, one line and a
documented exit code instead, JSON on every exit path with --json, Ctrl-C that cleans up, plain
text under NO_COLOR."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from executor.cli import build_parser
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from tests.pty_run import run_in_pty

SANDLOOP = [sys.executable, "-m", "executor.cli"]


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "OPENAI_API_KEY": "sk-test-cli-000000", **(env or {})}
    full_env.pop("SANDLOOP_DEBUG", None)
    return subprocess.run([*SANDLOOP, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    for word in words:
        assert word in done.stderr, done.stderr


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0 and done.stdout.startswith("sandloop ")


def _parsers(parser: argparse.ArgumentParser, path: str = "sandloop") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{path} {name}")
    return found


def test_every_option_and_argument_has_help() -> None:
    missing = [f"{path}: {action.dest}" for path, parser in _parsers(build_parser())
               for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
               and not action.help]
    assert missing == []


@pytest.mark.parametrize("args", [["run", "--help"], ["replay", "--help"], ["apply-patch", "--help"],
                                  ["policy", "explain", "--help"], ["doctor", "--help"]])
def test_help_shows_no_raw_markup(args: list[str]) -> None:
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert "[/" not in done.stdout and "[bold" not in done.stdout and "[dim" not in done.stdout


def test_a_missing_cassette_is_a_usage_error() -> None:
    _one_line_error(_run("replay", "/nonexistent/missing.jsonl"), 2, "no cassette")


def test_a_missing_repo_is_a_usage_error() -> None:
    done = _run("run", "do it", "--repo", "/nonexistent/repo", "--base-url", "http://127.0.0.1:9/v1", "--json")
    _one_line_error(done, 2, "/nonexistent/repo")
    assert json.loads(done.stdout)["exit_code"] == 2  # --json: a JSON object on every exit path


def test_an_invalid_policy_is_a_usage_error(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("version = 1\n[shell]\ndefault = 'maybe'\n")
    done = _run("run", "do it", "--repo", str(tmp_path), "--policy", str(policy), "--base-url",
                "http://127.0.0.1:9/v1", "--json")
    _one_line_error(done, 2, "p.toml:3")
    assert json.loads(done.stdout)["reason"] == "usage"


def test_no_docker_engine_is_one_line(tmp_path: Path) -> None:
    done = _run("run", "do it", "--repo", str(tmp_path), "--base-url", "http://127.0.0.1:9/v1",
                env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    _one_line_error(done, 1, "sandbox unavailable")


@pytest.mark.parametrize("args", [["doctor", "--repo", "/nonexistent/repo"],
                                  ["doctor", "--json", "--repo", "/nonexistent/repo"]])
def test_doctor_on_a_missing_repo_is_a_usage_error(args: list[str]) -> None:
    done = _run(*args)
    _one_line_error(done, 2, "/nonexistent/repo")
    if "--json" in args:
        assert json.loads(done.stdout)["exit_code"] == 2


@pytest.mark.parametrize("command", ["gc", "doctor"])
def test_sandbox_commands_without_an_engine_are_one_line(tmp_path: Path, command: str) -> None:
    done = _run(command, "--json", env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert json.loads(done.stdout)  # --json: a JSON object on the failure path too


@pytest.mark.docker
def test_an_unreachable_api_names_its_url(user_workspace: Path, docker_client: object) -> None:
    done = _run("run", "do it", "--repo", str(user_workspace), "--base-url", "http://127.0.0.1:9/v1")
    _one_line_error(done, 1, "http://127.0.0.1:9/v1")


@pytest.mark.docker
def test_no_color_means_no_escape_codes(user_workspace: Path, docker_client: object) -> None:
    with FakeResponsesServer(ScriptedModel([[shell_call(["echo hi"])], [message("done")]])) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-cli-000000", "NO_COLOR": "1", "TERM": "xterm-256color"}
        shown = run_in_pty([*SANDLOOP, "run", "go", "--repo", str(user_workspace), "--base-url",
                            server.base_url, "--policy", "default"], env, timeout=120)
    assert "done" in shown and "\x1b" not in shown


@pytest.mark.docker
def test_ctrl_c_prints_the_summary_cleans_up_and_exits_130(user_workspace: Path, tmp_path: Path,
                                                           docker_client: docker.DockerClient) -> None:
    with FakeResponsesServer(ScriptedModel([[shell_call(["touch started; sleep 60"])], [message("never")]])) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-cli-000000"}
        log = tmp_path / "requests.jsonl"
        proc = subprocess.Popen([*SANDLOOP, "run", "go", "--repo", str(user_workspace), "--base-url",
                                 server.base_url, "--policy", "default", "--log", str(log)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        # wait until the shell call is running in its container: its first command has run
        while not (user_workspace / "started").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert "turns:" in err  # the run summary line
    left = docker_client.api.containers(all=True, filters={"label": f"sandloop.owner_pid={proc.pid}"})
    assert left == []
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds[-1] == "summary"


@pytest.mark.parametrize("args", [["policy", "schema"], ["--version"],
                                  ["policy", "explain", "default", "--json", "--", "ls"]])
def test_a_reader_that_went_away_is_no_traceback(args: list[str]) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # like `| head` that has already stopped reading
    try:
        done = subprocess.run([*SANDLOOP, *args], stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(writer)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
    assert done.returncode in (0, 128 + signal.SIGPIPE)
