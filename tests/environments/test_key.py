"""The cache key's workspace part is read as a hostile tree: no link followed, nothing but
regular files read, .git never walked, setup's own outputs not keyed."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sandbox.environment.key import environment_key, workspace_files


def test_globs_pick_files_and_their_contents_key_them(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("a")
    (tmp_path / "requirements-dev.txt").write_text("b")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "package.json").write_text("{}")
    found = workspace_files(tmp_path, ["pyproject.toml", "requirements*.txt", "**/package.json", "absent.lock"])
    assert list(found) == ["pkg/package.json", "pyproject.toml", "requirements-dev.txt"]
    before = environment_key({"files": found})
    (tmp_path / "requirements-dev.txt").write_text("c")
    assert environment_key({"files": workspace_files(tmp_path, ["requirements*.txt"])}) != before


def test_links_are_keyed_by_their_text_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.lock").write_text("host secret")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.lock").symlink_to(outside / "secret.lock")
    (ws / "linked").symlink_to(outside, target_is_directory=True)
    (ws / "zero.lock").symlink_to("/dev/zero")  # would never end if read
    found = workspace_files(ws, ["*.lock", "**/*.lock", "linked/*.lock"])
    assert found == {"a.lock": f"link:{outside / 'secret.lock'}", "zero.lock": "link:/dev/zero"}


def test_a_fifo_is_not_read_and_git_is_not_walked(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.lock")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.lock").write_text("git")
    (tmp_path / "ok.lock").write_text("ok")
    done: dict[str, dict[str, str]] = {}
    worker = threading.Thread(target=lambda: done.update(r=workspace_files(tmp_path, ["**/*.lock"])), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert list(done["r"]) == ["ok.lock"]


def test_setup_outputs_are_not_keyed(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / "node_modules" / "tape").mkdir(parents=True)
    (tmp_path / "node_modules" / "tape" / "package.json").write_text("{}")
    assert list(workspace_files(tmp_path, ["**/package.json"], exclude=["node_modules"])) == ["package.json"]
    assert len(workspace_files(tmp_path, ["**/package.json"])) == 2


def test_the_key_is_canonical(tmp_path: Path) -> None:
    assert environment_key({"a": 1, "b": [1, 2]}) == environment_key({"b": [1, 2], "a": 1})
    assert environment_key({"a": 1}) != environment_key({"a": 2})


def test_equal_lockfiles_in_two_checkouts_never_share_an_environment(tmp_path: Path) -> None:
    # Setup runs a checkout's own code and may rewrite the files the key reads: a hostile
    # checkout could otherwise build an environment that answers to another one's key.
    from sandbox.environment.prepare import _key_fields
    from sandbox.environment.probe import ImageFacts
    from sandbox.environment.spec import EnvironmentSpec

    spec = EnvironmentSpec(setup=("npm install",), cache_key=("package.json",))
    base = ImageFacts(ref="base", id="sha256:1", path="", entrypoint=None, cmd=None, user="", workdir="",
                      labels={})
    keys = []
    for name in ("a", "b", "a"):
        checkout = tmp_path / name
        checkout.mkdir(exist_ok=True)
        (checkout / "package.json").write_text('{"name": "same"}\n')
        keys.append(environment_key(_key_fields(spec, base, "1000:1000", checkout)))
    assert keys[0] != keys[1] and keys[0] == keys[2]
    trusted = EnvironmentSpec(setup=("npm install",), cache_key=("package.json",), trust_host_ca=True)
    assert environment_key(_key_fields(trusted, base, "1000:1000", tmp_path / "a")) != keys[0]


def test_a_planted_deep_tree_or_huge_file_does_not_break_or_stall_the_key(tmp_path: Path,
                                                                          monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from sandbox.environment import key

    deep = tmp_path
    for _ in range(300):
        deep = deep / "d"
        deep.mkdir()
    (tmp_path / "requirements.txt").write_text("a\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(250)  # a 300-level tree now goes deeper than the interpreter allows
    try:
        files = workspace_files(tmp_path, ("**/requirements.txt",))
    finally:
        sys.setrecursionlimit(limit)
    assert list(files) == ["requirements.txt"]
    monkeypatch.setattr(key, "MAX_READ", 1000)
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 5000)
    found = workspace_files(tmp_path, ("*.txt",))
    assert found["big.txt"].startswith("large:5000:")  # keyed by size and time, not read
