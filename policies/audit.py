"""A tamper-evident audit log: one JSON object per line, each chained to the one before.

Every record carries ``seq`` (0, 1, 2…), ``ts`` (UTC, ISO 8601), ``prev`` — the sha256 of the
previous line's bytes (64 zeros for the first) — and ``sha256``, the hash of the record's own
canonical JSON without that field. :func:`verify` recomputes both, so any edit (even one byte,
even in the last line), any line dropped from inside the chain and any reordering is reported.

A chain cannot see its own end: cutting records off the *tail* leaves a valid shorter chain.
:meth:`AuditLog.head` is the anchor for that — the last line's hash and the record count
(:class:`Head`, written ``HASH:COUNT``). A run prints it at its end and keeps it in its run
summary under :data:`SUMMARY_KEY`; :func:`verify` given that head reports a cut tail, and any
change to the records it covers, even a rewrite that recomputed every hash (the head's hash
covers every line before it through ``prev``). Records after the head (a later run appending
to the same log) are chained like the rest, but only a newer head vouches for them. The chain
is not a signature: whoever can rewrite both the log and the place the head is kept can make
them agree, which is why the head belongs somewhere else.

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
import re
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sandloop.hostfiles import HostDir

__all__ = ["GENESIS", "SUMMARY_KEY", "AuditLog", "Check", "Head", "check", "head_from_summary",
           "summary", "verify"]

GENESIS = "0" * 64
#: The key of a run summary JSON that holds the audit log's head at the end of the run, as
#: ``{"sha256": HASH, "records": COUNT}`` (:meth:`Head.to_json`); at the top level or under
#: ``"result"``.
SUMMARY_KEY = "audit_head"
_HASH = re.compile(r"[0-9a-f]{64}")
#: Value types whose JSON text reads back as the very same value.
_PLAIN = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class Head:
    """Where a log stood: the sha256 of its last line's bytes and how many records it held.

    ``records`` may be unknown (a bare hash); the hash alone still pins the chain up to it.
    """

    sha256: str
    records: int | None = None

    def __str__(self) -> str:
        return self.sha256 if self.records is None else f"{self.sha256}:{self.records}"

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "records": self.records}

    @classmethod
    def parse(cls, text: str) -> Head:
        """``HASH`` or ``HASH:COUNT``; ValueError says what is wrong."""
        digest, sep, count = text.strip().lower().partition(":")
        if not _HASH.fullmatch(digest):
            raise ValueError(f"{text!r}: the head is a sha256 (64 hex digits), optionally :COUNT")
        if not sep:
            return cls(digest)
        if not count.isdigit():
            raise ValueError(f"{text!r}: COUNT must be a whole number of records")
        return cls(digest, int(count))

    @classmethod
    def from_json(cls, data: Any) -> Head:
        """The form :meth:`to_json` writes (or the ``HASH:COUNT`` string); ValueError otherwise."""
        if isinstance(data, str):
            return cls.parse(data)
        if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
            raise ValueError(f"{SUMMARY_KEY} must be {{\"sha256\": HASH, \"records\": COUNT}}")
        records = data.get("records")
        if records is not None and (not isinstance(records, int) or isinstance(records, bool)
                                    or records < 0):
            raise ValueError(f"{SUMMARY_KEY}.records must be a whole number")
        head = cls.parse(data["sha256"])
        return cls(head.sha256, records)


def head_from_summary(path: str | Path) -> Head:
    """The head a run summary JSON keeps under :data:`SUMMARY_KEY` (top level or ``result``).

    OSError when the file cannot be read, ValueError when it holds no valid head.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    for holder in (data, data.get("result") if isinstance(data, dict) else None):
        if isinstance(holder, dict) and SUMMARY_KEY in holder:
            try:
                return Head.from_json(holder[SUMMARY_KEY])
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
    raise ValueError(f"{path}: no {SUMMARY_KEY!r} key (at the top level or under 'result')")


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
        # Opened once, written without following links: a log a command could reach is refused,
        # never redirected (sandloop.hostfiles).
        self._dir = HostDir(self.path.parent)
        self._lock = threading.Lock()
        self._last, self._seq = GENESIS, 0
        if self._dir.exists(self.path.name):
            lines = self._dir.read(self.path.name).splitlines()
            if lines:
                self._last = _line_hash(lines[-1])
                self._seq = len(lines)

    def head(self) -> Head:
        """The chain's end as of the last record written: keep it somewhere the log is not
        (the run's summary, its output) so that :func:`verify` can tell a cut tail."""
        with self._lock:
            return Head(self._last, self._seq)

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record; returns it as written."""
        with self._lock:
            record: dict[str, Any] = {
                **fields,
                "kind": kind,
                "seq": self._seq,
                "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
                "prev": self._last,
            }
            record.pop("sha256", None)  # never hashed: it is the hash
            if all(type(v) in _PLAIN for v in record.values()):
                # Plain values read back exactly as written: the canonical text of the record
                # is what verify() will hash, without the round trip through json.loads (that
                # round trip was most of a record's cost, and every command writes two).
                record["sha256"] = hashlib.sha256(_canonical(record).encode()).hexdigest()
            else:  # tuples, enums, paths, non-string keys: hash what a reader will see
                record["sha256"] = _self_hash(json.loads(_canonical(record)))
            line = _canonical(record).encode()
            self._dir.append(self.path.name, line + b"\n")
            self._last, self._seq = _line_hash(line), self._seq + 1
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


@dataclass(frozen=True)
class Check:
    """What :func:`check` found: the problems (none: intact), the log's own head now, and, when
    a head was given, how many records follow it (written after it was taken)."""

    problems: list[str]
    head: Head
    after_head: int | None = None


def check(path: str | Path, *, head: Head | str | None = None) -> Check:
    """Verify the chain, and, given the ``head`` kept at the end of a run, that the log still
    holds every record up to it unchanged (a cut tail, or a rewrite, shows here).

    A log is written with its first record, so a run that decided nothing has none: given a
    head, a missing file is that empty chain (valid at the empty head, a removed log at any
    other); without one there is nothing to tell a wrong path from, and OSError is raised."""
    problems: list[str] = []
    prev = GENESIS
    hashes = [GENESIS]  # hashes[n]: the hash of line n (0: before the first line)
    path = Path(path)
    missing = head is not None and not path.exists()
    for number, line, data in [] if missing else _records(path):
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
        hashes.append(prev)
    count = len(hashes) - 1
    now = Head(prev, count)
    if head is None:
        return Check(problems, now)
    expected = Head.parse(head) if isinstance(head, str) else head
    at = expected.records
    if at is None:  # a bare hash: find the line it names
        at = hashes.index(expected.sha256) if expected.sha256 in hashes else None
        if at is None:
            problems.append(f"no line of the log hashes to the head {expected.sha256}: the log was "
                            "cut before the head, or the records up to it were changed")
            return Check(problems, now)
    elif at > count:
        problems.append(f"the log is missing, the head {expected} says it held {at} record(s): it was removed"
                        if missing else f"the log holds {count} records, the head {expected} says {at}: "
                        f"{at - count} record(s) were removed from the end")
        return Check(problems, now)
    if hashes[at] != expected.sha256:
        problems.append(f"line {at}'s hash is {hashes[at]}, the head says {expected.sha256}: "
                        f"the records up to the head were changed or rewritten")
    return Check(problems, now, count - at)


def verify(path: str | Path, *, head: Head | str | None = None) -> list[str]:
    """Every problem in the log (an empty list means the chain is intact); see :func:`check`."""
    return check(path, head=head).problems


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
        # "action" names what was decided ("what" in logs written before it was renamed)
        action, subject = data.get("action") or data.get("what"), data.get("subject")
        if data.get("kind") == "decision":
            decisions += 1
            decision = str(data.get("decision"))
            per_rule[f"{data.get('rule_id') or 'shell.default'} → {decision}"] += 1
            if action == "shell" and isinstance(subject, str):
                if decision == "deny":
                    denied.append(subject)
                # asked about: the policy said prompt, whoever answered and however
                if decision == "prompt" or data.get("policy_decision") == "prompt":
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
