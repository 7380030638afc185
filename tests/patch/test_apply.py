"""The transaction: validate, ask, read, compute, then one commit — or nothing at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.local import LocalSession
from sandbox.patch import envelope, v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import ContextNotFound, FileMissing, PathRefused, PolicyDenied
from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict
from tests.patch.conftest import allow_all, tree
from tests.patch.doubles import InMemorySessionDouble

THREE_OPS = """*** Begin Patch
*** Update File: a.txt
@@
-a
+A
*** Add File: b.txt
+new b
*** Update File: c.txt
@@
-this line is not in c.txt
+C
*** End Patch
"""


def _workspace(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


async def test_third_operation_failing_leaves_first_two_untouched(tmp_path: Path) -> None:
    _workspace(tmp_path, {"a.txt": "a\n", "c.txt": "c\n"})
    before = tree(tmp_path)
    async with await LocalSession.create(tmp_path) as session:
        with pytest.raises(ContextNotFound) as info:
            await apply_operations(session, envelope.parse(THREE_OPS), allow=allow_all)
    assert tree(tmp_path) == before  # a.txt not updated, b.txt not created
    message = str(info.value)
    assert "update_file c.txt (operation 3 of 3)" in message
    assert "No file was changed." in message


async def test_every_change_goes_in_one_commit() -> None:
    session = InMemorySessionDouble({"a.txt": b"a\n", "c.txt": b"c\n"})
    patch = THREE_OPS.replace("-this line is not in c.txt", "-c")
    result = await apply_operations(session, envelope.parse(patch), allow=allow_all)
    assert len(session.commits) == 1
    assert [c.path for c in session.commits[0]] == ["a.txt", "b.txt", "c.txt"]
    assert session.files == {"a.txt": b"A\n", "b.txt": b"new b\n", "c.txt": b"C\n"}
    assert result.summaries == (
        "updated a.txt: 1 hunk, +1 \u22121",
        "created b.txt (1 line)",
        "updated c.txt: 1 hunk, +1 \u22121",
    )


async def test_deny_fails_before_anything_is_read() -> None:
    asked: list[tuple[str, str]] = []

    async def deny_c(path: str, kind: PatchKind) -> Verdict:
        asked.append((path, kind))
        if path == "c.txt":
            return Verdict(Decision.DENY, "c.txt is owned by the release team", "files.c", "p:3")
        return Verdict(Decision.ALLOW, "ok")

    session = InMemorySessionDouble({"a.txt": b"a\n", "c.txt": b"c\n"})
    with pytest.raises(PolicyDenied) as info:
        await apply_operations(session, envelope.parse(THREE_OPS), allow=deny_c)
    assert "c.txt is owned by the release team (rule files.c)" in str(info.value)
    assert asked == [("a.txt", "update_file"), ("b.txt", "create_file"), ("c.txt", "update_file")]
    assert session.reads == [] and session.commits == []


async def test_a_move_asks_for_update_create_and_delete() -> None:
    asked: list[tuple[str, str]] = []

    async def record(path: str, kind: PatchKind) -> Verdict:
        asked.append((path, kind))
        return Verdict(Decision.ALLOW, "ok")

    session = InMemorySessionDouble({"old.txt": b"x\n"})
    op = v4a.FileOp("update_file", "old.txt", move_to="new.txt")
    await apply_operations(session, [op], allow=record)
    assert asked == [("old.txt", "update_file"), ("new.txt", "create_file"), ("old.txt", "delete_file")]
    assert session.files == {"new.txt": b"x\n"}


async def test_invalid_path_fails_before_policy_and_reads() -> None:
    asked: list[str] = []

    async def record(path: str, kind: PatchKind) -> Verdict:
        asked.append(path)
        return Verdict(Decision.ALLOW, "ok")

    session = InMemorySessionDouble({"a.txt": b"a\n"})
    ops = [v4a.FileOp("delete_file", "a.txt"), v4a.FileOp("create_file", "/etc/x", content="")]
    with pytest.raises(PathRefused, match="absolute paths"):
        await apply_operations(session, ops, allow=record)
    assert asked == [] and session.reads == [] and session.commits == []


async def test_dry_run_writes_nothing_and_shows_the_change(tmp_path: Path) -> None:
    _workspace(tmp_path, {"a.txt": "a\n", "c.txt": "c\n"})
    before = tree(tmp_path)
    patch = THREE_OPS.replace("-this line is not in c.txt", "-c")
    async with await LocalSession.create(tmp_path) as session:
        result = await apply_operations(
            session, envelope.parse(patch), allow=allow_all, dry_run=True
        )
    assert tree(tmp_path) == before
    assert result.dry_run and len(result.changes) == 3
    assert result.summaries[0] == "would update a.txt: 1 hunk, +1 \u22121"
    assert "dry run: no file was changed" in result.text
    assert "--- a/a.txt\n+++ b/a.txt\n" in result.preview and "-a\n+A\n" in result.preview
    assert "--- /dev/null\n+++ b/b.txt\n" in result.preview


async def test_symlink_and_directory_targets_are_refused(tmp_path: Path) -> None:
    _workspace(tmp_path, {"real.txt": "r\n", "dir/x.txt": "x\n"})
    os.symlink("real.txt", tmp_path / "alias.txt")
    before = tree(tmp_path)
    async with await LocalSession.create(tmp_path) as session:
        with pytest.raises(PathRefused, match="symlink"):
            await apply_operations(
                session, [v4a.from_api("update_file", "alias.txt", "@@\n-r\n+R\n")], allow=allow_all
            )
        with pytest.raises(PathRefused, match="directory"):
            await apply_operations(
                session, [v4a.from_api("create_file", "dir", "+x\n")], allow=allow_all
            )
    assert tree(tmp_path) == before


async def test_created_then_deleted_in_one_patch_commits_nothing() -> None:
    session = InMemorySessionDouble({"keep.txt": b"k\n"})
    ops = [v4a.FileOp("create_file", "tmp.txt", content="t\n"), v4a.FileOp("delete_file", "tmp.txt")]
    result = await apply_operations(session, ops, allow=allow_all)
    assert session.commits == [] and result.changes == ()
    with pytest.raises(FileMissing, match="operation 2 of 2"):
        await apply_operations(
            session, [v4a.FileOp("delete_file", "keep.txt"), v4a.FileOp("delete_file", "keep.txt")],
            allow=allow_all,
        )
    assert session.files == {"keep.txt": b"k\n"}


MOVE_INTO_SECRET = """*** Begin Patch
*** Update File: a.txt
*** Move to: {dest}
@@
-a
+moved
*** End Patch
"""


@pytest.mark.parametrize(
    ("dest", "shown"),
    [
        ("secret/a.txt", "secret/a.txt"),  # would replace the protected file
        ("secret/new/b.txt", "secret/new/b.txt"),  # would create one under the protected tree
        ("./secret//a.txt", "secret/a.txt"),  # normalized before the glob is matched
        ("SECRET/a.txt", "SECRET/a.txt"),  # globs fold case, as case-insensitive disks do
    ],
)
async def test_move_destination_under_a_read_only_glob_is_refused(
    tmp_path: Path, dest: str, shown: str
) -> None:
    _workspace(tmp_path, {"a.txt": "a\n", "secret/a.txt": "top secret\n"})
    before = tree(tmp_path)
    asked: list[str] = []

    async def record(path: str, kind: PatchKind) -> Verdict:
        asked.append(path)
        return Verdict(Decision.ALLOW, "ok")

    async with await LocalSession.create(tmp_path) as session:
        with pytest.raises(PathRefused) as info:
            await apply_operations(
                session,
                envelope.parse(MOVE_INTO_SECRET.format(dest=dest)),
                allow=record,
                read_only_globs=("secret/**",),
            )
    message = str(info.value)
    assert f"'{shown}': the path is read-only (matches 'secret/**')" in message, message
    assert "No file was changed." in message
    assert asked == []  # refused before the policy is asked, and before anything is read
    assert tree(tmp_path) == before  # the source is unchanged and nothing landed in secret/
    assert (tmp_path / "a.txt").read_bytes() == b"a\n"
    assert (tmp_path / "secret/a.txt").read_bytes() == b"top secret\n"
    assert not (tmp_path / "secret/new").exists()
