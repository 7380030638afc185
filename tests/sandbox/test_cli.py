"""`sandloop doctor` and `sandloop gc` through their argparse wiring, against the real engine."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

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


def test_doctor_says_when_root_runs_without_capabilities(docker_client, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _run(["doctor", "--repo", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["container_user"]["uid_gid"] == "0:0"
    assert "every capability dropped" in report["container_user"]["why"]
    assert report["session"]["capabilities_effective"] == "0000000000000000"


def test_gc_all_removes_every_sandloop_container(docker_client, capsys) -> None:  # type: ignore[no-untyped-def]
    labels = {LABEL: "gc-test", "sandloop.owner_pid": str(os.getpid()), "sandloop.owner_host": os.uname().nodename,
              "sandloop.expires": str(int(time.time() + 3600))}
    c = docker_client.containers.run(images.image_name("shell"), ["sleep", "600"], detach=True, labels=labels,
                                     network_mode="none")
    try:
        assert _run(["gc"]) == 0  # a live owner: kept
        assert "gc-test" not in capsys.readouterr().out
        c.reload()
        assert c.status == "running"
        assert _run(["gc", "--all", "--json"]) == 0
        removed = json.loads(capsys.readouterr().out)
        assert any(r["container"] == c.name for r in removed)
    finally:
        with contextlib.suppress(Exception):
            c.remove(force=True)
