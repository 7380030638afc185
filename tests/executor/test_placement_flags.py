"""Where computer calls go is the policy's [computer] environment unless a flag says otherwise;
a flag that contradicts the policy, or one that --demo would drop, is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SANDLOOP = [sys.executable, "-m", "executor.cli"]
DESKTOP_POLICY = 'version = 1\nextends = ["ci"]\n[computer]\nenvironment = "desktop"\n'


def _run(*args: str, key: bool = True, tmp: Path) -> subprocess.CompletedProcess[str]:
    # An engine that is not there: a refusal must come before anything is started, and a run
    # that got past the checks stops at "sandbox unavailable" (exit 1) without starting one.
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp}/no-such.sock", "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("SANDLOOP_DEBUG", None)
    env.pop("SANDLOOP_MODEL", None)
    if key:
        env["OPENAI_API_KEY"] = "sk-test-placement-000"
    else:
        env.pop("OPENAI_API_KEY", None)
    return subprocess.run([*SANDLOOP, *args], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    path = tmp_path / "desk.toml"
    path.write_text(DESKTOP_POLICY)
    return path


@pytest.mark.parametrize("given, named", [
    (["do it"], "TASK"),
    (["--repo", "."], "--repo"),
    (["--desktop"], "--desktop"),
    (["--live-view"], "--live-view"),
    (["--resume", "some-run"], "--resume"),
    (["--policy-changed-ok"], "--policy-changed-ok"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url"),
    (["--model", "gpt-test"], "--model"),
])
def test_demo_refuses_what_it_would_ignore(tmp_path: Path, given: list[str], named: str) -> None:
    _refused(_run("run", "--demo", *given, key=False, tmp=tmp_path), "--demo", named)


def test_demo_refuses_a_desktop_policy(tmp_path: Path, desk: Path) -> None:
    _refused(_run("run", "--demo", "--policy", str(desk), key=False, tmp=tmp_path), "--demo", '"desktop"')


def test_desktop_and_browser_flags_contradict(tmp_path: Path, repo: Path) -> None:
    _refused(_run("run", "do it", "--repo", str(repo), "--desktop", "--browser", "local", tmp=tmp_path),
             "--desktop", "--browser")


@pytest.mark.parametrize("command", [["run", "do it", "--base-url", "http://127.0.0.1:9/v1"], ["mcp"]])
@pytest.mark.parametrize("browser", ["local", "container"])
def test_a_browser_under_a_desktop_policy_is_refused(tmp_path: Path, repo: Path, desk: Path,
                                                    command: list[str], browser: str) -> None:
    _refused(_run(*command, "--repo", str(repo), "--policy", str(desk), "--browser", browser, tmp=tmp_path),
             '"desktop"', f"--browser {browser}")


def test_live_view_follows_the_policy(tmp_path: Path, repo: Path, desk: Path) -> None:
    base = ["run", "do it", "--repo", str(repo), "--base-url", "http://127.0.0.1:9/v1", "--live-view"]
    _refused(_run(*base, tmp=tmp_path), "--live-view", "desktop")
    # under a desktop policy the live view needs no --desktop: the run gets as far as the engine
    done = _run(*base, "--policy", str(desk), tmp=tmp_path)
    assert done.returncode == 1 and "sandbox unavailable" in done.stderr, (done.returncode, done.stderr)
