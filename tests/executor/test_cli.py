"""``sandloop run``: exit codes, usage errors, and the bundled demo end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.cli import main
from executor.demo import DEMO_DIR


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for code in ("0  answered", "2  usage", "3  budget exhausted", "4  stopped by a refusal",
                 "5  incomplete"):
        assert code in text
    assert "--stateless" in text and "--record" in text


def test_run_without_a_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["run", "fix the tests"]) == 2
    assert main(["run"]) == 2


@pytest.mark.docker
@pytest.mark.browser
def test_demo_offline_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], docker_client: object) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = (DEMO_DIR / "repo" / "calc.py").read_text()
    log = tmp_path / "reports" / "live-requests.jsonl"
    record = tmp_path / "demo.cassette.jsonl"
    code = main(["run", "--demo", "--browser", "local", "--log", str(log), "--record",
                 str(record), "--json", "--report"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert "The tests pass now." in result["final_text"] and result["run_dir"] == str(log.parent)
    outputs = {call["type"]: call["output"] for turn in result["turns"] for call in turn["calls"]}
    # --json carries what each call answered; screenshots as references to the run's files
    assert "Ran 2 tests" in json.dumps(outputs["shell_call"])
    assert outputs["computer_call"]["output"]["image_url"].startswith("screenshot:sha256:")
    report = Path(result["report"])  # --report: the run's HTML report, beside its logs
    assert report.parent == log.parent and "The tests pass now." in report.read_text()
    assert "apply_patch_call" in out.err and "computer_call" in out.err
    assert (DEMO_DIR / "repo" / "calc.py").read_text() == before  # the demo works on a copy
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds.count("request") == 7 and kinds[-1] == "summary"
    assert list((log.parent / "screenshots").glob("*.png"))
    assert len(record.read_text().splitlines()) == 7


@pytest.mark.docker
def test_record_then_replay_reports_changed_outputs(
        tmp_path: Path, docker_client: object, user_workspace: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call

    (user_workspace / "a.txt").write_text("first\n")
    policy = DEMO_DIR / "policy.toml"
    record = tmp_path / "run.cassette.jsonl"
    model = ScriptedModel([[shell_call(["cat a.txt"])], [message("read it")]])
    with FakeResponsesServer(model) as server:
        code = main(["run", "read a.txt", "--repo", str(user_workspace), "--base-url",
                     server.base_url, "--policy", str(policy), "--record", str(record),
                     "--log", str(tmp_path / "run.jsonl")])
    assert code == 0 and "read it" in capsys.readouterr().out
    replay = ["replay", str(record), "--repo", str(user_workspace), "--policy", str(policy),
              "--log", str(tmp_path / "replay.jsonl")]
    assert main(replay) == 0, capsys.readouterr().err  # same workspace, same outputs
    (user_workspace / "a.txt").write_text("second\n")
    assert main(replay) == 1
    err = capsys.readouterr().err
    assert "shell_call_output" in err and "changed" in err and "second" in err
