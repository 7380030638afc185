"""``sandloop report`` on the command line, and reports of runs made by ``sandloop run`` and
``sandloop replay`` (the same files as a run through the Python API)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from executor import cli
from executor.report import load_run
from executor.report.cli import register
from executor.report.model import ShellView
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from tests.report.test_logs import one_shell_run

POLICY = """\
version = 1
unattended = true
[shell]
default = "allow"
[[shell.rules]]
id = "no-rm"
pattern = ["rm"]
decision = "deny"
justification = "nothing is deleted here"
"""


def report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sandloop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *argv])
    code: int = args.func(args)
    return code


def test_report_writes_the_file_and_prints_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    one_shell_run(tmp_path)
    assert report([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    out = tmp_path / "elsewhere" / "r.html"
    assert report([str(tmp_path / "requests.jsonl"), "-o", str(out), "--open"]) == 0
    assert out.is_file() and opened == [out.resolve().as_uri()]


def test_report_of_the_latest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert report([]) == 2
    assert "no run found" in capsys.readouterr().err
    folder = tmp_path / "sandloop" / "runs" / "r1"
    folder.mkdir(parents=True)
    one_shell_run(folder)
    assert report([]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "report.html")


def test_report_of_nothing_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report([str(tmp_path / "missing")]) == 2
    assert "no such run folder or request log" in capsys.readouterr().err
    (tmp_path / "empty.jsonl").write_text("")
    assert report([str(tmp_path / "empty.jsonl")]) == 2
    assert "holds no run" in capsys.readouterr().err


@pytest.mark.docker
def test_reports_of_sandloop_run_and_of_its_replay(tmp_path: Path, docker_client: Any,
                                                    user_workspace: Path) -> None:
    (user_workspace / "a.txt").write_text("a\n")
    os.chown(user_workspace / "a.txt", 1000, 1000)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    live, replayed, cassette = tmp_path / "live", tmp_path / "replayed", tmp_path / "cassette.jsonl"
    model = ScriptedModel([[shell_call(["cat a.txt", "rm a.txt"])], [message("read it; not deleted")]])
    with FakeResponsesServer(model) as server:
        assert cli.main(["run", "read a.txt", "--repo", str(user_workspace), "--base-url", server.base_url,
                         "--policy", str(policy), "--log", str(live / "requests.jsonl"),
                         "--record", str(cassette)]) == 0
    assert cli.main(["replay", str(cassette), "--repo", str(user_workspace), "--policy", str(policy),
                     "--log", str(replayed / "requests.jsonl")]) == 0
    for folder in (live, replayed):
        run = load_run(folder)
        (call,) = run.calls
        assert isinstance(call.view, ShellView)
        cat, rm = call.view.commands
        assert (cat.stdout, cat.exit_code) == ("a\n", 0)
        assert rm.decision is not None and (rm.decision.decision, rm.decision.rule_id) == ("deny", "no-rm")
        assert rm.exit_code == 126 and call.status == "denied"
        assert run.audit.verified and run.result is not None and run.result["reason"] == "answered"
        assert run.audit.head_checked == bool(run.meta["audit_head"])  # where the run keeps one
        assert report([str(folder)]) == 0 and (folder / "report.html").is_file()
    assert (user_workspace / "a.txt").read_text() == "a\n"
