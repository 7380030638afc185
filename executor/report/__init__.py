"""Session reports: one self-contained HTML file per run, for a person to look at.

:func:`write_report` reads a run (a run folder, a request log, or the latest run under the state
directory), lays it out as a timeline of turns and calls with the policy's decision beside each,
and writes one HTML file that loads nothing from anywhere (see :mod:`executor.report.render`).
``sandloop report`` (:mod:`executor.report.cli`) is the command line over it.
"""

from __future__ import annotations

import os
from pathlib import Path

from executor.report.files import RunFiles, RunNotFound, latest_run, resolve, state_dir
from executor.report.load import load_run
from executor.report.model import Run
from executor.report.render import render

__all__ = ["Run", "RunFiles", "RunNotFound", "latest_run", "load_run", "render", "resolve",
           "state_dir", "write_report"]


def write_report(run: Path | str | None = None, output: Path | str | None = None, *,
                 run_id: str | None = None, state: Path | None = None) -> Path:
    """Write the report of ``run`` (default: the latest) to ``output`` (default:
    ``report.html`` in the run folder) and return its path. The file is replaced whole, never
    left half-written."""
    loaded = load_run(run, run_id=run_id, state=state)
    target = Path(output) if output is not None else loaded.files.report
    html = render(loaded)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(target)
    return target
