"""The paths of a checkout that every sandbox gets read-only: what the host's git reads and runs.

The host's git runs hooks and config from a ``.git``, so a command that could write one could run
code on the host at the user's next git command there. Read-only, in every sandbox that sees the
checkout (a bind mount on Docker, a read-only volume in a pod):

* the policy's whole-path read-only globs (``.git`` by default); a symlinked one at its target,
  when that lies inside the checkout;
* the hooks directory ``core.hooksPath`` names, when it lies inside the checkout (husky's
  ``.husky``);
* each submodule's ``.git`` file (found through ``.gitmodules``);
* every other ``.git`` — folder or file — found in the checkout: a vendored repository that is
  not a declared submodule is a repository all the same.

The search for nested ones is bounded (:data:`MAX_DEPTH` folder levels, :data:`MAX_ENTRIES`
directory entries looked at, :data:`MAX_REPOS` repositories): it goes breadth first and never
follows a link, and where a bound stops it, it says so in one warning line naming the bound and
the first folder it did not scan (:attr:`Protected.stopped`) — the session still starts. It does
not look inside ``.git`` folders or inside paths that are read-only already (everything there is
read-only whatever it holds); nothing else is skipped.
"""

from __future__ import annotations

import configparser
import logging
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_DEPTH", "MAX_ENTRIES", "MAX_REPOS", "Protected", "find", "inside", "protected_paths"]

log = logging.getLogger("sandloop.protected")

#: Folder levels below the checkout searched for nested repositories.
MAX_DEPTH = 32
#: Directory entries looked at (files and folders alike): ≈0.1 s of a search on this kind of
#: machine; a 50 000-file checkout takes a fraction of it.
MAX_ENTRIES = 250_000
#: Nested repositories protected; each is one more mount.
MAX_REPOS = 256

_warned: set[tuple[Path, str]] = set()


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class Protected:
    """What to make read-only (resolved host paths inside the checkout, none inside another, in
    the order found), and why the search for nested repositories stopped early, if it did."""

    paths: tuple[Path, ...]
    stopped: str | None = None


def protected_paths(workspace: Path, read_only: tuple[str, ...]) -> list[Path]:
    """:func:`find`'s paths."""
    return list(find(workspace, read_only).paths)


def find(workspace: Path, read_only: tuple[str, ...]) -> Protected:
    """Everything of ``workspace`` a sandbox gets read-only (see the module's docstring); warns
    once per checkout and reason when the search for nested repositories stopped at a bound."""
    workspace = workspace.resolve()
    found: list[Path] = []
    for rel in read_only:
        if not rel or ".." in Path(rel).parts or Path(rel).is_absolute():
            continue
        host = _at_target(workspace / rel, workspace)
        if host is not None and host.exists():
            found.append(host)
    hooks = _hooks_path(workspace)
    found += [hooks] if hooks is not None else []
    found += _submodule_gits(workspace)
    stopped = None
    if ".git" in read_only:  # nested repositories are protected as the checkout's own is
        nested, stopped = _nested_gits(workspace, skip=set(found))
        found += nested
    if stopped is not None and (workspace, stopped) not in _warned:
        _warned.add((workspace, stopped))
        log.warning("sandloop: the search of %s for nested repositories stopped at %s; a .git there stays "
                    "writable by commands (name it in [files] read_only to protect it)", workspace, stopped)
    return Protected(_outermost(found, workspace), stopped)


def _at_target(host: Path, workspace: Path) -> Path | None:
    """A path to protect: itself, or — a symlink — what it points at inside the checkout (never
    what lies outside, and never the checkout itself)."""
    if not host.is_symlink():
        return host
    target = host.resolve()
    return target if inside(target, workspace) and target != workspace else None


def _outermost(paths: list[Path], workspace: Path) -> tuple[Path, ...]:
    """Each path once, without those inside another (read-only with it already) or the checkout."""
    unique = [p for p in dict.fromkeys(paths) if p != workspace]
    return tuple(p for p in unique if not any(q != p and q in p.parents for q in unique))


def _hooks_path(workspace: Path) -> Path | None:
    """The directory the host's git runs hooks from when ``core.hooksPath`` points into the
    checkout (husky's ``.husky``, a ``.githooks`` folder): a command could plant hooks there."""
    config = workspace / ".git" / "config"
    if not config.is_file():
        return None
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read(config, encoding="utf-8")
        value = parser.get("core", "hookspath", fallback=None)
    except (configparser.Error, UnicodeDecodeError):
        return None
    if not value:
        return None
    candidate = Path(value.strip().strip('"'))
    if not candidate.is_absolute():
        candidate = workspace / candidate  # relative to the worktree, where git runs hooks
    candidate = candidate.resolve()
    return candidate if inside(candidate, workspace) and candidate.is_dir() else None


def _submodule_gits(workspace: Path) -> list[Path]:
    """Each submodule's ``.git`` (a file naming its git folder): rewritten by a command, it
    would point the host's git, when run in that submodule, at a config the sandbox wrote —
    ``core.fsmonitor`` and hooks included. Found through ``.gitmodules`` whatever the search's
    bounds; its paths are checked like any other (inside the checkout, never through a link out)."""
    modules = workspace / ".gitmodules"
    if not modules.is_file() or modules.is_symlink():
        return []
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read(modules, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return []
    found = []
    for section in parser.sections():
        rel = parser.get(section, "path", fallback="").strip().strip('"')
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            continue
        candidate = workspace / rel / ".git"
        if candidate.is_symlink() or not candidate.exists():
            continue
        if inside(candidate.resolve(), workspace):
            found.append(candidate.resolve())
    return found


def _nested_gits(workspace: Path, skip: set[Path]) -> tuple[list[Path], str | None]:
    """Every ``.git`` below the checkout's top (folders and files; a symlinked one at its target
    inside the checkout), breadth first, links never followed, within the bounds; and where the
    search stopped, if it stopped early."""
    skipped = {str(p) for p in skip}
    found: list[Path] = []
    queue: deque[tuple[str, int]] = deque([(str(workspace), 0)])
    entries = 0
    while queue:
        folder, depth = queue.popleft()
        if depth > MAX_DEPTH:
            return found, (f"the depth bound ({MAX_DEPTH} folder levels): {_rel(folder, workspace)}/ and every "
                           "folder as deep was not scanned")
        if entries >= MAX_ENTRIES:
            return found, (f"the bound of {MAX_ENTRIES} directory entries: {_rel(folder, workspace)}/ and the "
                           "folders after it (breadth first) were not scanned")
        subfolders: list[str] = []
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    entries += 1
                    if entry.name == ".git":
                        git = _at_target(Path(entry.path), workspace) if depth else None  # the top's: the policy's
                        if git is None or str(git) in skipped or not git.exists():
                            continue
                        if len(found) == MAX_REPOS:
                            return found, (f"the bound of {MAX_REPOS} nested repositories: "
                                           f"{_rel(entry.path, workspace)} and the folders after it were not "
                                           "protected")
                        found.append(git)
                    elif entry.is_dir(follow_symlinks=False) and entry.path not in skipped:
                        subfolders.append(entry.path)
        except OSError:
            continue  # unreadable by this user, so by the host's git run as this user too (or gone)
        subfolders.sort()
        queue.extend((path, depth + 1) for path in subfolders)
    return found, None


def _rel(path: str, workspace: Path) -> str:
    return os.path.relpath(path, workspace)
