"""The sync twins from a plain script: no event loop anywhere, the same run underneath."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executor.testing import FakeResponsesServer
from policies.audit import check
from tests.api.scenario import exit_codes, fixing_model, outputs

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import executor

    repo, base_url = sys.argv[1], sys.argv[2]
    with executor.open_sandbox_sync(repo) as sandbox:
        sandbox.write_file("hello.txt", "hi\\n")
        echo = sandbox.run("cat hello.txt").stdout.text
        try:
            sandbox.run("rm victim")
            denied = ""
        except executor.PolicyDenied as exc:
            denied = str(exc)
    with executor.open_run_sync(repo, model="scripted", base_url=base_url, api_key="sk-test-sync") as run:
        outcome = run.task("make the tests pass")
        check = run.sandbox.run("python3 -m unittest -q")
    sandbox.close()  # again: nothing happens
    try:
        run.sandbox.run("true")
        after_close = "ran"
    except RuntimeError as exc:
        after_close = str(exc)
    print(json.dumps({"echo": echo, "denied": denied, "answer": outcome.result.final_text,
                      "after_close": after_close,
                      "exit": int(outcome.result.exit_code), "check": check.exit_code,
                      "folder": str(run.folder), "head": run.audit_head}))
""")


def test_a_plain_script_runs_a_task_and_the_sandbox(repo: Path, tmp_path: Path, state_dir: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_API_KEY", None)
    with FakeResponsesServer(fixing_model()) as server:
        proc = subprocess.run([sys.executable, str(script), str(repo), server.base_url], env=env,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert not server.rejections, server.rejections
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["echo"] == "hi\n" and "(rule rm)" in got["denied"]
    assert got["after_close"] == "this open_run_sync() object is closed"
    assert (repo / "victim").exists() and (repo / "hello.txt").read_text() == "hi\n"
    assert got["exit"] == 0 and got["check"] == 0 and got["answer"].startswith("calc.add")
    assert [exit_codes(o) == [0] for o in outputs(server.requests, "shell_call_output")] == [False, True]
    folder = Path(got["folder"])
    assert state_dir in folder.parents
    assert check(folder / "audit.jsonl", head=got["head"]).problems == []
