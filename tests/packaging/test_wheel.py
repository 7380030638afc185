"""The wheel a user installs works on its own: no checkout, no editable install.

It is built from this checkout, installed into a fresh virtual environment, and run from a
directory outside the checkout: ``doctor`` must start a real session (it needs the packaged
Dockerfile to know the images are current) and the offline demo must finish (it needs the
packaged demo repository, page and policy, and the presets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``sandloop`` script of a fresh venv that has the wheel installed."""
    where = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ and *.egg-info behind in the tree it builds.
    source = shutil.copytree(ROOT, where / "source", symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".build", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(where)],
                   check=True, timeout=600)
    wheel = next(where.glob("sandloop-*.whl"))
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)], check=True, timeout=900)
    return env_dir / "bin" / "sandloop"


def _run(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTHONPATH")}
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_carries_its_own_files(installed: Path, tmp_path: Path) -> None:
    names = zipfile.ZipFile(next(installed.parents[2].glob("sandloop-*.whl"))).namelist()
    assert "sandbox/kubernetes/session.py" in names and "executor/testing/__init__.py" in names
    # Test infrastructure stays in the checkout: the fake Kubernetes API server among it.
    assert not [n for n in names if n.startswith("tests/") or n.startswith("sandbox/kubernetes/fake/")]
    python = installed.parent / "python"
    done = subprocess.run([str(python), "-c", "import executor, sandbox; print(executor.__file__, sandbox.__file__)"],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    assert str(ROOT) not in done.stdout and "site-packages" in done.stdout
    assert _run(installed, "--version", cwd=tmp_path).stdout.startswith("sandloop ")
    checked = _run(installed, "policy", "check", "default", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.docker
def test_doctor_and_the_demo_run_from_the_installed_wheel(installed: Path, tmp_path: Path,
                                                          docker_client: object) -> None:
    doctor = _run(installed, "doctor", "--json", "--repo", str(tmp_path), cwd=tmp_path)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["ok"], doctor.stdout + doctor.stderr
    assert all(state.startswith("current, ") for state in report["images"].values()), report["images"]
    demo = _run(installed, "run", "--demo", "--json", "--browser", "local", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    result = json.loads(demo.stdout)
    assert "The tests pass now." in result["final_text"]
