"""End to end on a real npm project: deep-equal 1.0.1's tarball from the registry (its tape
suite runs as ``npm test``), a bug planted, an environment whose setup installs the
devDependencies through the registry npm is configured with, and ``sandloop run`` with a
scripted model: ``npm test`` fails, a patch fixes it, ``npm test`` passes, with no network.

``npm install`` writes a lockfile the checkout did not have, so the environment answers to the
key with it too; and ``node_modules`` (a ``cache_paths`` entry) is put back from the cached
environment into a checkout that lost it — the second run sets nothing up and reaches nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from executor.testing import ScriptedModel, apply_patch_call, message, shell_call, update_file
from sandbox.environment.registries import npm_reach

from .conftest import calls, env_show, run_cli, shell_text, write_policy

pytestmark = pytest.mark.docker

# Exactly the documented recipe for a Node project (docs/environments.md).
ENVIRONMENT = """\
setup = ["npm install --no-audit --no-fund"]
setup_registries = ["npm"]
cache_key = ["package.json", "package-lock.json", "npm-shrinkwrap.json"]
cache_paths = ["node_modules"]
trust_host_ca = true
"""

FIX = """@@ var deepEqual = module.exports = function (actual, expected, opts) {
   } else if (!actual || !expected || typeof actual != 'object' && typeof expected != 'object') {
-    return actual == expected;
+    return opts.strict ? actual === expected : actual == expected;
"""


def test_deep_equal_fixed_in_an_environment_then_reused(
        tmp_path: Path, deep_equal_checkout: Path, fresh_environment, proxies: list[list[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = deep_equal_checkout
    policy = write_policy(tmp_path / "policy", ENVIRONMENT)
    fresh_environment(policy, repo)
    assert not (repo / "package-lock.json").exists()

    model = ScriptedModel([
        [shell_call(["ls /sys/class/net", "npm test"])],
        [apply_patch_call(update_file("index.js", FIX))],
        [shell_call(["npm test"])],
        [message("strict mode compares with === again; npm test passes.")],
    ])
    code, result, err = run_cli(repo, policy, tmp_path / "run1", model, capsys)
    assert code == 0, err
    first, patch, second = calls(result, "shell_call")[0], calls(result, "apply_patch_call")[0], \
        calls(result, "shell_call")[1]
    nets, failing = shell_text(first)
    assert nets.split() == ["lo"]
    assert "# fail  3" in failing or "# fail 3" in failing, failing
    assert first["output"]["output"][1]["outcome"] == {"type": "exit", "exit_code": 1}
    assert patch["output"]["status"] == "completed", patch
    assert "# ok" in shell_text(second)[0] and second["output"]["output"][0]["outcome"]["exit_code"] == 0
    assert proxies == [list(npm_reach().hosts)]
    assert "added" in (tmp_path / "run1" / "environment.log").read_text()
    assert (repo / "package-lock.json").stat().st_uid == 1000  # written by setup, as the owner
    # the lockfile setup wrote is keyed too: the same environment answers to it
    assert env_show(policy, repo, capsys)["cached"] is True

    shutil.rmtree(repo / "node_modules")  # a fresh checkout of the same lockfile
    model = ScriptedModel([[shell_call(["npm test"])], [message("green")]])
    code, result, err = run_cli(repo, policy, tmp_path / "run2", model, capsys)
    assert code == 0, err
    assert "# ok" in shell_text(calls(result, "shell_call")[0])[0]
    assert len(proxies) == 1 and "cached; setup not run" in err
    assert "put back from the environment: node_modules" in err
    assert (repo / "node_modules" / "tape").is_dir() and (repo / "node_modules").stat().st_uid == 1000
    assert not (tmp_path / "run2" / "environment.log").exists()
