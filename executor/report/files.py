"""Where a run's files are: a run folder, a request log with its neighbours, or the latest run
under the state directory."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AUDIT",
    "REPORT",
    "REQUESTS",
    "SCREENSHOTS",
    "SUMMARY",
    "RunFiles",
    "RunNotFound",
    "latest_run",
    "report_for",
    "resolve",
    "state_dir",
]

REQUESTS, AUDIT, SUMMARY, SCREENSHOTS, REPORT = (
    "requests.jsonl", "audit.jsonl", "summary.json", "screenshots", "report.html")
#: where runs logged before run folders existed: every run appended to one log


class RunNotFound(LookupError):
    """The thing named is not a run folder, a request log, or a run in that log."""


def state_dir() -> Path:
    """Where run folders live: ``$XDG_STATE_HOME/sandloop/runs`` (an absolute XDG_STATE_HOME
    only, as the XDG spec says), else ``~/.local/state/sandloop/runs``."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "sandloop" / "runs"


def latest_run(state: Path | None = None) -> Path | None:
    """The newest run folder under ``state`` (default :func:`state_dir`): the one whose request
    log was written last, i.e. the run that last did something. None when there is none."""
    root = state if state is not None else state_dir()
    best: tuple[float, str] | None = None
    found: Path | None = None
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            log = child / REQUESTS
            with contextlib.suppress(OSError):
                key = (log.stat().st_mtime, child.name)
                if best is None or key > best:
                    best, found = key, child
    return found


@dataclass(frozen=True)
class RunFiles:
    """The files of one run, found from what the person named."""

    requests: Path
    audit: Path | None
    summary: Path | None
    screenshots: Path
    #: where the report goes unless told otherwise (for a shared log, once the run is known:
    #: :func:`report_for`)
    report: Path
    #: the audit log is this run's alone (a run folder), not shared by several runs
    own_audit: bool


def resolve(target: Path | str | None = None, *, state: Path | None = None) -> RunFiles:
    """A run folder, a request log, or None for the latest run (under ``state``)."""
    if target is None:
        target = latest_run(state)
        if target is None:
            where = state if state is not None else state_dir()
            raise RunNotFound(f"no run found: no run folder under {where}")
    path = Path(target)
    if path.is_dir():
        log = path / REQUESTS if (path / REQUESTS).is_file() else None
        if log is None:  # a folder some other harness wrote: its one request log, whatever its name
            logs = [p for p in path.glob("*.jsonl") if p.name != AUDIT]
            if len(logs) != 1:
                raise RunNotFound(f"{path} is not a run folder: it holds no {REQUESTS}")
            log = logs[0]
        path = log
    elif not path.is_file():
        raise RunNotFound(f"{path}: no such run folder or request log")
    folder = path.parent
    own = path.name == REQUESTS
    summary = folder / SUMMARY
    return RunFiles(path, _existing(folder / AUDIT), summary if own and summary.is_file() else None,
                    folder / SCREENSHOTS, folder / REPORT if own else folder / f"{path.stem}.report.html",
                    own)


def report_for(files: RunFiles, run_id: str) -> Path:
    """Where the report of ``run_id`` goes by default: a run folder's ``report.html``; for a log
    several runs share, a file named after the log and the run (the id made safe as a name)."""
    if files.own_audit:
        return files.requests.parent / REPORT
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".") or "run"
    return files.requests.parent / f"{files.requests.stem}.{safe}.report.html"


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None
