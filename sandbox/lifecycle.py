"""Who owns a sandbox container or network, and when it may be removed.

Every container and network sandloop creates carries the same labels: the session, the owner
process (its PID *and* the kernel's start time of that PID, since PIDs get reused), the host,
and an expiry. A reaper removes what a dead owner left behind (even one that was SIGKILLed), or
what outlived its expiry; :func:`stale_reason` is the one rule for both containers and networks.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

__all__ = ["HELPER_DIR", "LABEL", "owner_labels", "stale_reason"]

LABEL = "sandloop.session"
#: Where the in-sandbox programs are put (an anonymous volume: the root filesystem is read-only).
HELPER_DIR = "/opt/sandloop"


def proc_start_time(pid: int) -> str | None:
    """The kernel's start time of a process (field 22 of /proc/PID/stat): PIDs get reused."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_labels(session_id: str, lifetime_s: float, idle_s: float) -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL: session_id,
        "sandloop.owner_pid": str(pid),
        "sandloop.owner_start": proc_start_time(pid) or "",
        "sandloop.owner_host": socket.gethostname(),
        "sandloop.expires": str(int(time.time() + lifetime_s)),
        "sandloop.idle_expiry_s": str(int(idle_s)),
    }


def stale_reason(labels: Mapping[str, str], status: str, now: float | None = None) -> str | None:
    """Why a sandloop container should be removed, or None when its owner still needs it."""
    now = time.time() if now is None else now
    if status in ("exited", "dead"):
        return f"container {status}"
    try:
        if float(labels.get("sandloop.expires", "0")) < now:
            return "expired"
    except ValueError:
        return "unreadable expiry label"
    if labels.get("sandloop.owner_host") != socket.gethostname():
        return None  # another machine's owner: only its expiry can tell
    try:
        pid = int(labels.get("sandloop.owner_pid", ""))
    except ValueError:
        return "unreadable owner label"
    start = proc_start_time(pid)
    if start is None:
        return f"owner pid {pid} is gone"
    if labels.get("sandloop.owner_start") and start != labels["sandloop.owner_start"]:
        return f"owner pid {pid} was reused by another process"
    return None
