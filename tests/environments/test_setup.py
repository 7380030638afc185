"""The setup phase with real containers: failures cache nothing, two builders build once, the
commit carries nothing of the run, python3 comes to images without it (or they are refused in
one line), Dockerfiles build without network, and the host CA is trusted in both phases."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from executor.cli import main
from sandbox import images
from sandbox.ca import CA_PATH, CA_VARIABLES
from sandbox.docker import DockerConfig, DockerSession
from sandbox.environment import store
from sandbox.environment.key import environment_key
from sandbox.environment.prepare import EnvironmentSetupFailed, prepare
from sandbox.environment.probe import image_facts, probe
from sandbox.environment.spec import BASE_LABEL, KEY_LABEL, REPOSITORY, EnvironmentSpec
from sandloop.errors import ConfigError

from .conftest import remove_key

pytestmark = pytest.mark.docker


@pytest.fixture
def built(docker_client: docker.DockerClient) -> Any:
    """Keys of environments a test builds, removed at the end."""
    keys: list[str] = []
    yield keys
    for key in keys:
        remove_key(docker_client, key)


def test_a_failing_setup_stops_the_run_with_exit_2_and_caches_nothing(
        tmp_path: Path, user_workspace: Path, docker_client: docker.DockerClient,
        capsys: pytest.CaptureFixture[str]) -> None:
    (user_workspace / "requirements.txt").write_text("nothing\n")
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nextends = ["ci"]\n[environment]\n'
                      'setup = ["echo first ok", "echo the tail line; echo to stderr >&2; exit 3", "echo never"]\n'
                      'cache_key = ["requirements.txt"]\n')
    code = main(["run", "x", "--repo", str(user_workspace), "--base-url", "http://127.0.0.1:9",
                 "--policy", str(policy), "--log", str(tmp_path / "run" / "requests.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "setup 2/3" in err and "exited with 3" in err and "the tail line" in err and "to stderr" in err
    assert "nothing was cached" in err and "echo never" not in err.split("setup 2/3")[-1]
    assert "the tail line" in (tmp_path / "run" / "environment.log").read_text()
    assert main(["env", "show", "--policy", str(policy), "--repo", str(user_workspace), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["cached"] is False
    assert not docker_client.api.images(filters={"label": f"{KEY_LABEL}={shown['key']}"})
    # and no setup container is left
    assert not docker_client.api.containers(all=True, filters={"name": "sandloop-envsetup-"})


async def test_a_setup_past_its_time_limit_is_stopped_and_caches_nothing(
        user_workspace: Path, docker_client: docker.DockerClient) -> None:
    spec = EnvironmentSpec(setup=("echo started", "sleep 600"), setup_timeout_s=3)
    with pytest.raises(EnvironmentSetupFailed) as failed:
        await prepare(spec, user_workspace, client=docker_client)
    assert "setup 2/2 (setup ran past its 3 s)" in str(failed.value) and "sleep 600" in str(failed.value)
    assert not docker_client.api.containers(all=True, filters={"name": "sandloop-envsetup-"})


async def test_setup_reaches_only_its_list_and_cannot_plant_git_hooks(
        user_workspace: Path, docker_client: docker.DockerClient) -> None:
    """The proxy refuses a host off the list by name (nothing is resolved or contacted), and the
    checkout's .git is read-only to setup as to the agent: no hook reaches the host's git."""
    (user_workspace / ".git" / "hooks").mkdir(parents=True)
    os.chown(user_workspace / ".git", 1000, 1000)
    os.chown(user_workspace / ".git" / "hooks", 1000, 1000)
    plant = "echo 'echo pwned' > .git/hooks/pre-commit || echo refused-hook"
    spec = EnvironmentSpec(setup=(plant, "curl -sS -o /dev/null https://blocked.invalid/"),
                           setup_network=("allowed.invalid",))
    with pytest.raises(EnvironmentSetupFailed) as failed:
        await prepare(spec, user_workspace, client=docker_client)
    text = str(failed.value)
    assert "the setup proxy refused blocked.invalid:443" in text and "403" in text
    assert not (user_workspace / ".git" / "hooks" / "pre-commit").exists()


async def test_two_sessions_building_one_key_build_it_once(
        user_workspace: Path, docker_client: docker.DockerClient, built: list[str]) -> None:
    marker = "/workspace/setup-ran"
    spec = EnvironmentSpec(setup=(f"echo $$ >> {marker}", "sleep 2"), cache_key=("*.txt",))
    (user_workspace / "a.txt").write_text(os.urandom(8).hex())  # a key no earlier run built
    os.chown(user_workspace / "a.txt", 1000, 1000)
    events: list[tuple[str, dict[str, Any]]] = []
    one, two = await asyncio.gather(
        prepare(spec, user_workspace, client=docker_client, on_event=lambda k, d: events.append((k, d))),
        prepare(spec, user_workspace, client=docker_client, on_event=lambda k, d: events.append((k, d))))
    assert one.key is not None
    built.append(one.key)
    assert one.image == two.image and one.key == two.key
    assert sorted([one.source, two.source]) == ["built", "cached"]
    assert len((user_workspace / "setup-ran").read_text().split()) == 1
    assert any(d.get("stage") == "waiting" for _, d in events)


async def test_the_commit_keeps_the_base_image_config_and_the_prefix_belongs_to_the_owner(
        user_workspace: Path, docker_client: docker.DockerClient, built: list[str]) -> None:
    (user_workspace / "k.txt").write_text(os.urandom(8).hex())
    spec = EnvironmentSpec(setup=("python3 -m venv /opt/env", "touch /opt/env/made-by-setup", "touch made-here"),
                           cache_key=("k.txt",), env={"SOME_VAR": "x"})
    prepared = await prepare(spec, user_workspace, client=docker_client)
    assert prepared.key is not None
    built.append(prepared.key)
    base = image_facts(docker_client, images.image_name("shell"))
    env_image = docker_client.api.inspect_image(prepared.image)["Config"]
    assert not env_image["Entrypoint"] and (env_image["Cmd"] or None) == base.cmd
    assert env_image["User"] == base.user and env_image["WorkingDir"] == base.workdir
    assert [e for e in env_image["Env"] if e.startswith("PATH=")] == [f"PATH=/opt/env/bin:{base.path}"]
    assert not [e for e in env_image["Env"] if e.startswith(("HOME=", "SOME_VAR", "HTTP", "http"))]
    assert set(env_image["Labels"]) - set(base.labels) == {
        "sandloop.env.key", "sandloop.env.kind", "sandloop.env.base", "sandloop.env.version"}
    assert (user_workspace / "made-here").stat().st_uid == 1000

    from executor.sandbox_config import docker_config
    from policies.engine import load_policy

    config = docker_config(load_policy("ci").policy, prepared=prepared)
    async with await DockerSession.create(user_workspace, config, client=docker_client) as session:
        r = await session.run("stat -c '%u %a' /opt/env /opt/env/made-by-setup; touch /opt/env/x; "
                              "echo $PATH; ls /tmp/home 2>&1 | head -1")
    lines = r.stdout.text.splitlines()
    assert lines[0] == "1000 755" and lines[1].startswith("1000 ")
    assert "Read-only file system" in r.stderr.text  # the agent cannot change its environment
    assert lines[2].startswith("/opt/env/bin:")


async def test_an_image_without_python_gets_it_once_through_its_own_package_sources(
        user_workspace: Path, docker_client: docker.DockerClient) -> None:
    base = "debian:bookworm-slim"
    facts = image_facts(docker_client, base)
    found = probe(docker_client, base)
    assert found.python3 is None and found.manager == "apt"
    key = environment_key({"kind": "python", "base": facts.id, "manager": found.manager_program,
                           "version": images.package_version()})
    remove_key(docker_client, key)  # really build it here
    events: list[dict[str, Any]] = []
    prepared = await prepare(EnvironmentSpec(image=base), user_workspace, client=docker_client,
                             on_event=lambda k, d: events.append(d))
    assert prepared.source == "python" and prepared.image == f"{REPOSITORY}:{store.tag_for(key)}"
    assert any("has no python3" in str(d.get("text")) for d in events)
    assert any("deb.debian.org" in str(d.get("text")) or "may reach" in str(d.get("text")) for d in events)
    async with await DockerSession.create(user_workspace, DockerConfig(image=prepared.image),
                                          client=docker_client) as session:
        r = await session.run("python3 -c 'import sys; print(sys.version_info[0])'; ls /sys/class/net")
    assert r.stdout.text.split() == ["3", "lo"]
    again = await prepare(EnvironmentSpec(image=base), user_workspace, client=docker_client)
    assert again.image == prepared.image  # cached: built once


def _image(client: docker.DockerClient, dockerfile: str, tag: str, files: dict[str, bytes] | None = None) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **(files or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag=tag, network_mode="none", rm=True, forcerm=True,
                        pull=False)
    return tag


@pytest.mark.parametrize(("dockerfile", "missing"), [
    ("FROM scratch\nCOPY note /note\n", "no /bin/sh"),
    ("FROM debian:bookworm-slim\nRUN rm -f /usr/bin/apt-get /usr/bin/apt\n", "no package manager"),
])
async def test_an_image_that_cannot_get_python_is_refused_in_one_line(
        user_workspace: Path, docker_client: docker.DockerClient, dockerfile: str, missing: str) -> None:
    tag = _image(docker_client, dockerfile, f"sandloop-test-nopython:{len(missing)}-{os.getpid()}", {"note": b"x"})
    try:
        with pytest.raises(ConfigError) as refused:
            await prepare(EnvironmentSpec(image=tag), user_workspace, client=docker_client)
        text = str(refused.value)
        assert "\n" not in text and tag in text and "no python3" in text and missing in text
    finally:
        docker_client.api.remove_image(tag, force=True)


def test_a_dockerfile_builds_without_network_relative_to_the_policy(
        tmp_path: Path, user_workspace: Path, docker_client: docker.DockerClient, built: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "envdef"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"FROM {images.image_name('minimal')}\n"
        "USER 0\nRUN ls /sys/class/net > /opt/build-net\nUSER 1000:1000\n")
    policy = folder / "policy.toml"
    policy.write_text('version = 1\nextends = ["ci"]\n[environment]\ndockerfile = "Dockerfile"\n'
                      'setup = ["cat /opt/build-net > from-build.txt"]\n')
    assert main(["env", "build", "--policy", str(policy), "--repo", str(user_workspace), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    built.append(result["key"])
    base_ref = docker_client.images.get(result["image"]).labels[BASE_LABEL].rpartition("@")[0]
    built.append(base_ref.removeprefix(f"{REPOSITORY}:"))  # the Dockerfile's image: its key is its tag
    assert result["source"] == "built" and result["image"].startswith(f"{REPOSITORY}:")
    assert (user_workspace / "from-build.txt").read_text().split() == ["lo"]  # RUN had no network
    assert main(["env", "build", "--policy", str(policy), "--repo", str(user_workspace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "cached"


async def test_trust_host_ca_mounts_the_bundle_read_only_and_names_it_everywhere(
        user_workspace: Path, docker_client: docker.DockerClient) -> None:
    prepared = await prepare(EnvironmentSpec(trust_host_ca=True), user_workspace, client=docker_client)
    assert prepared.source == "default" and prepared.ca_bundle
    config = DockerConfig(ca_bundle=prepared.ca_bundle)
    async with await DockerSession.create(user_workspace, config, client=docker_client) as session:
        names = " ".join(f"${v}" for v in CA_VARIABLES)
        r = await session.run(f"echo {names}; sha256sum < {CA_PATH}; sha256sum < /etc/ssl/certs/ca-certificates.crt; "
                              f"grep ' {CA_PATH} ' /proc/self/mountinfo | cut -d' ' -f6")
    lines = r.stdout.text.splitlines()
    assert lines[0].split() == [CA_PATH] * len(CA_VARIABLES)
    host = hashlib.sha256(Path(prepared.ca_bundle).read_bytes()).hexdigest()
    assert lines[1].split()[0] == host  # the host's bundle, as it is
    assert lines[2].split()[0] != host  # at a private path: the image's own bundle is untouched
    assert lines[3].split(",")[0] == "ro"


async def test_restoring_saved_paths_runs_nothing_setup_planted_and_cannot_reach_git(
        docker_client: docker.DockerClient, user_workspace: Path) -> None:
    # An image setup filled: its /opt/env/bin (first on PATH) holds a `cp`, a `mkdir` and a
    # `python3` (which would run before the seccomp filter) that would plant a hook in the
    # checkout's .git (which the host's git runs), and leave a mark, before doing the job.
    from sandbox.environment.prepare import SAVED, _restore

    plant = (b"#!/bin/sh\ntouch /workspace/planted-ran; mkdir -p /workspace/.git/hooks 2>/dev/null; "
             b"echo 'touch /tmp/pwned' > /workspace/.git/hooks/post-checkout; "
             b"chmod +x /workspace/.git/hooks/post-checkout; exec /bin/$(basename $0) \"$@\"\n")
    dockerfile = (f"FROM {images.image_name('shell')}\nCOPY cp /opt/env/bin/cp\nCOPY cp /opt/env/bin/mkdir\n"
                  f"COPY cp /opt/env/bin/python3\nCOPY x {SAVED}/node_modules/pkg/index.js\nUSER 0\n"
                  "RUN chmod 755 /opt/env/bin/cp /opt/env/bin/mkdir /opt/env/bin/python3\n"
                  "ENV PATH=/opt/env/bin:/usr/local/bin:/usr/bin:/bin\n")
    tag = _image(docker_client, dockerfile, f"sandloop-test-restore:{os.getpid()}",
                 {"cp": plant, "x": b"module.exports = 1\n"})
    try:
        (user_workspace / ".git").mkdir()
        (user_workspace / ".git" / "config").write_text("[core]\n")
        for path in (user_workspace / ".git", user_workspace / ".git" / "config"):
            os.chown(path, 1000, 1000)
        restored = await asyncio.to_thread(_restore, docker_client, tag, user_workspace, "1000:1000",
                                           ("node_modules",), (".git",),
                                           image_path=image_facts(docker_client, tag).path)
        assert restored == ("node_modules",)
        assert (user_workspace / "node_modules" / "pkg" / "index.js").read_text() == "module.exports = 1\n"
        assert not (user_workspace / ".git" / "hooks").exists()
        assert not (user_workspace / "planted-ran").exists()  # none of them ran
    finally:
        docker_client.images.remove(tag, force=True)


@pytest.mark.parametrize("owner", [1000, 0])
async def test_setup_steps_and_the_restore_run_under_the_helpers_filter(
        tmp_path: Path, docker_client: docker.DockerClient, built: list[str], owner: int) -> None:
    """The engine starts setup steps (docker exec), not the helper: each goes through the helper's
    exec mode, so the filter holds there too, for the owner's steps as for a root-owned checkout's.
    An x32 call kills the step's process (the engine's own copy of the rules would say EPERM)."""
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / "k.txt").write_text(os.urandom(8).hex())
    (ws / "target").write_text("a file of the checkout\n")
    for path in (ws, ws / "k.txt", ws / "target"):
        os.chown(path, owner, owner)
    spec = EnvironmentSpec(setup=(
        "grep -E '^Seccomp' /proc/self/status > seccomp.txt",
        "if chmod u+s target; then echo set; else echo refused; fi > setid.txt",
        "python3 -c 'import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39)' || echo $? > x32.txt",
        "mkdir -p saved && echo kept > saved/file",
    ), cache_key=("k.txt",), cache_paths=("saved",))
    prepared = await prepare(spec, ws, client=docker_client)
    assert prepared.key is not None
    built.append(prepared.key)
    assert (ws / "seccomp.txt").read_text() == "Seccomp:\t2\nSeccomp_filters:\t2\n"  # the engine's and ours
    assert (ws / "setid.txt").read_text() == "refused\n"
    assert not (ws / "target").stat().st_mode & 0o6000
    if os.uname().machine == "x86_64":
        assert (ws / "x32.txt").read_text() == "159\n"  # 128 + SIGSYS
    # A fresh checkout gets the saved paths back, copied by a process under the same filter.
    (ws / "saved" / "file").unlink()
    (ws / "saved").rmdir()
    again = await prepare(spec, ws, client=docker_client)
    assert again.source == "cached" and again.restored == ("saved",)
    assert (ws / "saved" / "file").read_text() == "kept\n" and (ws / "saved").stat().st_uid == owner
