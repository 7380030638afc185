"""Command-line start-up: what a short command costs against a bare interpreter (not a test).

Each command is the installed ``sandloop`` console script run as a new process, exactly as a
person or a script runs it, against ``python -c pass`` of the same interpreter in the same
rounds (interleaved, so load on the machine falls on every side alike). Every side runs from
compiled bytecode, as an installed package does: the children get a private
``PYTHONPYCACHEPREFIX`` (never the checkout's folders) and a first round that is not counted.

Targets (wall time, medians): ``sandloop --version`` ≤ 3× the bare interpreter,
``sandloop policy explain default -- ls`` ≤ 5× (it loads and checks a policy and parses the
command). ``import executor.run`` — the run's modules, the openai client among them, which every
command paid for before commands were imported lazily — is printed for scale, not judged.
CPU time (user + system of the child) is printed beside each figure. ``--quick`` for CI.
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
    "import executor.run (for scale)": [sys.executable, "-c", "import executor.run"],
}
TARGETS = {"sandloop --version": 3.0, "sandloop policy explain default -- ls": 5.0}


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        for argv in SIDES.values():  # compile once: not counted
            _once(argv, env)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in SIDES}
        for i in range(rounds(15)):
            order = list(SIDES.items())
            for name, argv in order[i % len(order):] + order[:i % len(order)]:
                samples[name].append(_once(argv, env))
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


if __name__ == "__main__":
    main()
