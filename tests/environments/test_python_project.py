"""End to end on a real Python project: inflection 0.5.1's sdist from the package index, a bug
planted, an environment that installs its test dependencies through the setup network only
(the index hosts from pip's own configuration), and ``sandloop run`` with a scripted model:
the tests fail, a patch fixes the bug, the tests pass — in the sandbox, whose agent phase has
no network. A second run reuses the cached environment: no setup, no proxy, no setup log."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from executor.testing import ScriptedModel, apply_patch_call, message, shell_call, update_file
from sandbox.environment.registries import pip_reach

from .conftest import REPOSITORY, calls, run_cli, shell_text, write_policy

pytestmark = pytest.mark.docker

# Exactly the documented recipe for a Python project (README, docs/environments.md).
ENVIRONMENT = """\
preset = "python"
trust_host_ca = true
"""

PYTEST = "python3 -m pytest -q -p no:cacheprovider test_inflection.py"
FIX = """@@ def ordinal(number: int) -> str:
     number = abs(int(number))
-    if number % 100 in (11, 12):
+    if number % 100 in (11, 12, 13):
         return "th"
"""


def test_inflection_fixed_in_an_environment_then_reused(
        tmp_path: Path, inflection_checkout: Path, docker_client: docker.DockerClient,
        fresh_environment, proxies: list[list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    repo = inflection_checkout
    policy = write_policy(tmp_path / "policy", ENVIRONMENT)
    key = fresh_environment(policy, repo)

    model = ScriptedModel([
        [shell_call(["ls /sys/class/net", "which python3", PYTEST])],
        [apply_patch_call(update_file("inflection/__init__.py", FIX))],
        [shell_call([PYTEST])],
        [message("ordinal(13) says th again; the tests pass.")],
    ])
    code, result, err = run_cli(repo, policy, tmp_path / "run1", model, capsys)
    assert code == 0, err
    first, patch, second = calls(result, "shell_call")[0], calls(result, "apply_patch_call")[0], \
        calls(result, "shell_call")[1]
    nets, which, tests = shell_text(first)
    assert nets.split() == ["lo"]  # the agent phase: no network at all
    assert which.strip() == "/opt/env/bin/python3"  # the environment's venv, first on PATH
    assert "8 failed, 447 passed" in tests
    assert patch["output"]["status"] == "completed", patch
    assert "455 passed" in shell_text(second)[0]
    assert "return \"th\"" in (repo / "inflection" / "__init__.py").read_text()

    # Setup ran once, through one proxy allowing exactly pip's hosts, shown live and logged.
    assert proxies == [list(pip_reach(probe_files=False).hosts)]
    assert "setup 2/2" in err and "Successfully installed" in err
    assert "does not provide the extra" not in err  # only extras inflection declares are asked for
    log = (tmp_path / "run1" / "environment.log").read_text()
    assert "Successfully installed" in log and "[egress] allowed CONNECT" in log
    # What setup wrote into the checkout is the owner's (pip install -e writes egg-info).
    assert {p.stat().st_uid for p in repo.glob("*.egg-info")} == {1000}
    image = docker_client.images.get(f"{REPOSITORY}:{key[:32]}")
    env = image.attrs["Config"]["Env"]
    assert not [e for e in env if "PROXY" in e.upper() or "CERT" in e.upper() or "PIP_" in e]
    assert not [label for label in image.labels if label.startswith("sandloop.owner")]

    # The second run: the cached environment, no setup, no proxy, no network.
    model = ScriptedModel([[shell_call([PYTEST])], [message("still green")]])
    code, result, err = run_cli(repo, policy, tmp_path / "run2", model, capsys)
    assert code == 0, err
    assert "455 passed" in shell_text(calls(result, "shell_call")[0])[0]
    assert len(proxies) == 1
    assert "cached; setup not run" in err and "setup 1/2" not in err and "│" not in err
    assert not (tmp_path / "run2" / "environment.log").exists()
