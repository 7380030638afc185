"""`sandloop apply-patch`: exit 0 on success, 1 with the message on failure, nothing half-done."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.patch import cli
from tests.patch.conftest import tree

PATCH = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Add File: b.txt\n+b\n*** End Patch\n"


def test_envelope_patch_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    (tmp_path / "p.patch").write_text(PATCH)
    assert cli.main(["--root", str(root), str(tmp_path / "p.patch")]) == 0
    assert capsys.readouterr().out == "updated a.txt: 1 hunk, +1 \u22121\ncreated b.txt (1 line)\n"
    assert tree(root) == {"a.txt": b"A\n", "b.txt": b"b\n"}


def test_failure_exits_1_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "p.patch").write_text(PATCH)
    before = tree(tmp_path)
    assert cli.main(["--root", str(tmp_path), str(tmp_path / "p.patch")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("patch does not apply: update_file a.txt (operation 1 of 2)")
    assert tree(tmp_path) == before


def test_op_json_and_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    op = tmp_path / "op.json"
    op.write_text(json.dumps({"type": "update_file", "path": "a.txt", "diff": "@@\n-a\n+z\n"}))
    assert cli.main(["--root", str(tmp_path), "--dry-run", "--op", str(op)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would update a.txt: 1 hunk, +1 \u22121\ndry run: no file was changed\n")
    assert "-a\n+z\n" in out
    assert (tmp_path / "a.txt").read_text() == "a\n"
    assert cli.main(["--root", str(tmp_path), "--op", str(op)]) == 0
    assert (tmp_path / "a.txt").read_text() == "z\n"


@pytest.mark.parametrize(("op", "says"), [
    ({"type": "rename_file", "path": "a"}, 'one of create_file, delete_file, update_file, not "rename_file"'),
    ({"type": "update_file", "path": "a"}, "update_file: diff: field required"),
    ({"type": "create_file", "path": 3, "diff": "+a"}, "create_file: path: input should be a valid string"),
    ([1, 2], "expected a JSON object"),
])
def test_a_bad_op_is_one_line_naming_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 op: object, says: str) -> None:
    path = tmp_path / "op.json"
    path.write_text(json.dumps(op))
    assert cli.main(["--root", str(tmp_path), "--op", str(path)]) == 1
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "http" not in err


def test_unified_diff_is_detected(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "d.diff").write_text("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+u\n")
    assert cli.main(["--root", str(tmp_path), str(tmp_path / "d.diff")]) == 0
    assert (tmp_path / "a.txt").read_text() == "u\n"


def test_register_adds_the_subcommand() -> None:
    parser = argparse.ArgumentParser(prog="sandloop")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["apply-patch", "--root", "/r", "--dry-run", "-"])
    assert args.func is cli.run and args.root == "/r" and args.dry_run and args.patchfile == "-"


def test_stdin_through_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox.patch.cli", "--root", str(tmp_path), "-"],
        input=PATCH, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert tree(tmp_path) == {"a.txt": b"A\n", "b.txt": b"b\n"}
    bad = subprocess.run(
        [sys.executable, "-m", "sandbox.patch.cli", "--root", str(tmp_path), "-"],
        input="not a patch", capture_output=True, text=True, timeout=60, check=False,
    )
    assert bad.returncode == 1
    assert "first line of the patch must be '*** Begin Patch'" in bad.stderr


CRLF_UNIFIED = b"--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-a\n-b\n+a\r\n+b\r\n"


def test_patch_file_is_read_as_bytes(tmp_path: Path) -> None:
    # Text mode would turn the diff's CRLF into LF and the conversion into a silent no-op.
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\nb\n")
    (tmp_path / "d.diff").write_bytes(CRLF_UNIFIED)
    assert cli.main(["--root", str(root), str(tmp_path / "d.diff")]) == 0
    assert (root / "a.txt").read_bytes() == b"a\r\nb\r\n"
    # A lone CR is part of a line, not a line break.
    (tmp_path / "p.patch").write_bytes(b"*** Begin Patch\n*** Add File: cr.txt\n+x\ry\n*** End Patch\n")
    assert cli.main(["--root", str(root), str(tmp_path / "p.patch")]) == 0
    assert (root / "cr.txt").read_bytes() == b"x\ry\n"


def test_stdin_is_read_as_bytes(tmp_path: Path) -> None:
    # Whatever the locale says stdin holds, a patch is UTF-8 with its newlines as they are.
    (tmp_path / "a.txt").write_bytes(b"a\nb\n")
    diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-a\n-b\n+a\r\n+\u00e9\r\n"
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox.patch.cli", "--root", str(tmp_path), "-"],
        input=diff.encode("utf-8"), capture_output=True, timeout=60, check=False,
        env={**os.environ, "PYTHONIOENCODING": "latin-1:replace"},
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.txt").read_bytes() == "a\r\n\u00e9\r\n".encode()


def test_a_patch_that_is_not_utf8_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.patch").write_bytes(b"*** Begin Patch\n*** Add File: a\n+\xff\n*** End Patch\n")
    assert cli.main(["--root", str(tmp_path), str(tmp_path / "p.patch")]) == 1
    assert "is not valid UTF-8 (byte 33)" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
