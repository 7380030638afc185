"""Real projects from the package indexes, downloaded at test time, and the plumbing to run
``sandloop run`` on them with a scripted model.

The sdist / tarball is fetched by the host's own client (``pip download`` / ``npm pack``), so the
host's configuration (index, proxy, CA) applies; nothing is vendored. Environments a test builds
are removed when it ends, and any cached one for the same key is removed before it starts, so the
first run really sets up.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from executor.cli import main
from executor.testing import FakeResponsesServer, ScriptedModel
from sandbox import egress
from sandbox.environment.spec import KEY_LABEL, REPOSITORY
from tests.conftest import missing

INFLECTION = "inflection==0.5.1"
DEEP_EQUAL = "deep-equal@1.0.1"


def chown_tree(root: Path, uid: int = 1000) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)
    os.chown(root, uid, uid)


def _unpack(archive: Path, into: Path) -> None:
    with tarfile.open(archive) as tar:
        top = {member.name.split("/", 1)[0] for member in tar.getmembers()}
        assert len(top) == 1, top
        tar.extractall(into.parent / "unpacked", filter="data")
    shutil.copytree(into.parent / "unpacked" / top.pop(), into)
    chown_tree(into)


def plant(path: Path, line: int, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` on one line (1-based), checking it was there."""
    lines = path.read_text().splitlines(keepends=True)
    assert old in lines[line - 1], lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new)
    path.write_text("".join(lines))


@pytest.fixture
def inflection_checkout(tmp_path: Path) -> Path:
    """inflection 0.5.1's sdist (tests included), with ordinal(13) broken: "13rd"."""
    downloads = tmp_path / "downloads"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                           "--disable-pip-version-check", INFLECTION, "-d", str(downloads)],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        missing(f"pip download {INFLECTION}", done.stderr.strip().splitlines()[-1:])
    repo = tmp_path / "inflection"
    _unpack(next(downloads.glob("inflection-0.5.1.tar.gz")), repo)
    plant(repo / "inflection" / "__init__.py", 226, "(11, 12, 13)", "(11, 12)")
    return repo


@pytest.fixture
def deep_equal_checkout(tmp_path: Path) -> Path:
    """deep-equal 1.0.1's tarball (test/cmp.js, ``npm test`` = tape), with strict mode ignored."""
    npm = shutil.which("npm")
    if npm is None:
        missing("npm on the host", "needed to fetch the test project")
    assert npm is not None
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    done = subprocess.run([npm, "pack", DEEP_EQUAL, "--silent"], cwd=downloads, capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        missing(f"npm pack {DEEP_EQUAL}", done.stderr.strip().splitlines()[-1:])
    repo = tmp_path / "deep-equal"
    _unpack(next(downloads.glob("deep-equal-1.0.1.tgz")), repo)
    plant(repo / "index.js", 17, "return opts.strict ? actual === expected : actual == expected;",
          "return actual == expected;")
    return repo


def write_policy(folder: Path, environment: str) -> Path:
    """An unattended policy (the ci preset) with this [environment] section."""
    folder.mkdir(parents=True, exist_ok=True)
    policy = folder / "policy.toml"
    policy.write_text(f'version = 1\nextends = ["ci"]\n\n[environment]\n{environment}\n')
    return policy


def env_show(policy: Path, repo: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["env", "show", "--policy", str(policy), "--repo", str(repo), "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def remove_key(client: docker.DockerClient, key: str) -> None:
    """Every image labelled with this key (and its tags) removed."""
    for row in client.api.images(filters={"label": f"{KEY_LABEL}={key}"}):
        for tag in row.get("RepoTags") or []:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_image(tag, noprune=False)
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_image(row["Id"], force=True)


@pytest.fixture
def fresh_environment(docker_client: docker.DockerClient,
                      capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[Path, Path], str]]:
    """``fresh(policy, repo)``: the environment's key, with no cached image for it (removed now
    and again when the test ends)."""
    keys: list[str] = []

    def fresh(policy: Path, repo: Path) -> str:
        key = str(env_show(policy, repo, capsys)["key"])
        remove_key(docker_client, key)
        keys.append(key)
        return key

    yield fresh
    for key in keys:
        remove_key(docker_client, key)


@pytest.fixture
def proxies(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every egress proxy started (its allow-list), in this process."""
    started: list[list[str]] = []
    real = egress.attach_egress

    async def spy(client: Any, allow: list[str], **kwargs: Any) -> egress.EgressHandle:
        started.append(list(allow))
        return await real(client, allow, **kwargs)

    monkeypatch.setattr(egress, "attach_egress", spy)
    return started


def run_cli(repo: Path, policy: Path, folder: Path, model: ScriptedModel,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    """``sandloop run`` (the real CLI, the real openai client) against the fake Responses server
    playing ``model``: the exit code, the ``--json`` result and what went to stderr."""
    with FakeResponsesServer(model) as server:
        code = main(["run", "fix the failing tests", "--repo", str(repo), "--base-url", server.base_url,
                     "--policy", str(policy), "--log", str(folder / "requests.jsonl"), "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def calls(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """Every call of ``kind`` in a ``run --json`` result, in order."""
    return [call for turn in result["turns"] for call in turn["calls"] if call["type"] == kind]


def shell_text(call: dict[str, Any]) -> list[str]:
    """stdout + stderr of each command of a shell_call's output."""
    return [f"{o.get('stdout', '')}{o.get('stderr', '')}" for o in call["output"]["output"]]


__all__ = ["DEEP_EQUAL", "INFLECTION", "REPOSITORY", "calls", "env_show", "plant", "run_cli", "shell_text",
           "write_policy"]
