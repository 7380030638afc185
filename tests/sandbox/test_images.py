"""The sandbox images: what a first ``make demo`` builds first, and a build already running being
waited for instead of started twice."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import docker.errors
import pytest
import requests
from rich.console import Console

from executor import demo, run_cli
from executor.run import BudgetOverrides, RunOptions
from sandbox import images

ROOT = Path(__file__).resolve().parents[2]


def _remove(name: str) -> None:
    """Remove an image this test built. The engine finishes a removal it has been asked for even
    when the answer is late (a paused container elsewhere holds image removals up), so a late
    answer is not waited for."""
    client = docker.from_env(timeout=30)
    try:
        with contextlib.suppress(docker.errors.ImageNotFound, requests.exceptions.Timeout):
            client.images.remove(name)
    finally:
        client.close()


def _own_dockerfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str,
                    base: str = "debian:bookworm-slim") -> None:
    """A Dockerfile of this test's own, one ``stage`` from ``base`` (its hash is in the tags, so
    the image is missing and builds in a second, touching nobody's images), and the test's own
    state folder (where the build lock lives)."""
    dockerfile = tmp_path / "Dockerfile.sandbox"
    dockerfile.write_text(f"FROM {base} AS {stage}\nLABEL sandloop.test={tmp_path.name}\n")
    monkeypatch.setattr(images, "DOCKERFILE", dockerfile)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_the_demo_plan_builds_what_the_demo_runs_in_and_leaves_the_large_images_for_later() -> None:
    now, later = images.plan("demo")
    assert now == ("minimal",)  # the demo's task
    assert later == ("shell", "browser")  # the two largest: never before the demo can show anything
    assert images.plan("all") == (images.TARGETS, ())


def _scenario_options() -> RunOptions:
    # The arguments as `sandloop run --demo` parses them (a hand-made namespace drifts from it).
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--demo"])
    with demo.scenario(args, Console(file=io.StringIO()), BudgetOverrides()) as opts:
        return opts


@pytest.mark.docker
@pytest.mark.browser
def test_the_demo_runs_in_what_its_plan_builds_first(
        docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # If the demo went back to the shell image, or waited for the browser image, a first
    # `make demo` would wait for a build its plan leaves to the background.
    images.ensure(docker_client, "browser")
    opts = _scenario_options()
    assert opts.image == images.image_name(images.plan("demo")[0][0])
    assert opts.browser == "container"  # the browser image is built: Chromium in its container
    # A Dockerfile of its own: the browser image is not built for it, as after a first bootstrap.
    dockerfile = tmp_path / "Dockerfile.sandbox"
    dockerfile.write_text("FROM debian:bookworm-slim AS browser\n")
    monkeypatch.setattr(images, "DOCKERFILE", dockerfile)
    assert not images.is_current(docker_client, "browser")
    assert _scenario_options().browser == "local"  # the host's Chromium meanwhile


def test_make_demo_bootstraps_for_the_demo_only() -> None:
    # Without the calling make's flags: under `make test` they add "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    steps = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=ROOT, capture_output=True,
                           text=True, check=True, env=env).stdout
    assert steps.splitlines()[:2] == ["./scripts/bootstrap --demo", ".venv/bin/sandloop run --demo --report"]


@pytest.mark.docker
def test_the_demo_build_readies_the_minimal_image_only(docker_client: docker.DockerClient) -> None:
    for target in images.TARGETS:  # what `make test`'s bootstrap has built
        images.ensure(docker_client, target)
    done = subprocess.run([sys.executable, "-m", "sandbox.images", "build", "--for", "demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ready = [line.split()[2] for line in done.stdout.splitlines() if line.startswith("bootstrap: image ")]
    assert ready == [images.image_name("minimal")]  # not the shell image, not the browser image
    assert "background" not in done.stdout  # everything is current: nothing left to start


@pytest.mark.docker
def test_ensure_waits_for_a_build_already_running_and_does_not_build_again(
        docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Dockerfile of its own (its hash is in the tags), so the image is missing and builds in
    # a second without touching anyone's images; the lock lives in this test's state folder.
    _own_dockerfile(tmp_path, monkeypatch, "minimal")
    name = images.image_name("minimal")
    assert not images.is_current(docker_client, "minimal")
    said: list[str] = []
    waiter = threading.Thread(target=lambda: said.append(images.ensure(docker_client, "minimal", said.append)))
    try:
        with images._build_lock(docker_client, "minimal", said.append):  # the background build's place
            waiter.start()
            waiter.join(timeout=3)
            assert waiter.is_alive()  # waiting, not building
            images.build(docker_client, "minimal", lambda _text: None)
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        assert said[0].startswith(f"waiting for the build of {name} that is already running")
        assert said[1:] == [name]  # then used what the other build made, without building it again
    finally:
        _remove(name)


@pytest.mark.docker
def test_the_background_build_runs_detached_and_logs_where_the_host_keeps_its_state(
        docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images.ensure(docker_client, "minimal")  # current: the child only checks it, in a second
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    pid = images.start_background(("minimal",))
    assert os.getpgid(pid) == pid  # its own session: the end of `make demo` does not stop it
    assert images.background_pid() == pid
    for _ in range(600):
        if images.background_pid() is None:
            break
        time.sleep(0.1)
    assert images.background_pid() is None  # done: a later `make demo` may start another
    log = (images.state_folder() / images.BACKGROUND_LOG).read_text()
    assert f"image {images.image_name('minimal')} ready" in log
    assert images.state_folder().is_relative_to(tmp_path / "state")


def test_no_stage_the_demo_does_not_need_comes_before_its_images_in_the_dockerfile() -> None:
    # The engine's classic builder (the one the docker SDK drives) builds every stage of the
    # Dockerfile up to the target, needed or not: a `shell` stage above `minimal` would make the
    # demo's first build the largest one again.
    stages = [line.split()[-1] for line in images.DOCKERFILE.read_text().splitlines()
              if line.upper().startswith("FROM ") and " AS " in line.upper()]
    last = max(stages.index(target) for target in images.plan("demo")[0])
    assert set(stages[:last + 1]) <= {"base", *images.plan("demo")[0]}, stages


@pytest.mark.docker
async def test_a_session_on_the_default_image_builds_it_on_first_use(
        docker_client: docker.DockerClient, user_workspace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The default image missing, as while `make demo`'s background build runs (or after an
    # image prune): a session builds it (or waits for that build) instead of failing. A
    # Dockerfile of its own, whose shell stage is the minimal image plus a label, keeps this fast
    # and leaves everyone's images alone.
    from sandbox.docker import DockerSession

    base = images.ensure(docker_client, "minimal")
    _own_dockerfile(tmp_path, monkeypatch, "shell", base)
    name = images.image_name("shell")
    assert not images.is_current(docker_client, "shell")
    try:
        async with await DockerSession.create(user_workspace, client=docker_client) as session:
            assert session.image == name
            done = await session.run("echo first use")
            assert done.exit_code == 0 and done.stdout.text == "first use\n"
        assert images.is_current(docker_client, "shell")
    finally:
        _remove(name)


@pytest.mark.docker
def test_describing_a_run_builds_no_image_and_says_one_is_missing(
        docker_client: docker.DockerClient, user_workspace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `sandloop env show` answers at once, also while the default image is still being built.
    from sandbox.environment.prepare import plan as describe
    from sandbox.environment.spec import EnvironmentSpec
    from sandloop.errors import SandboxUnavailable

    _own_dockerfile(tmp_path, monkeypatch, "shell")
    with pytest.raises(SandboxUnavailable, match="is not there: run scripts/bootstrap"):
        describe(EnvironmentSpec(), user_workspace, docker_client)
    assert not images.is_current(docker_client, "shell")
