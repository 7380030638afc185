"""The operator's terminal shows text, never control sequences, whatever the model or the
sandbox puts in it: the final answer, progress lines, command echoes, outputs, errors — on a TTY
and when piped. (The request log keeps the raw text, JSON-escaped.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.testing import FakeResponsesServer, ScriptedModel, function_call, message, shell_call
from sandloop.text import visible
from tests.pty_run import run_in_pty

pytestmark = pytest.mark.docker

# Each one does something to a terminal that prints it raw.
HOSTILE = {
    "osc52-clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "osc8-link": "\x1b]8;;https://evil.example/\x1b\\innocent\x1b]8;;\x1b\\",
    "osc0-title": "\x1b]0;sudo password needed\x07",
    "csi-clear": "\x1b[2J\x1b[H",
    "c1-csi": "\x9b2J",
    "bell": "\x07",
    "carriage-return": "rm -rf /\rls",
    "bidi-override": "\u202eexe.txt",
    "backspaces": "danger\x08\x08\x08\x08\x08\x08safe",
}
RAW_MARKERS = ("\x1b]", "\x1b[2J", "\x9b", "\x07", "\r", "\u202e", "\x08")


def _policy(tmp_path: Path) -> Path:
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nunattended = true\n[shell]\ndefault = "allow"\n')
    return policy


def _scenario(payload: str) -> ScriptedModel:
    return ScriptedModel([
        [shell_call([f"printf '%s' '{payload.replace(chr(39), '')}' ; echo"])],  # command + output
        [function_call(f"nope{payload}")],  # an unknown tool: the error names it
        [message(f"done {payload} end")],
    ])


def _run(args: list[str], *, tty: bool) -> str:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-terminal-0000"}
    cmd = [sys.executable, "-m", "executor.cli", *args]
    if not tty:
        done = subprocess.run(cmd, env=env, capture_output=True, timeout=180)
        return (done.stdout + done.stderr).decode("utf-8", "replace")
    return run_in_pty(cmd, {**env, "TERM": "xterm-256color"})


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "tty"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_nothing_from_the_model_or_sandbox_acts_on_the_terminal(
        name: str, tty: bool, tmp_path: Path, user_workspace: Path, docker_client: object) -> None:
    payload = HOSTILE[name]
    log = tmp_path / "requests.jsonl"
    with FakeResponsesServer(_scenario(payload)) as server:
        shown = _run(["run", "go", "--repo", str(user_workspace), "--base-url", server.base_url,
                      "--policy", str(_policy(tmp_path)), "--log", str(log)], tty=tty)
    assert "done" in shown and "end" in shown, shown
    for marker in RAW_MARKERS:
        assert marker not in shown, (name, marker, shown)
    # what was neutralised is still there for the person to read
    assert visible(payload, one_line=True).split("\\")[1][:3] in shown
    # the log keeps the raw text
    raw = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(_contains(record, payload) for record in raw)


def _contains(value: object, text: str) -> bool:
    if isinstance(value, str):
        return text in value
    if isinstance(value, dict):
        return any(_contains(v, text) for v in value.values())
    if isinstance(value, list):
        return any(_contains(v, text) for v in value)
    return False
