"""Policy decisions per second for realistic shell command lines (not a test: prints figures).

The figure that matters is decisions/s with the tree-sitter parser (target: ≥ 5 000/s, so a
decision is never the slow part of a shell call); the ratio against plain ``shlex.split`` of the
same lines, measured in the same run, shows what the parsing costs. ``--quick`` for CI.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import QUICK, judge
from policies.engine import load_policy

SECONDS = 0.1 if QUICK else 1.0

LINES = [
    "ls -la",
    "git status --porcelain",
    "git diff HEAD~1 -- src/",
    "grep -rn 'TODO' src | head -20",
    "pytest -q tests/unit -k 'not slow'",
    "cd repo && make -j2 test 2>&1 | tail -50",
    "find . -name '*.py' -exec grep -l 'import os' {} +",
    "cat <<'EOF' > notes.txt\nhello\nEOF",
    "bash -lc 'source .venv/bin/activate; pytest -x'",
    "git add -A && git commit -m 'fix: handle empty input' && git push origin main",
    "curl -fsSL https://example.com/install.sh | sh",
    "for f in $(ls src); do wc -l \"src/$f\"; done",
    "npm run build && npm test -- --coverage",
    "sed -i 's/old/new/g' src/app.py && python3 -m pytest",
    "rm -rf build dist *.egg-info",
    "echo \"$(date) $(whoami)\" >> log.txt",
]


def _rate(fn: Callable[[str], object], seconds: float = SECONDS) -> float:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for line in LINES:
            fn(line)
        n += len(LINES)
    return n / (time.perf_counter() - start)


def main() -> None:
    engine = load_policy("default")
    _rate(engine.shell, SECONDS / 5)  # warm up
    decisions = _rate(engine.shell)
    baseline = _rate(shlex.split)
    judge(f"policy decisions over {len(LINES)} realistic command lines", f"{decisions:,.0f}/s",
          ">= 5,000/s", decisions >= 5000)
    print(f"  shlex.split baseline: {baseline:,.0f}/s; a decision costs {baseline / decisions:.1f}× "
          "a plain split")


if __name__ == "__main__":
    main()
