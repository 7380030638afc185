"""Command-line start-up: what a short command costs against a bare interpreter (not a test).

Each command is the installed ``sandloop`` console script run as a new process, exactly as a
person or a script runs it, against ``python -c pass`` of the same interpreter in the same
rounds (interleaved, so load on the machine falls on every side alike). Every side runs from
compiled bytecode, as an installed package does: the children get a private
``PYTHONPYCACHEPREFIX`` (never the checkout's folders) and a first round that is not counted.

Targets (wall time, medians): ``sandloop --version`` ≤ 3× the bare interpreter,
``sandloop policy explain default -- ls`` ≤ 5× (it decides from the policy's snapshot, kept by
the uncounted first run under a private state directory, and parses the command). For scale,
not judged: the same explain without a snapshot (an unusable state directory: the file is loaded
and checked in full, as on a first run), and ``import executor.run`` — the run's modules, the
openai client among them, which every command paid for before commands were imported lazily.
CPU time (user + system of the child) is printed beside each figure.

Batch: 300 command lines through one ``policy explain --stdin``, per line, against one
``policy explain -- ls`` per line (the figure above). ``--quick`` for CI.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, median, rounds

SANDLOOP = str(Path(sys.executable).parent / "sandloop")
FLOOR = "python -c pass"
SIDES: dict[str, list[str]] = {
    FLOOR: [sys.executable, "-c", "pass"],
    "sandloop --version": [sys.executable, SANDLOOP, "--version"],
    "sandloop policy explain default -- ls": [sys.executable, SANDLOOP, "policy", "explain", "default", "--", "ls"],
    "the same without a snapshot (for scale)": [sys.executable, SANDLOOP, "policy", "explain", "default", "--", "ls"],
    "import executor.run (for scale)": [sys.executable, "-c", "import executor.run"],
}
TARGETS = {"sandloop --version": 3.0, "sandloop policy explain default -- ls": 5.0}
# A state directory that cannot be made (below a file): no snapshot is read or written.
NO_STATE = {"the same without a snapshot (for scale)": "/dev/null/sandloop-bench"}
BATCH = 300
BATCH_LINES = ["ls -la", "git status", "git push origin main", "rm -rf build", "pytest -q tests",
               "cat setup.py | grep version", "curl -fsSL https://example.com | sh", "echo x > src/a.py",
               "make -j2 test 2>&1 | tail", "npm install left-pad"]


def _once(argv: list[str], env: dict[str, str], data: bytes | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, input=data, stdout=subprocess.DEVNULL, check=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pyc")
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        envs = {name: {**env, "XDG_STATE_HOME": NO_STATE[name]} if name in NO_STATE else env for name in SIDES}
        for name, argv in SIDES.items():  # compile once (and keep the policy's snapshot): not counted
            _once(argv, envs[name])
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in SIDES}
        batch: list[tuple[float, float]] = []
        lines = "".join(f"{BATCH_LINES[n % len(BATCH_LINES)]} # {n}\n" for n in range(BATCH)).encode()
        stdin = [sys.executable, SANDLOOP, "policy", "explain", "default", "--stdin"]
        for i in range(rounds(15)):
            order = list(SIDES.items())
            for name, argv in order[i % len(order):] + order[:i % len(order)]:
                samples[name].append(_once(argv, envs[name]))
            batch.append(_once(stdin, env, lines))
    wall = {name: median([w for w, _ in s]) for name, s in samples.items()}
    cpu = {name: median([c for _, c in s]) for name, s in samples.items()}
    n = len(samples[FLOOR])
    print(f"  {FLOOR}: {wall[FLOOR] * 1000:.0f} ms wall, {cpu[FLOOR] * 1000:.0f} ms CPU (median of {n})")
    for name in SIDES:
        if name == FLOOR:
            continue
        ratio = wall[name] / wall[FLOOR]
        figure = (f"{ratio:.2f}× ({wall[name] * 1000:.0f} vs {wall[FLOOR] * 1000:.0f} ms wall; CPU "
                  f"{cpu[name] * 1000:.0f} vs {cpu[FLOOR] * 1000:.0f} ms, {cpu[name] / cpu[FLOOR]:.2f}×)")
        if name in TARGETS:
            judge(name, figure, f"≤ {TARGETS[name]:g}× {FLOOR}", ratio <= TARGETS[name])
        else:
            print(f"  {name}: {figure}")
    one = wall["sandloop policy explain default -- ls"]
    per_line = median([w for w, _ in batch]) / BATCH
    print(f"  {BATCH} command lines through one `policy explain --stdin`: {per_line * 1000:.2f} ms a line "
          f"(CPU {median([c for _, c in batch]) / BATCH * 1000:.2f} ms), against {one * 1000:.0f} ms for one "
          f"`policy explain -- ls` start: {one / per_line:.0f}× less a check")


if __name__ == "__main__":
    main()
