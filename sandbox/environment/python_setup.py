"""The ``python`` preset's setup step: install the project and what it declares for its tests.

Runs inside the setup sandbox (``/opt/env/bin/python -I /opt/sandloop/python-setup.pyz``, in the
checkout), never on the host: finding the extras of a project whose metadata is dynamic means
running its build backend, which is the checkout's code. Standard library only (shipped as a
zip application, :mod:`sandbox.bundle`; ``tomllib``, or pip's own ``tomli`` before Python 3.11).

What it installs, with one ``pip install`` (one resolution):

* the project itself, when the checkout is one (``pyproject.toml`` with ``[project]`` or
  ``[build-system]``, ``setup.py``, ``setup.cfg``), editable (``-e .``): the tests then run
  against the checkout the agent edits, not an installed copy;
* its extras named ``test``, ``tests``, ``testing`` or ``dev`` — only those it declares, so pip
  has nothing to warn about: read from ``[project.optional-dependencies]`` when they are static,
  else from the metadata pip prepares (``pip install --dry-run --report``);
* its dependency groups of those names (PEP 735 ``[dependency-groups]``, includes followed);
* the requirement files of the usual places (:data:`REQUIREMENT_PLACES`);
* ``pytest`` (nothing more when the project's requirements have it already).

The files it reads are :data:`KEY_FILES`, which key the cached environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["KEY_FILES", "NAMES", "REQUIREMENT_PLACES", "Plan", "main", "plan"]

#: Extras, dependency groups and requirement files by these names hold what tests need (``dev``:
#: many projects keep their test tools there, and it is uv's default group).
NAMES = ("test", "tests", "testing", "dev")
#: Where requirement files are looked for (workspace globs), and which of them count: ``all`` of
#: them, or only those whose name says one of :data:`NAMES` (``requirements-dev.txt``,
#: ``test-requirements.txt``, ``requirements/test.txt``; not ``requirements-docs.txt``).
REQUIREMENT_PLACES: tuple[tuple[str, str], ...] = (
    ("requirements.txt", "all"),
    ("*requirements*.txt", "named"),
    ("requirements/*.txt", "named"),
    ("tests/requirements*.txt", "all"),
    ("test/requirements*.txt", "all"),
    ("testing/requirements*.txt", "all"),
)
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
#: Every file this step may read: the cached environment is keyed on them.
KEY_FILES = (*PROJECT_FILES, *dict.fromkeys(glob for glob, _ in REQUIREMENT_PLACES if glob != "requirements.txt"))
_PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]


def _normal(name: str) -> str:
    """A project, extra or group name as the packaging specifications compare them (PEP 503/685)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the venv's pip carries tomli
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    with path.open("rb") as fh:
        data: dict[str, Any] = tomllib.load(fh)
    return data


@dataclass
class Plan:
    """What one setup installs, and why."""

    project: str | None = None  # the file that makes the checkout a project, if any
    extras: list[str] = field(default_factory=list)
    extras_from: str = ""
    groups: dict[str, list[str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def pip_args(self) -> list[str]:
        args = ["install", "--progress-bar", "off"]
        if self.project is not None:
            args += ["-e", f".[{','.join(self.extras)}]" if self.extras else "."]
        for name in self.files:
            args += ["-r", name]
        for requirements in self.groups.values():
            args += requirements
        return [*args, "pytest"]

    def lines(self) -> list[str]:
        if self.project is None:
            said = ["project: none (no pyproject.toml with [project] or [build-system], no setup.py or setup.cfg)"]
        else:
            said = [f"project: . ({self.project}), installed editable",
                    f"extras: {', '.join(self.extras) or 'none'} of {', '.join(NAMES)} ({self.extras_from})"]
        groups = ", ".join(f"{name} ({len(reqs)} requirement{'s' * (len(reqs) != 1)})"
                           for name, reqs in self.groups.items())
        files = ", ".join(self.files)
        return [*said, f"dependency groups: {groups or 'none'}", f"requirement files: {files or 'none'}"]


def _is_project(root: Path, pyproject: dict[str, Any] | None) -> str | None:
    if pyproject is not None and ("project" in pyproject or "build-system" in pyproject):
        return "pyproject.toml"
    return next((name for name in ("setup.py", "setup.cfg") if (root / name).is_file()), None)


def _static_extras(pyproject: dict[str, Any] | None) -> list[str] | None:
    """The extras ``[project]`` declares, or None when they are dynamic (or no ``[project]``)."""
    project = pyproject.get("project") if pyproject else None
    if not isinstance(project, dict) or "optional-dependencies" in (project.get("dynamic") or []):
        return None
    return [_normal(name) for name in (project.get("optional-dependencies") or {})]


def _declared_extras(python: str, root: Path) -> tuple[list[str], str]:
    """The extras in the metadata pip prepares for the project (its build backend runs here)."""
    with tempfile.TemporaryDirectory(prefix="sandloop-report-") as folder:
        report = Path(folder) / "report.json"
        done = subprocess.run([python, *_PIP, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
                               "--report", str(report), "-e", "."], cwd=root, check=False)
        if done.returncode != 0 or not report.is_file():
            return [], f"pip could not prepare the project's metadata (exit {done.returncode}): extras not known"
        installs = json.loads(report.read_text()).get("install") or [{}]
    extras = installs[0].get("metadata", {}).get("provides_extra") or []
    return [_normal(str(name)) for name in extras], "from the metadata pip prepared"


def _group(groups: dict[str, Any], name: str, chain: tuple[str, ...] = ()) -> list[str]:
    """The requirements of dependency group ``name``, its ``include-group`` entries followed."""
    if name in chain:
        raise ValueError(f"dependency group {name} includes itself ({' → '.join((*chain, name))})")
    found: list[str] = []
    for item in groups[name]:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            included = _normal(item["include-group"])
            if included not in groups:
                raise ValueError(f"dependency group {name} includes {included}, which is not declared")
            found += _group(groups, included, (*chain, name))
        else:
            raise ValueError(f"dependency group {name}: {item!r} is neither a requirement nor an include-group")
    return found


def _named(path: str) -> bool:
    words = set(re.split(r"[-_.]+", Path(path).stem.lower()))
    return bool(words & set(NAMES))


def requirement_files(root: Path) -> list[str]:
    """The requirement files of :data:`REQUIREMENT_PLACES`, workspace-relative, in that order."""
    found: list[str] = []
    for glob, which in REQUIREMENT_PLACES:
        for path in sorted(root.glob(glob)):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in found and (which == "all" or _named(rel)):
                found.append(rel)
    return found


def plan(root: Path, python: str) -> Plan:
    """What to install for the checkout at ``root`` (reading files; pip only for dynamic extras)."""
    found = Plan()
    pyproject = _toml(root / "pyproject.toml") if (root / "pyproject.toml").is_file() else None
    found.project = _is_project(root, pyproject)
    if found.project is not None:
        static = _static_extras(pyproject)
        if static is not None:
            declared, found.extras_from = static, "from [project.optional-dependencies]"
        else:
            declared, found.extras_from = _declared_extras(python, root)
        found.extras = [name for name in NAMES if name in declared]
    groups = {_normal(k): v for k, v in ((pyproject or {}).get("dependency-groups") or {}).items()}
    for name in NAMES:
        if name in groups:
            found.groups[name] = _group(groups, name)
    found.files = requirement_files(root)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python-setup", description="Install the project in the current folder "
                                     "and what it declares for its tests (sandloop's python preset).")
    parser.add_argument("--python", default=sys.executable, help="the environment's python (default: this one)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be installed, install nothing")
    args = parser.parse_args(argv)
    root = Path(os.getcwd())
    try:
        found = plan(root, args.python)
    except (OSError, ValueError) as exc:  # a TOML error is a ValueError
        print(f"python preset: cannot read the project's declarations: {exc}", flush=True)
        return 2
    for line in found.lines():
        print(f"python preset: {line}", flush=True)
    command = [args.python, *_PIP, *found.pip_args()]
    print(f"python preset: {shlex.join(command)}", flush=True)
    if args.dry_run:
        return 0
    return subprocess.run(command, cwd=root, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
