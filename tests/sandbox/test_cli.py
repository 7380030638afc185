"""`sandloop doctor` and `sandloop gc` through their argparse wiring, against the real engine."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox import images
from sandbox.cli import register
from sandbox.lifecycle import LABEL

pytestmark = [pytest.mark.docker]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_doctor_reports_what_is_in_force(docker_client, user_workspace: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(["doctor", "--repo", str(user_workspace), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["container_user"]["uid_gid"] == "1000:1000"
    session = report["session"]
    assert session["uid_inside"] == "1000"
    assert session["capabilities_effective"] == "0000000000000000"
    assert session["network_interfaces"] == ["lo"]
    assert session["runtime_in_force"] in report["runtimes_available"]
    assert session["seccomp"].startswith("sandloop's filter in force")
    assert session["helper"]["seccomp"]["filter"] == "installed" and session["helper"]["seccomp"]["mode"] == 2


def test_doctor_says_when_root_runs_without_capabilities(docker_client, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(["doctor", "--repo", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["container_user"]["uid_gid"] == "0:0"
    assert "every capability dropped" in report["container_user"]["why"]
    assert report["session"]["capabilities_effective"] == "0000000000000000"


def test_gc_all_removes_every_sandloop_container(docker_client: docker.DockerClient, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    session = f"gc-test-{os.getpid()}-{time.monotonic_ns()}"
    labels = {LABEL: session, "sandloop.owner_pid": str(os.getpid()), "sandloop.owner_host": os.uname().nodename,
              "sandloop.expires": str(int(time.time() + 3600))}
    # The engine is shared with other test runs: `gc --all` here must only see this test's
    # container, or it would remove everyone else's live sessions. Same CLI path, narrower view.
    client = docker.from_env()
    for name in ("containers", "networks"):
        listing = getattr(client.api, name)

        def only_ours(*args: Any, _listing: Any = listing, filters: dict[str, Any] | None = None, **kw: Any) -> Any:
            return _listing(*args, filters={**(filters or {}), "label": [f"{LABEL}={session}"]}, **kw)

        setattr(client.api, name, only_ours)
    monkeypatch.setattr("sandbox.backends.docker.docker.from_env", lambda *a, **k: client)
    c = docker_client.containers.run(images.image_name("shell"), ["sleep", "600"], detach=True, labels=labels,
                                     network_mode="none")
    try:
        assert _run(["gc"]) == 0  # a live owner: kept
        assert "gc-test" not in capsys.readouterr().out
        c.reload()
        assert c.status == "running"
        assert _run(["gc", "--all", "--json"]) == 0
        removed = json.loads(capsys.readouterr().out)
        assert [r["container"] for r in removed] == [c.name]
    finally:
        with contextlib.suppress(Exception):
            c.remove(force=True)
        client.close()
