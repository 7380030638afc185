"""Nothing the host writes lands where the sandbox can write: logs, the audit chain, screenshots,
summaries and cassettes go to a run folder under the user's state directory; a path named inside
the checkout is refused before anything is written; and a file turned into a symlink is refused,
never written through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.audit import RequestLog
from executor.testing import FakeResponsesServer, ScriptedModel, computer_call, message, shell_call
from executor.testing.cassette import CassetteRecorder
from policies.audit import AuditLog
from sandloop.errors import HostPathRefused

SANDLOOP = [sys.executable, "-m", "executor.cli"]


def _run(*args: str, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "OPENAI_API_KEY": "sk-test-host-000000", "XDG_STATE_HOME": str(state), **env}
    return subprocess.run([*SANDLOOP, *args], capture_output=True, text=True, timeout=180, env=full_env)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.docker
def test_a_run_writes_its_files_outside_the_checkout(user_workspace: Path, tmp_path: Path,
                                                     docker_client: object) -> None:
    (user_workspace / "a.txt").write_text("x\n")
    before = _tree(user_workspace)
    state = tmp_path / "state"
    with FakeResponsesServer(ScriptedModel([[shell_call(["cat a.txt"])], [message("done $(touch pwned)")]])) as srv:
        done = _run("run", "go", "--repo", str(user_workspace), "--base-url", srv.base_url, "--json", state=state)
    assert done.returncode == 0, done.stderr
    assert _tree(user_workspace) == before  # not one file appeared in the checkout
    out = json.loads(done.stdout)
    folder = Path(out["run_dir"])
    assert folder.parent == state / "sandloop" / "runs"
    assert {"requests.jsonl", "audit.jsonl", "summary.json"} <= {p.name for p in folder.iterdir()}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["audit_head"]["records"] >= 1 and out["audit_head"].endswith(f":{summary['audit_head']['records']}")
    assert f"run: {folder}" in done.stderr
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("option", ["--log", "--record"])
@pytest.mark.parametrize("place", ["reports/requests.jsonl", "requests.jsonl", "deep/er/x.jsonl",
                                   "link-to-outside/x.jsonl"])
def test_a_file_named_inside_the_checkout_is_refused(option: str, place: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link-to-outside").symlink_to(tmp_path)  # a link the sandbox could have planted
    target = repo / place
    done = _run("run", "go", "--repo", str(repo), "--base-url", "http://127.0.0.1:9/v1", option, str(target),
                state=tmp_path / "state")
    assert done.returncode == 2, done.stderr
    assert "host path refused" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.jsonl").exists()  # nothing went through the planted link either
    if not place.startswith("link"):
        assert not target.exists() and not (repo / "reports").exists()


def test_a_state_directory_inside_the_checkout_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    done = _run("run", "go", "--repo", str(repo), "--base-url", "http://127.0.0.1:9/v1",
                state=repo / ".state")  # e.g. the checkout is the user's home directory
    assert done.returncode == 2 and "inside" in done.stderr
    assert not (repo / ".state").exists()


@pytest.mark.parametrize("name", ["requests.jsonl", "audit.jsonl", "screenshots"])
def test_a_file_turned_into_a_symlink_is_refused_never_followed(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious\n")
    (folder / name).symlink_to(victim if name != "screenshots" else outside)
    png = "data:image/png;base64,iVBORw0KGgo="
    with pytest.raises(HostPathRefused):
        if name in ("requests.jsonl", "screenshots"):
            RequestLog(folder / "requests.jsonl").request(1, {"input": [{"image_url": png}]})
        else:
            AuditLog(folder / "audit.jsonl").record("decision", subject="$(touch x)")
    assert victim.read_text() == "precious\n" and sorted(p.name for p in outside.iterdir()) == ["victim"]


@pytest.mark.parametrize("name", ["summary.json", "cassette.jsonl"])
def test_a_file_written_whole_replaces_a_planted_link(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (folder / name).symlink_to(victim)
    if name == "summary.json":
        RequestLog(folder / "requests.jsonl").summary({"turns": []})
    else:
        CassetteRecorder(folder / name).record({"input": "$(touch x)"}, {})
    assert (folder / name).is_file() and not (folder / name).is_symlink()
    assert victim.read_text() == "precious\n"


def test_a_folder_moved_and_replaced_by_a_link_after_opening_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    log = RequestLog(folder / "requests.jsonl")
    log.request(1, {"input": "first"})
    outside = tmp_path / "outside"
    outside.mkdir()
    folder.rename(tmp_path / "moved")
    folder.symlink_to(outside)
    log.request(2, {"input": "second"})
    assert list(outside.iterdir()) == []
    assert len((tmp_path / "moved" / "requests.jsonl").read_text().splitlines()) == 2


@pytest.mark.browser
@pytest.mark.docker
def test_screenshots_land_in_the_run_folder(user_workspace: Path, tmp_path: Path, docker_client: object) -> None:
    state = tmp_path / "state"
    with FakeResponsesServer(ScriptedModel([[computer_call([{"type": "screenshot"}])], [message("seen")]])) as srv:
        done = _run("run", "look", "--repo", str(user_workspace), "--base-url", srv.base_url, "--browser", "local",
                    "--json", state=state)
    assert done.returncode == 0, done.stderr
    folder = Path(json.loads(done.stdout)["run_dir"])
    assert list((folder / "screenshots").glob("*.png")) and not list(user_workspace.rglob("*.png"))
