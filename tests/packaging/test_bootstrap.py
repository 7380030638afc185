"""scripts/bootstrap brings up a Docker engine when none answers: CI runs on a fresh machine where
nothing else starts one, so a bootstrap that skips this step fails there at its first `docker`
call while passing on every machine that already had an engine.

The script runs from a copy in a temporary root (its venv, its .build) with stub `docker`,
`dockerd`, `debootstrap` and `id` first on PATH: nothing on the host is installed or started.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _root_copy(tmp_path: Path, uid: int) -> tuple[Path, dict[str, str]]:
    """A copy of the script in a root whose venv is current (a stub python that does nothing), and
    an environment whose PATH starts with the stubs. The stub engine answers once the stub daemon
    has been started (it leaves a marker), as a real one does."""
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "bootstrap", root / "scripts" / "bootstrap")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    _stub(venv_bin, "python", "exit 0")
    stamp = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (root / ".venv" / ".sandloop-stamp").write_text(stamp + "\n")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    marker = tmp_path / "engine-up"
    _stub(stubs, "id", f'[ "$1" = -u ] && echo {uid} || exec /usr/bin/id "$@"')
    _stub(stubs, "dockerd", f"touch {marker}")
    _stub(stubs, "debootstrap", "exit 1")
    _stub(stubs, "docker", f'[ "$1" = info ] && {{ [ -f {marker} ] || {{ echo no engine >&2; exit 1; }}; }}; exit 0')
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "SANDLOOP_SKIP_CHROMIUM": "1",
           "SANDLOOP_SKIP_GVISOR": "1"}
    return root, env


def _bootstrap(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "scripts" / "bootstrap"), "--demo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_as_root_bootstrap_starts_an_engine_when_none_answers_and_records_its_pid(tmp_path: Path) -> None:
    root, env = _root_copy(tmp_path, uid=0)
    done = _bootstrap(root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting dockerd" in done.stdout
    assert "dockerd ready" in done.stdout
    # .ci/run stops exactly the daemon bootstrap started, by this PID.
    assert (root / ".build" / "dockerd.pid").read_text().strip().isdigit()


def test_without_root_bootstrap_says_in_one_line_how_to_get_an_engine(tmp_path: Path) -> None:
    root, env = _root_copy(tmp_path, uid=1000)
    done = _bootstrap(root, env)
    assert done.returncode == 1
    assert "no Docker engine answers and we are not root" in done.stderr
    assert not (root / ".build" / "dockerd.pid").exists()
    assert "pulling" not in done.stdout  # stopped before the base image step, which needs the engine


def test_an_engine_that_answers_is_used_as_it_is(tmp_path: Path) -> None:
    root, env = _root_copy(tmp_path, uid=0)
    (tmp_path / "engine-up").touch()
    done = _bootstrap(root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Docker engine answers" in done.stdout
    assert not (root / ".build" / "dockerd.pid").exists()  # not ours: .ci/run must leave it running
