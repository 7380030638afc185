"""The helper confines itself: sandloop's seccomp filter, installed before any command runs.
Standard library only (shipped with the helper).

The filter is :func:`sandbox.helper.seccomp_rules.program`, installed by the helper's program
entry point (:func:`sandbox.helper.main.main`, never by the :class:`~sandbox.helper.main.Helper`
class, which tests run in-process): ``prctl(PR_SET_NO_NEW_PRIVS)``, then ``seccomp(
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC)`` (``prctl(PR_SET_SECCOMP)`` on a kernel
without seccomp(2)). The kernel keeps a filter for the life of the process, hands it to every
child, and never lets it be removed: every command the helper starts, and everything those
start, runs under it, whatever the runtime's own profile is — so a Kubernetes pod with
``RuntimeDefault`` gets exactly what a Docker container gets, with nothing installed on the node.

When the filter cannot be installed (no ctypes in the image's Python, an architecture without a
filter, a kernel that refuses) the helper starts anyway and answers every request, hello first,
with an ``unconfined`` error naming the reason (:func:`refuse`): the host turns it into one line
and no command ever runs. Only a host that says the filter is not needed (``--no-seccomp``: the
local back-end, which is the user's own machine) gets a helper without it.

Processes the helper does not start — an environment's setup steps, which the engine starts with
``docker exec``, and the restore of its saved paths — go through the helper's exec mode
(``helper.pyz --exec PROGRAM ARGS``, :func:`exec_confined`): the filter, then ``execve``.

:func:`status` is what hello reports: whether this process installed the filter, and what the
kernel says of it (``Seccomp:`` and ``Seccomp_filters:`` in ``/proc/self/status``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from sandbox.helper import seccomp_rules, wire

__all__ = ["EXEC", "confine", "exec_confined", "install", "refuse", "status"]

#: The helper's first argument for its exec mode.
EXEC = "--exec"

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_ENOSYS = 38

#: what this process did: "installed", or why not
_installed = False


def install() -> None:
    """Install the filter on this process and all its threads, for good. Raises OSError (with
    the reason) when it cannot. Only a program's entry point may call this."""
    global _installed
    try:
        arch = seccomp_rules.arch_for(os.uname().machine)
    except ValueError as exc:
        raise OSError(str(exc)) from None
    try:
        import ctypes
    except ImportError:
        raise OSError("this image's python3 has no ctypes") from None

    class _Fprog(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = seccomp_rules.program(arch.name)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = _Fprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    long = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, long(1), long(0), long(0), long(0)) != 0:
        raise _errno_error(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    rc = libc.syscall(long(arch.seccomp), long(_SECCOMP_SET_MODE_FILTER), long(_SECCOMP_FILTER_FLAG_TSYNC),
                      ctypes.byref(fprog))
    if rc != 0 and ctypes.get_errno() == _ENOSYS:  # a kernel before seccomp(2): no TSYNC, one thread
        rc = libc.prctl(_PR_SET_SECCOMP, long(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), long(0), long(0))
    if rc != 0:
        raise _errno_error(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER)")
    _installed = True


def _errno_error(errno: int, call: str) -> OSError:
    return OSError(errno, f"{call}: {os.strerror(errno)}" if errno else f"{call} failed")


def confine(*, required: bool) -> str | None:
    """The program's start: install the filter unless not ``required``. Returns why the helper
    must refuse every request (the filter was required and could not be installed), or None."""
    if not required:
        return None
    try:
        install()
    except OSError as exc:
        return (f"sandloop's seccomp filter could not be installed ({exc.strerror or exc}): "
                "this sandbox runs no command")
    return None


def refuse(in_fd: int, out_fd: int, reason: str) -> int:
    """Answer every request read from ``in_fd`` with an ``unconfined`` error until it ends (or
    until a frame cannot be read: the stream is out of step, and the helper itself would stop)."""
    while True:
        try:
            message = wire.read_frame(lambda n: os.read(in_fd, n))
        except wire.OpError:
            _send(out_fd, wire.error_reply(None, "unconfined", reason))
            return 0
        if message is None:
            return 0
        rid = message.get("id") if isinstance(message, dict) else None
        if not _send(out_fd, wire.error_reply(rid if isinstance(rid, int) else None, "unconfined", reason)):
            return 0


def _send(out_fd: int, reply: wire.ErrorReply) -> bool:
    frame = memoryview(wire.encode_frame(reply))
    try:
        while frame:
            frame = frame[os.write(out_fd, frame):]
    except OSError:
        return False  # the host is gone
    return True


def exec_confined(argv: Sequence[str]) -> int:
    """``helper.pyz --exec PROGRAM ARGS``: the filter, then PROGRAM in place of this process
    (searched on PATH). Exits 126 (the filter) or 127 (the program) with one line on stderr."""
    if not argv:
        sys.stderr.write("sandloop: --exec needs a program to run\n")
        return 127
    try:
        install()
    except OSError as exc:
        sys.stderr.write(f"sandloop: the seccomp filter could not be installed ({exc.strerror or exc}); "
                         f"{argv[0]} was not run\n")
        return 126
    try:
        os.execvp(argv[0], list(argv))
    except OSError as exc:
        sys.stderr.write(f"sandloop: cannot run {argv[0]}: {exc.strerror or exc}\n")
    return 127


def _proc_status() -> tuple[int | None, int | None]:
    mode = filters = None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key == "Seccomp" and value.strip().isdigit():
                    mode = int(value)
                elif key == "Seccomp_filters" and value.strip().isdigit():
                    filters = int(value)
    except OSError:
        pass
    return mode, filters


def status() -> wire.SeccompStatus:
    """What hello says: ``filter`` is "installed" when this process installed sandloop's filter
    ("off" otherwise: an in-process Helper, or ``--no-seccomp``); ``mode`` is the kernel's
    ``Seccomp:`` (2: filtering) and ``filters`` its ``Seccomp_filters:`` — ours and the
    runtime's — (None where the kernel does not say: gVisor reports the mode alone)."""
    mode, filters = _proc_status()
    return {"filter": "installed" if _installed else "off", "mode": mode, "filters": filters,
            "arch": os.uname().machine}
