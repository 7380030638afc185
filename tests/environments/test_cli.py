"""``sandloop env show | build | ls | prune`` and ``sandloop run --image``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import docker
import pytest

from executor.cli import main
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from sandbox import images
from sandbox.environment import store

from .conftest import calls, remove_key, shell_text

pytestmark = pytest.mark.docker


def test_show_without_an_environment_says_the_default_image(user_workspace: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "show", "--repo", str(user_workspace)]) == 0
    assert "default shell image" in capsys.readouterr().err
    assert main(["env", "show", "--repo", str(user_workspace), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["default"] is True and shown["image"] == images.image_name("shell")


def test_show_without_a_policy_says_it_is_the_default_even_beside_a_checkout_policy(
        user_workspace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The checkout never chooses its own policy: its sandloop.toml is not read without --policy,
    # and the output says so, so nobody reads the default preset's environment as theirs.
    (user_workspace / "sandloop.toml").write_text('version = 1\n[environment]\npreset = "python"\n')
    monkeypatch.chdir(user_workspace)
    assert main(["env", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["policy"] == "default (no --policy given)"
    assert shown["default"] is True and shown["preset"] is None
    assert shown["note"] == ("sandloop.toml is not read: a checkout never chooses its own policy; "
                             "give it with --policy sandloop.toml")
    assert main(["env", "show"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "no --policy given: this is the default preset's environment, not a policy of yours" in err
    assert "policy: default (no --policy given)" in err
    assert "note: sandloop.toml is not read: a checkout never chooses its own policy; give it with --policy " \
        "sandloop.toml" in err
    assert "no [environment]: runs start from the default shell image as it is" in err
    # Given, it is the file's: no note, and its preset.
    assert main(["env", "show", "--policy", "sandloop.toml", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["policy"] == str(user_workspace / "sandloop.toml") and "note" not in shown
    assert shown["preset"] == "python" and shown["setup_registries"] == ["pip"]
    # the base image by its whole name (a cut name can name another image), its id shortened
    base = shown["base"]
    assert main(["env", "show", "--policy", "sandloop.toml"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"base: image={base['image']}, id={base['id'][:19]}" in err, err
    assert len(base["image"]) > 19 and base["id"].startswith("sha256:")


def test_build_ls_and_prune_one_environment(tmp_path: Path, user_workspace: Path, docker_client: docker.DockerClient,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (user_workspace / "deps.txt").write_text(os.urandom(8).hex())
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[environment]\nsetup = ["echo set up > /opt/env/done"]\ncache_key = ["deps.txt"]\n')
    common = ["--policy", str(policy), "--repo", str(user_workspace), "--json"]
    assert main(["env", "show", *common]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["cached"] is False and list(shown["files"]) == ["deps.txt"]
    key = shown["key"]
    try:
        assert main(["env", "build", *common]) == 0
        out = capsys.readouterr()
        built = json.loads(out.out)
        assert built["key"] == key and built["source"] == "built" and "echo set up" in out.err
        assert Path(built["log"]).is_file() and store.state_folder() in Path(built["log"]).parents
        assert main(["env", "show", *common]) == 0
        assert json.loads(capsys.readouterr().out)["cached"] is True

        assert main(["env", "ls", "--json"]) == 0
        listed = {env["key"]: env for env in json.loads(capsys.readouterr().out)}
        assert listed[key]["kind"] == "setup" and listed[key]["tags"] == [f"sandloop-env:{key[:32]}"]
        assert listed[key]["last_used"] is not None

        assert main(["env", "prune", "--days", "100000", "--json"]) == 0  # nothing that old
        pruned = json.loads(capsys.readouterr().out)
        assert key not in [env["key"] for env in pruned["removed"]]
        removed, _ = store.prune(docker_client, older_than_days=30, keys={key},
                                 now=time.time() + 31 * 86400)
        assert [env.key for env in removed] == [key]
        assert store.find(docker_client, key) is None
    finally:
        remove_key(docker_client, key)


def test_prune_finds_sandbox_images_of_other_dockerfiles(docker_client: docker.DockerClient) -> None:
    tag = f"{images.REPOSITORY}:shell-0.0.0-0000{os.getpid()}"
    docker_client.api.tag(images.image_name("minimal"), images.REPOSITORY, tag.split(":", 1)[1])
    mine = lambda t: t == tag  # noqa: E731 (other checkouts' images are theirs)
    try:
        stale, _ = store.stale_sandbox_images(docker_client, remove=False, only=mine)
        assert stale == [tag]
        assert store.stale_sandbox_images(docker_client, remove=False, only=lambda t: t in {
            images.image_name("shell"), images.image_name("minimal")})[0] == []
        stale, _ = store.stale_sandbox_images(docker_client, remove=True, only=mine, older_than_days=0)
        assert stale == [tag] and not docker_client.images.list(name=tag)
        assert docker_client.images.list(name=images.image_name("minimal"))  # untagged only
    finally:
        if docker_client.images.list(name=tag):
            docker_client.api.remove_image(tag)


def test_run_image_overrides_the_image_for_one_run(tmp_path: Path, user_workspace: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel([[shell_call(["ls /usr/bin/npm /usr/bin/pytest-3 2>&1; echo done"])], [message("ok")]])
    with FakeResponsesServer(model) as server:
        code = main(["run", "look", "--repo", str(user_workspace), "--base-url", server.base_url, "--policy", "ci",
                     "--image", images.image_name("minimal"), "--log", str(tmp_path / "r.jsonl"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    text = shell_text(calls(json.loads(out.out), "shell_call")[0])[0]
    assert "No such file" in text and "done" in text  # the minimal image has neither
