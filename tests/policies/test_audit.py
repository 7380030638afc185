from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from policies.audit import GENESIS, AuditLog, summary, verify
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
    assert verify(path, head=log.head) == []
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
    assert verify(path, head=log.head)  # …which the head kept elsewhere exposes


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
    assert verify(path, head=log.head) == []


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
