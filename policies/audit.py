"""A tamper-evident audit log: one JSON object per line, each chained to the one before.

Every record carries ``seq`` (0, 1, 2…), ``ts`` (UTC, ISO 8601), ``prev`` — the sha256 of the
previous line's bytes (64 zeros for the first) — and ``sha256``, the hash of the record's own
canonical JSON without that field. :func:`verify` recomputes both, so any edit (even one byte,
even in the last line), any dropped line and any reordering is reported. Truncating the *tail*
leaves a valid shorter chain: pass the head hash kept elsewhere (``AuditLog.head``, printed at
the end of a run) to :func:`verify` to detect that too. The chain is not a signature: someone
who rewrites the whole file can rebuild it, which is why the head belongs somewhere else.

Field conventions read by :func:`summary` (records may carry any other JSON fields):
``kind`` ("decision", "outcome", "request"…), ``action`` ("shell", "patch", "url", "mcp",
"function"), ``subject`` (the command line, path, URL, "server/tool" or function name),
``decision``, ``rule_id``, ``outcome``, ``call_id``, ``response_id``, ``policy_sha256``.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["GENESIS", "AuditLog", "summary", "verify"]

GENESIS = "0" * 64


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot log a {type(value).__name__}")


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_jsonable)


def _line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def _self_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


class AuditLog:
    """Appends records to ``path``, continuing the chain of whatever the file already holds.

    Appends are synchronous and whole-line (one ``write`` on a file opened for appending) under a
    lock, so records from one asyncio loop — or several threads — never interleave.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.head, self._seq = GENESIS, 0
        if self.path.exists():
            lines = self.path.read_bytes().splitlines()
            if lines:
                self.head = _line_hash(lines[-1])
                self._seq = len(lines)

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record; returns it as written."""
        with self._lock:
            record: dict[str, Any] = {
                **fields,
                "kind": kind,
                "seq": self._seq,
                "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
                "prev": self.head,
            }
            record["sha256"] = _self_hash(json.loads(_canonical(record)))
            line = _canonical(record).encode()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(line + b"\n")
            self.head, self._seq = _line_hash(line), self._seq + 1
            return record


def _records(path: Path) -> list[tuple[int, bytes, dict[str, Any] | None]]:
    out: list[tuple[int, bytes, dict[str, Any] | None]] = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        out.append((number, line, data if isinstance(data, dict) else None))
    return out


def verify(path: str | Path, *, head: str | None = None) -> list[str]:
    """Every problem in the log (an empty list means the chain is intact)."""
    problems: list[str] = []
    prev = GENESIS
    records = _records(Path(path))
    for number, line, data in records:
        if data is None:
            problems.append(f"line {number}: not a JSON object")
        else:
            if data.get("sha256") != _self_hash(data):
                problems.append(f"line {number}: the record was changed (its sha256 does not match)")
            if data.get("prev") != prev:
                problems.append(f"line {number}: does not follow line {number - 1} (a line before it"
                                " was changed, removed or moved)")
            if data.get("seq") != number - 1:
                problems.append(f"line {number}: seq is {data.get('seq')!r}, expected {number - 1}"
                                " (lines were removed or reordered)")
        prev = _line_hash(line)
    if head is not None and prev != head:
        problems.append(f"the last line's hash is {prev}, expected {head} (lines were removed from "
                        "the end, or added)")
    return problems


def summary(path: str | Path) -> dict[str, Any]:
    """Decisions per rule, denied and prompted commands, files changed, domains visited."""
    per_rule: Counter[str] = Counter()
    denied: list[str] = []
    prompted: list[str] = []
    files: list[str] = []
    domains: Counter[str] = Counter()
    decisions = 0
    for _, _, data in _records(Path(path)):
        if data is None:
            continue
        action, subject = data.get("action"), data.get("subject")
        if data.get("kind") == "decision":
            decisions += 1
            decision = str(data.get("decision"))
            per_rule[f"{data.get('rule_id') or 'shell.default'} → {decision}"] += 1
            if action == "shell" and isinstance(subject, str):
                if decision == "deny":
                    denied.append(subject)
                elif decision == "prompt":
                    prompted.append(subject)
            if action == "url" and decision == "allow" and isinstance(subject, str):
                host = urlsplit(subject).hostname
                if host:
                    domains[host] += 1
        elif (data.get("kind") == "outcome" and action == "patch"
              and data.get("outcome") in ("completed", "ok") and isinstance(subject, str)
              and subject not in files):
            files.append(subject)
    return {
        "records": sum(1 for _ in _records(Path(path))),
        "decisions": decisions,
        "per_rule": dict(per_rule.most_common()),
        "denied_commands": denied,
        "prompted_commands": prompted,
        "files_changed": files,
        "domains_visited": dict(domains.most_common()),
    }
