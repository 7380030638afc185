"""Sampling profiles for the benches: where a process's time goes, by part, as shares.

py-spy (``pip install py-spy``, in the ``test`` extra) samples a running Python process from the
outside without stopping it (``--nonblocking``), so the same code is profiled on the host and
inside a container (the helper, by its pid on the host). Each sample's stack is put in the part
of its innermost frame that a rule names; a bench prints the parts' shares of the samples it
kept. Without py-spy (or where it cannot attach), the profile says so and the bench goes on.

Not a bench: ``make bench`` runs every other script in bench/.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Profile", "Rule", "parts", "pid_of", "print_parts", "py_spy"]

#: (part, substrings of a frame "function (file:line)" of which any puts a sample in the part)
Rule = tuple[str, Sequence[str]]


def py_spy() -> str | None:
    """The py-spy program: beside this interpreter (a venv), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


class Profile:
    """py-spy recording one process (``pid``) at ``rate`` samples a second, idle time included,
    until :meth:`stop`."""

    def __init__(self, pid: int, *, rate: int = 250) -> None:
        self.pid = pid
        self.problem: str | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="sandloop-profile-")
        self._out = Path(self._dir.name) / "raw.txt"
        self._err = open(Path(self._dir.name) / "err.txt", "w+b")  # noqa: SIM115 - closed in stop()
        program = py_spy()
        self._proc: subprocess.Popen[bytes] | None = None
        if program is None:
            self.problem = "py-spy is not installed (pip install py-spy)"
            return
        self._proc = subprocess.Popen(
            [program, "record", "--pid", str(pid), "--idle", "--nonblocking", "--rate", str(rate),
             "--format", "raw", "--output", str(self._out)],
            stdout=subprocess.DEVNULL, stderr=self._err)
        time.sleep(1.0)  # it attaches before the first sample: let it, or the start is lost
        if self._proc.poll() is not None:
            self.problem = f"py-spy could not attach: {self._message()}"

    def _message(self) -> str:
        self._err.seek(0)
        lines = [line for line in self._err.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no reason given"

    def stop(self) -> list[tuple[list[str], int]]:
        """Stop sampling; the samples as (frames outermost first, count)."""
        samples: list[tuple[list[str], int]] = []
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signal.SIGINT)
                try:
                    self._proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            if self.problem is None and self._out.exists():
                for line in self._out.read_text(errors="replace").splitlines():
                    stack, _, count = line.rpartition(" ")
                    if stack and count.isdigit():
                        samples.append((stack.split(";"), int(count)))
            if self.problem is None and not samples:
                self.problem = f"py-spy recorded nothing: {self._message()}"
        finally:
            self._err.close()
            self._dir.cleanup()
        return samples


def parts(samples: Sequence[tuple[list[str], int]], rules: Sequence[Rule], *, within: str | None = None,
          other: str = "other") -> tuple[dict[str, int], int]:
    """Samples by part (the innermost frame a rule names; ``other`` when none does), counting only
    samples with a frame containing ``within`` when given, and none taken while a profile was
    being started or stopped; and how many were counted."""
    counts: dict[str, int] = collections.Counter()
    total = 0
    for frames, count in samples:
        if within is not None and not any(within in frame for frame in frames):
            continue
        if any("Profile.__init__" in frame or "Profile.stop" in frame for frame in frames):
            continue
        total += count
        part = next((name for frame in reversed(frames) for name, marks in rules
                     if any(mark in frame for mark in marks)), other)
        counts[part] += count
    return dict(counts), total


def print_parts(title: str, samples: Sequence[tuple[list[str], int]], rules: Sequence[Rule], *,
                within: str | None = None, per: float | None = None, indent: str = "    ") -> None:
    """One line per part: its share of the counted samples (and of ``per`` seconds, when given)."""
    counts, total = parts(samples, rules, within=within)
    if not total:
        print(f"{indent}{title}: no samples")
        return
    print(f"{indent}{title} ({total} samples):")
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        share = count / total
        extra = f"  ≈ {share * per * 1000:.2f} ms a command" if per is not None else ""
        print(f"{indent}  {name:52s} {share:6.1%}{extra}")


def pid_of(container_attrs: dict[str, object]) -> int | None:
    """The host pid of a container's main process, from its inspect data."""
    state = container_attrs.get("State")
    pid = state.get("Pid") if isinstance(state, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None
