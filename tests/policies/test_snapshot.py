"""Snapshots of compiled policies: used only while they hold, never followed through a link.

The first decider for a policy file loads it in full and leaves a snapshot under the host's
state directory; the next one decides from the snapshot (a plain Decider, no schema models),
as long as the file, everything it extends and the snapshot itself hash as recorded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from policies import snapshot
from policies.engine import Decider, PolicyEngine
from policies.problems import PolicyLoadError
from sandloop.errors import HostPathRefused
from sandloop.verdict import Decision

BASE = '''version = 1
extends = ["default"]

[[shell.rules]]
id = "make"
pattern = ["make"]
decision = "allow"
justification = "builds"
match = ["make test"]
'''
TOP = 'version = 1\nextends = ["./base.toml"]\n\n[files]\nwritable = ["src/**"]\n'


def _folder(state: Path) -> Path:
    return state / "sandloop" / snapshot.FOLDER


def _snapshots(state: Path) -> list[Path]:
    folder = _folder(state)
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def test_the_second_decider_comes_from_the_snapshot(write_policy: Callable[..., Path], state_home: Path) -> None:
    write_policy(BASE, "base.toml")
    path = write_policy(TOP)
    first = snapshot.decider(str(path))
    assert isinstance(first, PolicyEngine)
    (kept,) = _snapshots(state_home)
    assert kept.stat().st_mode & 0o777 == 0o600 and _folder(state_home).stat().st_mode & 0o777 == 0o700
    second = snapshot.decider(str(path))
    assert type(second) is Decider
    for line in ("make test", "git push", "rm -rf src", "echo x > src/a.py", "echo x > README"):
        assert second.shell(line) == first.shell(line), line


def test_an_edited_file_or_base_is_read_again(write_policy: Callable[..., Path], state_home: Path) -> None:
    base = write_policy(BASE, "base.toml")
    path = write_policy(TOP)
    assert snapshot.decider(str(path)).shell("make").decision is Decision.ALLOW
    base.write_text(BASE.replace('decision = "allow"', 'decision = "deny"'))
    engine = snapshot.decider(str(path))  # same top file, same snapshot name: the base's hash fails
    assert isinstance(engine, PolicyEngine) and engine.shell("make").decision is Decision.DENY
    path.write_text(TOP.replace("src/**", "docs/**"))
    engine = snapshot.decider(str(path))
    assert isinstance(engine, PolicyEngine) and engine.patch("docs/a.md", "update_file").allowed
    assert type(snapshot.decider(str(path))) is Decider


def test_a_tampered_snapshot_is_not_used(write_policy: Callable[..., Path], state_home: Path) -> None:
    path = write_policy(BASE)
    snapshot.decider(str(path))
    (kept,) = _snapshots(state_home)
    kept.write_bytes(kept.read_bytes().replace(b'"allow"', b'"deny"', 1))  # hash line left as it was
    engine = snapshot.decider(str(path))
    assert isinstance(engine, PolicyEngine) and engine.shell("make").decision is Decision.ALLOW
    assert type(snapshot.decider(str(path))) is Decider  # written afresh
    kept.write_bytes(b"")
    assert isinstance(snapshot.decider(str(path)), PolicyEngine)


def test_a_link_in_place_of_a_snapshot_is_never_followed(write_policy: Callable[..., Path], state_home: Path,
                                                         tmp_path: Path) -> None:
    path = write_policy(BASE)
    snapshot.decider(str(path))
    (kept,) = _snapshots(state_home)
    victim = tmp_path / "victim.json"
    planted = kept.read_bytes()
    victim.write_bytes(planted)  # a valid snapshot, reached only through the link
    kept.unlink()
    kept.symlink_to(victim)
    assert isinstance(snapshot.decider(str(path)), PolicyEngine)  # the link was not read
    assert not kept.is_symlink() and kept.read_bytes() == planted  # the link replaced by a fresh file
    victim.write_bytes(b"untouched")
    kept.unlink()
    kept.symlink_to(victim)
    snapshot.decider(str(path))
    assert victim.read_bytes() == b"untouched"  # never written through


def test_a_fifo_in_place_of_a_snapshot_does_not_hang(write_policy: Callable[..., Path], state_home: Path) -> None:
    path = write_policy(BASE)
    snapshot.decider(str(path))
    (kept,) = _snapshots(state_home)
    kept.unlink()
    os.mkfifo(kept)
    assert isinstance(snapshot.decider(str(path)), PolicyEngine)
    assert kept.is_file()


def test_a_linked_state_folder_is_refused(write_policy: Callable[..., Path], state_home: Path,
                                          tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state_home / "sandloop").mkdir(parents=True)
    (state_home / "sandloop" / snapshot.FOLDER).symlink_to(elsewhere)
    with pytest.raises(HostPathRefused):
        snapshot._folder(create=True)
    path = write_policy(BASE)
    assert snapshot.decider(str(path)).shell("make").allowed  # decided from the file itself
    assert list(elsewhere.iterdir()) == []


def test_a_bad_policy_says_where_and_leaves_no_snapshot(write_policy: Callable[..., Path], state_home: Path) -> None:
    path = write_policy(BASE.replace('match = ["make test"]', 'match = ["cmake"]'))
    with pytest.raises(PolicyLoadError) as raised:
        snapshot.decider(str(path))
    assert "policy.toml:" in str(raised.value) and "cmake" in str(raised.value)
    assert _snapshots(state_home) == []
    with pytest.raises(PolicyLoadError, match="no preset named 'nosuch'"):
        snapshot.decider("nosuch")


def test_sources_are_named_from_the_folder_the_command_runs_in(write_policy: Callable[..., Path],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_policy(BASE)
    monkeypatch.chdir(tmp_path)
    assert snapshot.decider(str(path)).shell("make").source == "policy.toml:4"
    monkeypatch.chdir(tmp_path.parent)
    decider = snapshot.decider(str(path))
    assert type(decider) is Decider
    assert decider.shell("make").source == f"{tmp_path.name}/policy.toml:4"


def test_old_snapshots_are_pruned(write_policy: Callable[..., Path], state_home: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "KEPT", 3)
    for n in range(5):
        snapshot.decider(str(write_policy(BASE + f"# {n}\n", f"p{n}.toml")))
    assert len(_snapshots(state_home)) == 3
