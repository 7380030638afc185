"""Processes as the helper sees them: the /proc table, process trees, freezing and killing them,
and the few prctl calls the helper needs. Standard library only (shipped with the helper).

A process is named by its pid *and* its start time: pids are reused, quickly so under a fork
bomb, and a kill aimed at a number must not reach a newcomer.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, cast

__all__ = [
    "Proc",
    "alive",
    "become_subreaper",
    "descendants",
    "freeze",
    "has_prctl",
    "kill_all",
    "kill_group",
    "non_dumpable",
    "oom_kills",
    "pids_exhausted",
    "running",
    "scan",
    "send",
    "set_non_dumpable",
    "set_subreaper",
    "tree",
]

_PASSES = 100  # bound on freeze passes; each pass only finds processes forked before the last

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


# --- prctl -----------------------------------------------------------------------------------


def _load_prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        return cast("Callable[..., int]", ctypes.CDLL(None, use_errno=True).prctl)
    except (ImportError, OSError, AttributeError):  # no ctypes in this image, or no prctl
        return None


_prctl = _load_prctl()


def has_prctl() -> bool:
    return _prctl is not None


def _call(option: int, value: int) -> int:
    return -1 if _prctl is None else _prctl(option, value, 0, 0, 0)


def set_non_dumpable() -> bool:
    """No other process may open our /proc entries (fds, memory, root, environ) or ptrace us,
    not even one with our uid, nor uid 0 without CAP_SYS_PTRACE. Survives until we exec."""
    return _call(_PR_SET_DUMPABLE, 0) == 0


def non_dumpable() -> bool:
    return _call(_PR_GET_DUMPABLE, 0) == 0


def set_subreaper() -> bool:
    """Orphans among our descendants are reparented to us instead of to init. Survives exec."""
    return _call(_PR_SET_CHILD_SUBREAPER, 1) == 0


def become_subreaper() -> None:
    """``preexec_fn`` for a command's shell (runs between fork and exec)."""
    set_subreaper()


# --- the process table -----------------------------------------------------------------------


class Proc(NamedTuple):
    ppid: int
    state: str  # "Z" for a zombie, "T" stopped
    start: int  # start time in clock ticks since boot


def scan() -> dict[int, Proc]:
    """Every process visible here, from /proc (threads are not listed, only their process)."""
    table: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(entry)] = Proc(int(fields[1]), fields[0].decode(), int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def descendants(table: Mapping[int, Proc], roots: Iterable[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


if TYPE_CHECKING:  # annotations only: subscripting collections.abc at run time needs Python 3.9
    #: Picks processes out of a fresh table: re-evaluated on every pass, so it follows a tree as
    #: it grows or is reparented.
    Selector = Callable[[Mapping[int, Proc]], Iterable[int]]


def tree(root: int, *, with_root: bool) -> Selector:
    """The descendants of ``root`` (and ``root`` itself when ``with_root``)."""

    def select(table: Mapping[int, Proc]) -> Iterable[int]:
        found = descendants(table, [root])
        if with_root and root in table:
            found.add(root)
        return found

    return select


def send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def freeze(select: Selector) -> dict[int, int]:
    """SIGSTOP every live process ``select`` picks, rescanning until a pass finds none new.

    A process with a stop signal pending cannot complete a fork, so each pass only finds what
    was forked before the previous one: the set closes even around a fork bomb. Returns what was
    stopped, pid to start time.
    """
    stopped: dict[int, int] = {}
    for _ in range(_PASSES):
        table = scan()
        fresh = [pid for pid in select(table) if table[pid].state != "Z" and stopped.get(pid) != table[pid].start]
        if not fresh:
            break
        for pid in fresh:
            send(pid, signal.SIGSTOP)
            stopped[pid] = table[pid].start
    return stopped


def kill_all(select: Selector) -> dict[int, int]:
    """Freeze what ``select`` picks and SIGKILL it, until a pass finds nothing alive. Returns
    every process killed, pid to start time."""
    killed: dict[int, int] = {}
    for _ in range(_PASSES):
        stopped = freeze(select)
        if not stopped:
            break
        for pid in stopped:
            send(pid, signal.SIGKILL)
        killed.update(stopped)
    return killed


def running(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)? One file read, not a scan."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def alive(select: Selector) -> bool:
    """Does ``select`` pick any process that is not a zombie?"""
    table = scan()
    return any(table[pid].state != "Z" for pid in select(table))


def kill_group(pgid: int) -> None:
    """SIGKILL a process group until it is empty (a fork bomb keeps forking while we kill)."""
    for _ in range(50):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.002)


# --- the cgroup ------------------------------------------------------------------------------


#: cgroup files kept open, by path (None: not there). They are read around every command; a
#: pread on a kept descriptor is one system call where open, read and close through Python's
#: file object are three and more. The helper is non-dumpable: no command reaches them.
_kept: dict[str, int | None] = {}


def _read_text(*paths: str) -> str | None:
    """The contents of the first of ``paths`` there is (cgroup v2's name, then v1's)."""
    for path in paths:
        fd = _kept.get(path, -1)
        if fd == -1:
            try:
                fd = os.open(path, os.O_RDONLY)  # not inherited by commands
            except OSError:
                fd = None
            kept = _kept.setdefault(path, fd)
            if kept != fd and fd is not None:  # another thread opened it meanwhile
                os.close(fd)
            fd = kept
        if fd is None:
            continue
        try:
            return os.pread(fd, 4096, 0).decode()
        except OSError:
            continue
    return None


def _read_int(*paths: str) -> int | None:
    text = _read_text(*paths)
    try:
        return None if text is None else int(text.strip())
    except ValueError:
        return None


def _field(text: str | None, name: str) -> int | None:
    """The value of the ``name value`` line of a cgroup counter file."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            try:
                return int(value)
            except ValueError:
                return None
    return None


@functools.lru_cache(maxsize=1)
def _pids_max() -> int | None:
    # Set by the engine from outside: it does not change under us (one read, not one a command).
    return _read_int("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")


def _pids_limit_hits() -> int | None:
    """How often a fork failed at the pids limit (the ``max`` line of pids.events)."""
    return _field(_read_text("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events"), "max")


_last_hits: list[int | None] = [None]


def pids_exhausted() -> bool:
    """Is the container's pids limit (nearly) used up? cgroup v2, then v1.

    Nearly full now, or hit since the last look with half the pids still taken: a fork bomb's
    copies die and respawn, so its count swings below any single threshold, but every failed fork
    is counted in pids.events (seen under load: 81% taken at the moment of the look)."""
    limit = _pids_max()
    if limit is None:
        return False
    current = _read_int("/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current")
    if current is None:
        return False
    hits, (before,) = _pids_limit_hits(), _last_hits
    _last_hits[0] = hits
    hit_since = hits is not None and before is not None and hits > before
    return current >= limit * 0.9 or (hit_since and current >= limit * 0.5)


def oom_kills() -> int | None:
    """The cgroup's OOM-kill counter (v2 memory.events or v1 memory.oom_control)."""
    return _field(_read_text("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"), "oom_kill")
