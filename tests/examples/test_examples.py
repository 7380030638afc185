"""Every example in examples/ runs as a user would run it — a subprocess, ``--base-url`` at the
strict fake server — and does what it says: the demo's failing test is fixed in a real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executor.demo import DEMO_DIR, FIX
from executor.testing import FakeResponsesServer, ScriptedModel, apply_patch_call, message, shell_call, update_file
from tests.api.scenario import exit_codes, outputs
from tests.conftest import copy_tree

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TEST = "python3 -m unittest -v"


def _turns(example: str) -> list[Any]:
    fix = [[shell_call([TEST])], [apply_patch_call(update_file("calc.py", FIX))], [shell_call([TEST])]]
    if example == "agents_sdk.py":  # and a command the policy asks about: nobody is there to say yes
        fix.append([shell_call(["rm -rf build"])])
    return [*fix, [message("add() subtracted; it adds now.")]]


@pytest.mark.parametrize("example", ["python_async.py", "python_sync.py", "agents_sdk.py"])
def test_the_example_runs_against_a_responses_endpoint(example: str, docker_client: Any, tmp_path: Path) -> None:
    repo = copy_tree(DEMO_DIR / "repo", tmp_path / "repo")
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-examples-0000", "XDG_STATE_HOME": str(tmp_path / "state"),
           "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    env.pop("OPENAI_BASE_URL", None)
    with FakeResponsesServer(ScriptedModel(_turns(example))) as server:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / example), "--base-url", server.base_url, "--model", "scripted",
             "--repo", str(repo)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not server.rejections, server.rejections
    assert "model: add() subtracted; it adds now." in proc.stdout
    assert "return a + b" in (repo / "calc.py").read_text()
    shells = outputs(server.requests, "shell_call_output")
    assert [exit_codes(o) for o in shells[:2]] == [[1], [0]]
    assert "audit head: " in proc.stdout and str(tmp_path / "state") in proc.stdout
    if example == "python_async.py":
        assert "tests now: pass" in proc.stdout and "refused: command 'git push origin main'" in proc.stdout
        assert "(rule git-push)" in proc.stdout
    if example == "python_sync.py":
        assert "notes: Fix add() before the release." in proc.stdout and "tests before: fail" in proc.stdout
        assert (repo / "NOTES.md").exists() and "tests now: pass" in proc.stdout
    if example == "agents_sdk.py":
        assert "needs approval, nobody to ask: rejected\n  shell: rm -rf build" in proc.stdout
        (rejected,) = shells[2:]
        assert "sandloop: denied by policy (rule rm)" in rejected["output"][0]["stderr"]


def test_the_mcp_client_example_drives_sandloop_mcp(docker_client: Any, tmp_path: Path) -> None:
    """examples/mcp_client.py: the MCP SDK's client launches `sandloop mcp` over stdio; no model."""
    repo = copy_tree(DEMO_DIR / "repo", tmp_path / "repo")
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "mcp_client.py"), "--repo", str(repo)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "tools: shell, apply_patch\n" in out
    assert "tests before: fail" in out and "tests now: pass" in out
    assert "apply_patch: applied: updated calc.py: 1 hunk, +1 −1" in out
    assert "apply_patch: refused: path refused: create_file .git/hooks/pre-commit" in out
    assert "nobody at a terminal to answer: declined\n$ rm -f calc.py\n  refused by rule rm" in out
    assert "return a + b" in (repo / "calc.py").read_text() and not (repo / ".git" / "hooks" / "pre-commit").exists()
    (run,) = (state / "sandloop" / "runs").iterdir()  # the server's run, where the example said
    assert json.loads((run / "summary.json").read_text())["result"]["tool_calls"] == 5
    assert f"run folder {run}" in proc.stderr


def test_the_desktop_example_types_into_a_real_terminal(docker_client: Any, tmp_path: Path) -> None:
    """examples/desktop.py: a scripted model clicks into xterm on the desktop and types a command;
    the file it writes is read back through the shell tool."""
    from executor.testing import computer_call, shell_call

    repo = copy_tree(DEMO_DIR / "repo", tmp_path / "repo")
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-examples-0000", "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("OPENAI_BASE_URL", None)
    turns = [
        [computer_call([{"type": "screenshot"}])],
        [computer_call([{"type": "click", "x": 300, "y": 200, "button": "left"},
                        {"type": "type", "text": "echo hello from the desktop > hello.txt"},
                        {"type": "keypress", "keys": ["ENTER"]}, {"type": "wait"}])],
        [shell_call(["cat hello.txt"])],
        [message("hello from the desktop")],
    ]
    with FakeResponsesServer(ScriptedModel(turns)) as server:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / "desktop.py"), "--base-url", server.base_url, "--model", "scripted",
             "--repo", str(repo)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900,
            stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not server.rejections, server.rejections
    assert "hello.txt: hello from the desktop" in proc.stdout
    assert "screenshots: 2 in" in proc.stdout
    assert (repo / "hello.txt").read_text() == "hello from the desktop\n"
