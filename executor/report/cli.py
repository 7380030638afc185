"""``sandloop report [RUN] [-o FILE] [--open]``: write a run's HTML report and print its path."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from typing import Any

from executor.report import RunNotFound, write_report

__all__ = ["cmd_report", "register"]

DESCRIPTION = """\
Write one self-contained HTML file showing a run: the header (task, model, policy, exit,
budgets used, decision counts, the audit chain's verification) and every turn, every call with
the policy's decision beside it, shell output, patch diffs, and computer actions drawn on their
screenshots. The file loads nothing from anywhere; screenshots are inside it.

RUN is a run folder (requests.jsonl, audit.jsonl, screenshots/), a request log (its audit.jsonl
and screenshots/ are found beside it), or nothing for the latest run under
$XDG_STATE_HOME/sandloop/runs (default ~/.local/state/sandloop/runs), then reports/live-requests.jsonl.
"""


def cmd_report(args: argparse.Namespace) -> int:
    try:
        path = write_report(args.run, args.output, run_id=args.run_id)
    except RunNotFound as exc:
        print(f"sandloop report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandloop report: {exc}", file=sys.stderr)
        return 1
    print(path)
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0


def register(sub: Any) -> None:
    """Add ``report`` to the ``sandloop`` subcommands."""
    p = sub.add_parser("report", help="write a run's HTML report", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", nargs="?", help="a run folder or request log (default: the latest run)")
    p.add_argument("-o", "--output", help="where to write it (default: report.html in the run folder)")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    p.add_argument("--run-id", help="which run of a request log several runs share (default: the last)")
    p.set_defaults(func=cmd_report)
