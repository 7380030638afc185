from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from policies.audit import GENESIS, SUMMARY_KEY, AuditLog, Head, check, head_from_summary, summary, verify
from policies.engine import load_policy


def _log(path: Path, n: int = 5) -> AuditLog:
    log = AuditLog(path)
    engine = load_policy("default")
    for i in range(n):
        command = ["ls", "git push", "rm -rf /", "eval x", "pytest"][i % 5]
        v = engine.shell(command)
        log.record("decision", action="shell", subject=command, decision=v.decision,
                   rule_id=v.rule_id, call_id=f"call_{i}", response_id="resp_1",
                   policy_sha256=engine.sha256)
    return log


def test_intact_log_verifies_and_records_carry_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = _log(path)
    assert verify(path) == []
    assert verify(path, head=log.head()) == []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["prev"] == GENESIS
    assert [r["seq"] for r in records] == [0, 1, 2, 3, 4]
    assert records[1]["decision"] == "prompt" and records[1]["rule_id"] == "git-push"
    assert {"ts", "call_id", "response_id", "policy_sha256", "sha256"} <= set(records[0])


def test_reopening_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path, 2)
    AuditLog(path).record("outcome", action="patch", subject="a.py", outcome="completed")
    assert verify(path) == []


@pytest.mark.parametrize("line_index", [0, 2, 4])
def test_one_byte_edit_is_caught(tmp_path: Path, line_index: int) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    target = lines[line_index]
    pos = target.index(b'"call_') + 6
    lines[line_index] = target[:pos] + b"X" + target[pos + 1 :]  # one byte
    path.write_bytes(b"".join(lines))
    problems = verify(path)
    assert problems and any(f"line {line_index + 1}:" in p for p in problems)


def test_dropped_line_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + lines[3:]))
    problems = verify(path)
    assert any("line 3" in p for p in problems)


def test_dropped_last_line_needs_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = _log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    assert verify(path) == []  # a shorter chain is still a chain…
    assert verify(path, head=log.head())  # …which the head kept elsewhere exposes


def test_swapped_pair_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"".join(lines))
    problems = verify(path)
    assert any("line 2" in p for p in problems) and any("line 3" in p for p in problems)


def test_garbage_line_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path, 2)
    with path.open("ab") as fh:
        fh.write(b"not json\n")
    assert any("not a JSON object" in p for p in verify(path))


async def test_concurrent_records_from_one_loop_stay_chained(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)

    async def worker(n: int) -> None:
        for i in range(20):
            log.record("decision", action="function", subject=f"f{n}", decision="allow",
                       call_id=f"{n}-{i}")
            await asyncio.sleep(0)

    await asyncio.gather(*(worker(n) for n in range(5)))
    assert len(path.read_text().splitlines()) == 100
    assert verify(path, head=log.head()) == []


def test_summary(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = _log(path)
    log.record("decision", action="url", subject="https://example.com/a", decision="allow",
               rule_id="browser.allow_domains")
    log.record("decision", action="url", subject="http://169.254.169.254/", decision="deny",
               rule_id="browser.block_domains")
    log.record("outcome", action="patch", subject="src/a.py", outcome="completed")
    log.record("outcome", action="patch", subject="src/b.py", outcome="failed")
    data = summary(path)
    assert data["decisions"] == 7 and data["records"] == 9
    assert data["per_rule"]["read-tools → allow"] == 1
    assert data["per_rule"]["shell.default → prompt"] == 1  # eval x
    assert data["prompted_commands"] == ["git push", "rm -rf /", "eval x"]
    assert data["denied_commands"] == []
    assert data["files_changed"] == ["src/a.py"]
    assert data["domains_visited"] == {"example.com": 1}


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_head_is_the_last_line_hash_and_the_record_count(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    assert AuditLog(path).head() == Head(GENESIS, 0)
    log = _log(path)
    head = log.head()
    assert head == Head(hashlib.sha256(_lines(path)[-1].rstrip(b"\n")).hexdigest(), 5)
    assert AuditLog(path).head() == head  # reopening finds the same end
    assert check(path).head == head
    assert Head.parse(str(head)) == head and str(head).endswith(":5")
    assert Head.from_json(head.to_json()) == head


def test_a_cut_tail_shows_only_against_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    head = _log(path).head()
    path.write_bytes(b"".join(_lines(path)[:3]))
    assert verify(path) == []  # what a chain cannot see by itself
    problems = verify(path, head=head)
    assert problems == [f"the log holds 3 records, the head {head} says 5: 2 record(s) were "
                        "removed from the end"]
    # a bare hash (no count) finds no line of its own either
    assert any("no line of the log hashes to the head" in p for p in verify(path, head=Head(head.sha256)))


def test_a_rewrite_with_recomputed_hashes_shows_only_against_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    head = _log(path).head()
    forged = tmp_path / "forged.jsonl"
    log = AuditLog(forged)  # the same number of records, each chained properly
    for line in _lines(path):
        record = json.loads(line)
        for key in ("kind", "seq", "ts", "prev", "sha256"):
            record.pop(key)
        record["subject"] = "ls" if record["subject"] == "rm -rf /" else record["subject"]
        log.record("decision", **record)
    forged.replace(path)
    assert verify(path) == []
    assert any("changed or rewritten" in p for p in verify(path, head=head))
    assert any("no line of the log hashes" in p for p in verify(path, head=Head(head.sha256)))


def test_an_edit_with_its_own_hash_recomputed_breaks_the_next_link(tmp_path: Path) -> None:
    """Whoever edits a record can recompute its sha256 field: the next line's prev still holds."""
    path = tmp_path / "audit.jsonl"
    _log(path)
    lines = _lines(path)
    record = json.loads(lines[2])
    record["subject"] = "ls"
    body = {k: v for k, v in record.items() if k != "sha256"}
    record["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                                 ensure_ascii=False).encode()).hexdigest()
    lines[2] = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    problems = verify(path)
    assert problems == ["line 4: does not follow line 3 (a line before it was changed, removed or moved)"]


def test_records_after_the_head_are_counted_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = _log(path, 3)
    head = log.head()
    log.record("outcome", action="patch", subject="a.py", outcome="completed")
    log.record("outcome", action="patch", subject="b.py", outcome="completed")
    found = check(path, head=head)
    assert found.problems == [] and found.after_head == 2 and found.head.records == 5
    assert check(path, head=Head(head.sha256)).after_head == 2  # a bare hash finds its line


def test_a_cut_tail_refilled_to_the_same_count_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    head = _log(path).head()
    path.write_bytes(b"".join(_lines(path)[:3]))
    log = AuditLog(path)
    log.record("decision", action="shell", subject="ls", decision="allow")
    log.record("decision", action="shell", subject="ls", decision="allow")
    assert verify(path) == []
    assert [p for p in verify(path, head=head) if "line 5's hash" in p]


@pytest.mark.parametrize("text", ["", "abc", "0" * 63, "0" * 64 + ":", "0" * 64 + ":-1", "0" * 64 + ":x"])
def test_malformed_heads_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Head.parse(text)


def test_head_from_a_run_summary(tmp_path: Path) -> None:
    head = Head("a" * 64, 7)
    top, nested, none, bad = (tmp_path / f"{n}.json" for n in ("top", "nested", "none", "bad"))
    top.write_text(json.dumps({"run_id": "r", SUMMARY_KEY: head.to_json()}))
    nested.write_text(json.dumps({"run_id": "r", "result": {SUMMARY_KEY: head.to_json()}}))
    none.write_text(json.dumps({"run_id": "r", "result": {}}))
    bad.write_text(json.dumps({SUMMARY_KEY: {"sha256": "a" * 64, "records": "7"}}))
    assert head_from_summary(top) == head == head_from_summary(nested)
    for path in (none, bad):
        with pytest.raises(ValueError, match=path.name):
            head_from_summary(path)
    with pytest.raises(OSError):
        head_from_summary(tmp_path / "missing.json")


def test_plain_and_rich_records_hash_what_a_reader_sees(tmp_path: Path) -> None:
    # Records of plain values are hashed from their text at once, the others after a round
    # trip through JSON: both must verify, whatever the values.
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record("outcome", action="shell", subject="é \\ \"q\" \u2028", duration_s=0.1 + 0.2, exit_code=None,
               ok=True, big=2**70, nan=float("nan"))
    log.record("outcome", action="shell", subject="x", sha256="planted", paths=("a", Path("b")),
               counts={1: "one", 10: "ten", 2: "two"})
    log.record("decision", action="shell", subject="y", decision=load_policy("default").shell("ls").decision)
    assert verify(path) == []
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert records[1]["sha256"] != "planted" and records[1]["paths"] == ["a", "b"]
