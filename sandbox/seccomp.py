"""The seccomp profile of every sandbox: no setuid/setgid bits, whatever the uid.

A sandbox runs as the checkout's owner (root for a root-owned checkout, with every capability
dropped). Either way it can set the setuid/setgid bits on files it owns — and in a bind-mounted
checkout those files are the host's: a shell as the checkout's owner (root, for a root-owned
one) for any local user who can reach it. This profile makes
the kernel refuse every way to set those bits (chmod family, creating a file with them, mknod)
and refuses what Docker's default profile refuses to an unprivileged process that we would
otherwise lose by replacing it: new namespaces (user namespaces especially), keyrings, bpf,
perf, ptrace, io_uring, module and mount calls. Everything else is allowed.

Written for sandloop; the syscall list follows the kernel's own documentation of each call.
"""

from __future__ import annotations

import json
import platform
from typing import Any

__all__ = ["no_setid_profile"]

_S_ISUID = 0o4000
_S_ISGID = 0o2000
_EPERM = 1
_ENOSYS = 38  # "not implemented": libc falls back to an older call we can filter

# syscall → index of its mode argument
_MODE_ARG = {
    "mkdir": 1,
    "mkdirat": 2,
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "creat": 1,
    "open": 2,
    "openat": 3,
    "mknod": 1,
    "mknodat": 2,
}

# Calls whose arguments seccomp cannot see (a struct pointer) or that bypass the filter:
# refuse them as "not implemented" so libc uses the filterable ones.
_NOT_IMPLEMENTED = ["openat2", "fchmodat2", "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"]

_REFUSED = [
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl",
    "lookup_dcookie", "iopl", "ioperm", "syslog", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "nfsservctl", "vhangup", "uselib", "ustat", "sysfs", "_sysctl",
]

_CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

_ARCHES = {
    "x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
}


def _bit_set(index: int, bit: int) -> dict[str, Any]:
    # MASKED_EQ: (arg & value) == valueTwo
    return {"index": index, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}


def _rules(runtime: str | None) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for name, index in _MODE_ARG.items():
        for bit in (_S_ISUID, _S_ISGID):
            rules.append({"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
                          "args": [_bit_set(index, bit)]})
    for flag in _CLONE_NEW_FLAGS.values():
        # clone's flags are its first argument on x86 and arm (s390 differs; not supported here)
        rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
                      "args": [_bit_set(0, flag)]})
    not_implemented = _NOT_IMPLEMENTED
    if runtime == "runsc":
        # gVisor's own clone3 (measured: Debian's 2022 runsc) cannot create namespaces for us to
        # worry about, and filtering it there breaks thread creation.
        not_implemented = [n for n in not_implemented if n != "clone3"]
    rules.append({"names": not_implemented, "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS})
    rules.append({"names": _REFUSED, "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM})
    return rules


def no_setid_profile(runtime: str | None = None, machine: str | None = None) -> str:
    """The profile as the JSON text Docker's ``--security-opt seccomp=`` takes."""
    machine = machine or platform.machine()
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": _ARCHES.get(machine, []),
        "syscalls": _rules(runtime),
    }
    return json.dumps(profile, separators=(",", ":"))
