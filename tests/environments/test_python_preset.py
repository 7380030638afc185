"""End to end: ``preset = "python"`` on a small project built here, the way a first-time user
meets sandloop — a src layout whose tests need a package from the index (``pretend``), declared
in ``tests/requirements.txt`` or in a PEP 735 ``[dependency-groups]`` table, a bug planted, and
``sandloop run`` with a scripted model against the fake Responses server. Setup discovers what
the project declares inside the setup sandbox and installs it from the index (TLS intercepted
here: ``trust_host_ca``); the agent phase has no network. What the run prints is checked line by
line: the environment lines, and a shell_call of two commands shown as a list."""

from __future__ import annotations

import re
from pathlib import Path

import docker
import pytest

from executor.testing import ScriptedModel, apply_patch_call, message, shell_call, update_file

from .conftest import calls, chown_tree, env_show, run_cli, shell_text, write_policy

pytestmark = pytest.mark.docker

# Exactly the documented recipe (README, docs/environments.md).
ENVIRONMENT = """\
preset = "python"
trust_host_ca = true
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tinycalc"
version = "0.1.0"
requires-python = ">=3.8"

[project.optional-dependencies]
docs = ["sphinx"]

[tool.setuptools.packages.find]
where = ["src"]
"""
GROUPS = '\n[dependency-groups]\ntest = ["pretend"]\ndocs = ["sphinx"]\n'
CODE = "def add(a, b):\n    return a - b\n\n\ndef total(source):\n    return sum(source.values())\n"
TESTS = """\
import pretend

from tinycalc import add, total


def test_add():
    assert add(2, 3) == 5


def test_total():
    assert total(pretend.stub(values=lambda: [1, 2])) == 3
"""
FIX = """@@ def add(a, b):
-    return a - b
+    return a + b
"""
PYTEST = "python3 -m pytest -q -p no:cacheprovider tests"


def _project(root: Path, *, groups: bool) -> Path:
    files = {"pyproject.toml": PYPROJECT + (GROUPS if groups else ""), "src/tinycalc/__init__.py": CODE,
             "tests/test_calc.py": TESTS}
    if not groups:
        files["tests/requirements.txt"] = "pretend\n"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    chown_tree(root)
    return root


def _line(pattern: str, err: str) -> str:
    found = [line for line in err.splitlines() if re.fullmatch(pattern, line)]
    assert len(found) == 1, (pattern, err[-3000:])
    return found[0]


def test_tests_requirements_found_set_up_fixed_and_reused(
        tmp_path: Path, docker_client: docker.DockerClient, fresh_environment,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _project(tmp_path / "tinycalc", groups=False)
    policy = write_policy(tmp_path / "policy", ENVIRONMENT)
    shown = env_show(policy, repo, capsys)
    # The test requirements key the cache: tests/requirements.txt is not at the root.
    assert list(shown["files"]) == ["pyproject.toml", "tests/requirements.txt"]
    key = fresh_environment(policy, repo)

    model = ScriptedModel([
        [shell_call(["which python3", PYTEST])],
        [apply_patch_call(update_file("src/tinycalc/__init__.py", FIX))],
        [shell_call([PYTEST])],
        [message("add adds again; the tests pass.")],
    ])
    code, result, err = run_cli(repo, policy, tmp_path / "run1", model, capsys)
    assert code == 0, err
    which, tests = shell_text(calls(result, "shell_call")[0])
    assert which.strip() == "/opt/env/bin/python3"
    assert "1 failed, 1 passed" in tests and "test_add" in tests  # pretend is there: only the bug fails
    assert "2 passed" in shell_text(calls(result, "shell_call")[1])[0]

    # What setup found and installed, without a warning about extras the project does not have.
    assert "python preset: requirement files: tests/requirements.txt" in err
    assert "python preset: extras: none of test, tests, testing, dev" in err
    assert "does not provide the extra" not in err and "Successfully installed" in err
    # The environment lines say "environment" once; the two commands are a list, not `a && b`.
    _line(rf"environment sandloop-env:{key[:32]} built in \d+\.\d s \([0-9a-f]{{12}}\)", err)
    assert "environment environment" not in err
    start = err.splitlines().index("  → shell_call 2 commands")
    assert err.splitlines()[start + 1:start + 3] == ["      $ which python3", f"      $ {PYTEST}"]

    # The second run starts from the cached environment.
    model = ScriptedModel([[shell_call([PYTEST])], [message("still green")]])
    code, result, err = run_cli(repo, policy, tmp_path / "run2", model, capsys)
    assert code == 0, err
    assert "2 passed" in shell_text(calls(result, "shell_call")[0])[0]
    _line(rf"environment sandloop-env:{key[:32]} \(cached; setup not run\)", err)
    assert "python preset:" not in err

    # A changed test requirement is a new environment.
    (repo / "tests" / "requirements.txt").write_text("pretend\niniconfig\n")
    assert env_show(policy, repo, capsys)["key"] != key


def test_a_dependency_group_is_installed(tmp_path: Path, docker_client: docker.DockerClient,
                                         fresh_environment, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _project(tmp_path / "tinycalc", groups=True)
    policy = write_policy(tmp_path / "policy", ENVIRONMENT)
    fresh_environment(policy, repo)
    code, result, err = run_cli(repo, policy, tmp_path / "run", ScriptedModel([[shell_call([PYTEST])],
                                                                               [message("one fails")]]), capsys)
    assert code == 0, err
    assert "python preset: dependency groups: test (1 requirement)" in err
    assert "does not provide the extra" not in err
    # pretend came from the group (test_total passes); the docs group was left out.
    tests = shell_text(calls(result, "shell_call")[0])[0]
    assert "1 failed, 1 passed" in tests and "sphinx" not in err.lower()
