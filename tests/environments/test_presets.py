"""The ``python`` preset without an engine: what its setup step finds in a checkout (the real
program, run with ``--dry-run``), what the preset adds to a section, and that the cache key
covers every file the step reads."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from policies.model import EnvironmentSection
from sandbox import bundle
from sandbox.environment import presets, python_setup
from sandbox.environment.key import workspace_files
from sandbox.environment.spec import EnvironmentSpec

SETUPTOOLS = '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _said(root: Path) -> dict[str, str]:
    """The preset's setup step, as the setup container runs it (a zip application under
    ``python -I``), in ``--dry-run``: each ``python preset: WHAT: …`` line by WHAT."""
    app = root.parent / "python-setup.pyz"
    app.write_bytes(bundle.zipapp(("sandbox.environment.python_setup",)))
    done = subprocess.run([sys.executable, "-I", str(app), "--dry-run"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.removeprefix("python preset: ") for line in done.stdout.splitlines()]
    said = dict(line.split(": ", 1) for line in lines[:-1])
    said["pip"] = lines[-1].split(" -m pip ", 1)[1]
    return said


def test_a_src_layout_project_with_tests_requirements(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {
        "pyproject.toml": SETUPTOOLS + '[project]\nname = "calc"\nversion = "1"\n'
                                       '[project.optional-dependencies]\nTests = ["pretend"]\ndocs = ["sphinx"]\n',
        "src/calc/__init__.py": "", "tests/requirements.txt": "pretend\n", "docs/requirements.txt": "sphinx\n",
        "requirements-docs.txt": "sphinx\n", "dev-requirements.txt": "ruff\n"})
    said = _said(root)
    assert said["project"] == ". (pyproject.toml), installed editable"
    # Only the extras it declares (normalised: Tests is tests), so pip warns about none.
    assert said["extras"] == "tests of test, tests, testing, dev (from [project.optional-dependencies])"
    # Test requirements where projects keep them; the docs' are not for tests.
    assert said["requirement files"] == "dev-requirements.txt, tests/requirements.txt"
    assert said["pip"] == ("--disable-pip-version-check --no-input install --progress-bar off -e '.[tests]' "
                           "-r dev-requirements.txt -r tests/requirements.txt pytest")


def test_dependency_groups_with_includes(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {
        "pyproject.toml": SETUPTOOLS + '[project]\nname = "calc"\nversion = "1"\n[dependency-groups]\n'
                                       'Test = ["pretend", {include-group = "typing"}]\ntyping = ["mypy"]\n'
                                       'docs = ["sphinx"]\n'})
    said = _said(root)
    assert said["dependency groups"] == "test (2 requirements)" and said["extras"].startswith("none of")
    assert said["pip"].endswith("install --progress-bar off -e . pretend mypy pytest")


def test_a_group_that_includes_itself_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {"pyproject.toml": '[dependency-groups]\ntest = [{include-group = "dev"}]\n'
                                                       'dev = [{include-group = "test"}]\n'})
    with pytest.raises(ValueError, match="includes itself"):
        python_setup.plan(root, sys.executable)


def test_a_folder_that_is_no_project_gets_its_requirements_and_pytest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {"pyproject.toml": "[tool.black]\nline-length = 100\n",
                                     "requirements.txt": "requests\n", "requirements/test.txt": "-r base.txt\n",
                                     "requirements/base.txt": "six\n", "tests/test_x.py": ""})
    said = _said(root)
    assert said["project"].startswith("none")
    assert said["requirement files"] == "requirements.txt, requirements/test.txt"
    assert said["pip"].endswith("install --progress-bar off -r requirements.txt -r requirements/test.txt pytest")


def test_the_key_covers_every_file_the_step_may_read(tmp_path: Path) -> None:
    names = ["pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "requirements-dev.txt",
             "test_requirements.txt", "requirements/test.txt", "requirements/base.txt", "tests/requirements.txt",
             "test/requirements-extra.txt", "testing/requirements.txt"]
    root = _tree(tmp_path / "repo", {name: "x\n" for name in names})
    read = {*python_setup.requirement_files(root), *python_setup.PROJECT_FILES}
    keyed = set(workspace_files(root, python_setup.KEY_FILES))
    assert read <= keyed and keyed == set(names)


def test_the_preset_adds_to_the_section() -> None:
    spec = EnvironmentSpec(preset="python", setup=("make fixtures",), cache_key=("fixtures.json",),
                           setup_registries=("npm",))
    assert spec.has_setup and not spec.is_default and EnvironmentSpec(preset="python").has_setup
    done = presets.expand(spec)
    assert done.setup == ("python3 -m venv /opt/env", "/opt/env/bin/python -I /opt/sandloop/python-setup.pyz",
                          "make fixtures")
    assert done.cache_key[:3] == ("pyproject.toml", "setup.py", "setup.cfg") and done.cache_key[-1] == "fixtures.json"
    assert "tests/requirements*.txt" in done.cache_key and done.setup_registries == ("pip", "npm")
    assert presets.expand(EnvironmentSpec()) == EnvironmentSpec()
    # The program is keyed by its digest: a changed program sets the environment up again.
    part = presets.key_part(done)
    assert part["name"] == "python" and len(part["/opt/sandloop/python-setup.pyz"]) == 64


def test_the_policy_knows_every_preset() -> None:
    preset = EnvironmentSection.model_fields["preset"].annotation
    assert set(typing.get_args(typing.get_args(preset)[0])) == set(presets.PRESETS)
