"""``sandloop policy explain --stdin``: one verdict per input record, in order, from one start —
the installed console script, fed as a script would feed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("sandloop")
LINES = ["ls -la", "git push origin main", "rm -rf build", "echo x > .git/config", "", "eval $X"]


def _explain(state: Path, *args: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run([str(SCRIPT), "policy", "explain", "default", *args], input=data, capture_output=True,
                          env=env, timeout=300)


def _single(state: Path, line: str) -> dict[str, object]:
    done = _explain(state, "--json", "--", line, data=b"")
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_one_json_line_per_input_line_as_explain_gives_each(state_home: Path) -> None:
    done = _explain(state_home, "--stdin", "--json", data="\n".join(LINES).encode() + b"\n")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [r["input"] for r in records] == LINES
    assert records == [_single(state_home, line) for line in LINES]
    assert [r["verdict"]["decision"] for r in records[:4]] == ["allow", "prompt", "prompt", "deny"]


def test_plain_lines_and_nul_separated_records(state_home: Path) -> None:
    done = _explain(state_home, "--stdin", data=b"ls\ngit push\n")
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and len(lines) == 2
    assert lines[0].startswith("'ls' → allow by read-tools") and lines[1].startswith("'git push' → prompt by git-push")
    # -z: a record may hold a newline (a heredoc), and is still one verdict
    heredoc = "cat <<EOF > .git/hooks/pre-commit\nrm -rf /\nEOF"
    done = _explain(state_home, "-z", "--json", data=f"ls\0{heredoc}\0".encode())
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert done.returncode == 0 and [r["input"] for r in records] == ["ls", heredoc]
    assert records[1]["verdict"]["decision"] == "deny"


def test_a_record_that_is_not_utf8_is_reported_in_place(state_home: Path) -> None:
    done = _explain(state_home, "--stdin", "--json", data=b"ls\n\xff\xfe\nrm -rf x\n")
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert done.returncode == 2
    assert records[0]["input"] == "ls" and records[1] == {"record": 2, "error": "record 2 is not UTF-8: not decided"}
    assert records[2]["input"] == "rm -rf x"


def test_stdin_is_one_of_the_subjects(state_home: Path) -> None:
    done = _explain(state_home, "--stdin", "--", "ls", data=b"ls\n")
    assert done.returncode == 2 and b"exactly one of" in done.stderr


def test_an_unusable_state_folder_costs_the_snapshot_only(tmp_path: Path) -> None:
    below_a_file = tmp_path / "file"
    below_a_file.write_text("")
    done = _explain(below_a_file / "state", "--", "git push", data=b"")
    assert done.returncode == 0 and done.stderr == b""
    assert b"prompt by git-push" in done.stdout
