"""Policy decisions per second for realistic shell command lines (not a test: prints figures).

The figure that matters is decisions/s with the tree-sitter parser, per second of CPU (target:
≥ 5 000/s, so a decision is never the slow part of a shell call); the ratio against plain ``shlex.split`` of the
same lines, measured in the same run, shows what the parsing costs.

Long lines: a decision's time grows with the line and no faster (target: a line 4× as long costs
≤ 4.4× the time — linear, with a tenth for noise), for several shapes of line (many words, many
commands, pipes, `cd`s with writes, quoted text), each measured against its own quarter-length
line in the same rounds (CPU time; the parser's own ratio on the same lines is printed as the
floor, and the target judges sandloop's part above it). Past the bounds (64 KiB, 10 000 syntax
nodes, 100 levels of nesting) a line is not followed: its time is printed beside the longest
line within them. ``--quick`` for CI.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import QUICK, judge, median, rounds
from policies import shell_parse
from policies.engine import Decider, load_policy

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
    """Lines per second through ``fn``. Each pass makes every line new (a comment with the
    pass's number on a line before it): the engine and the parser keep what they decided, and a figure made of
    cache hits would say nothing about deciding."""
    n, start = 0, time.process_time()  # CPU time, as below: not the wait for a core
    while time.process_time() - start < seconds:
        for line in LINES:
            fn(f"# {n}\n{line}")
        n += len(LINES)
    return n / (time.process_time() - start)


# Each shape at its base size: over shell_parse.CACHED_LINE_MAX characters (so no decision comes
# from a cache) and, at 4×, under MAX_NODES (so it is still followed, not cut off).
SHAPES: dict[str, Callable[[int], str]] = {
    "words": lambda n: "echo " + "word " * n,
    "commands": lambda n: "ls -la src; " * n,
    "pipes": lambda n: "cat f" + " | grep x" * n,
    "cd and writes": lambda n: "".join(f"cd dir{i}; echo x > file{i}; " for i in range(n)),
    "quoted": lambda n: 'echo "' + "abc $x " * n + '"',
}
BASE = {"words": 1000, "commands": 400, "pipes": 460, "cd and writes": 150, "quoted": 600}


def _cpu(fn: Callable[[str], object], line: str) -> float:
    """CPU seconds of one call: on a loaded machine the wall clock also counts the time this
    process waited for a core, which has nothing to do with the line."""
    start = time.process_time()
    fn(line)
    return time.process_time() - start


def _followed(line: str) -> bool:
    """Is the line decided command by command (not cut off as past a bound: one UNKNOWN)?"""
    commands = shell_parse.parse(line)
    return len(commands) > 1 or commands[0].unknown is None


def _long_lines(engine: Decider) -> None:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    parser = Parser(Language(tree_sitter_bash.language()))

    def parse(line: str) -> object:
        return parser.parse(line.encode())

    for name, shape in SHAPES.items():
        short, long = shape(BASE[name]), shape(4 * BASE[name])
        assert len(short) > shell_parse.CACHED_LINE_MAX and _followed(long), name
        # Each round times both lines back to back, in turns, and the ratios are taken per round:
        # the machine's load, which moves over seconds, falls on both sides of a ratio alike.
        # The parser (tree-sitter, C) alone on the same lines is the floor: its own time per
        # byte grows on long inputs, and what the target judges is sandloop's part above it.
        whole, floor, own, took = [], [], [], []
        for i in range(rounds(15)):
            pair = (short, long) if i % 2 else (long, short)
            decided = {line: _cpu(engine.shell, line) for line in pair}
            parsed = {line: _cpu(parse, line) for line in pair}
            whole.append(decided[long] / decided[short])
            floor.append(parsed[long] / parsed[short])
            own.append((decided[long] - parsed[long]) / max(decided[short] - parsed[short], 1e-6))
            took.append((decided[short], decided[long]))
        ratio = median(own)
        judge(f"a line 4× as long, {name}",
              f"sandloop's part {ratio:.2f}× the time; whole decision {median(whole):.2f}× "
              f"({median([t for _, t in took]) * 1000:.1f} vs {median([t for t, _ in took]) * 1000:.1f} ms "
              f"CPU; {len(long)} vs {len(short)} bytes), the parser alone {median(floor):.2f}×",
              "≤ 4.4×", ratio <= 4.4)
    within = "echo " + "w " * (shell_parse.MAX_NODES - 10)
    past = {"1 MiB": "echo " + "w" * (1 << 20), f"over {shell_parse.MAX_NODES} nodes": "echo " + "w " * 30_000,
            f"nested over {shell_parse.MAX_NESTING} levels": "$(" * 2000 + "ls" + ")" * 2000}
    base = median([_cpu(engine.shell, within) for _ in range(rounds(5))])
    figures = ", ".join(f"{what} {median([_cpu(engine.shell, line) for _ in range(rounds(5))]) * 1000:.1f} ms"
                        for what, line in past.items())
    print(f"  lines past the bounds, not followed (asked about or denied): {figures}; the longest "
          f"line within them ({len(within)} bytes) {base * 1000:.1f} ms")


def main() -> None:
    engine = load_policy("default")
    _rate(engine.shell, SECONDS / 5)  # warm up
    decisions = _rate(engine.shell)
    baseline = _rate(shlex.split)
    judge(f"policy decisions over {len(LINES)} realistic command lines", f"{decisions:,.0f}/s",
          ">= 5,000/s", decisions >= 5000)
    print(f"  shlex.split baseline: {baseline:,.0f}/s; a decision costs {baseline / decisions:.1f}× "
          "a plain split")
    _long_lines(engine)


if __name__ == "__main__":
    main()
