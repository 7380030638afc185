"""sandloop's seccomp rules, written once: the table, and the classic-BPF program made from it.
Standard library only (shipped with the helper).

A sandbox runs as the checkout's owner (root for a root-owned checkout, with every capability
dropped). Either way it could set the setuid/setgid bits on files it owns — and in a checkout
those files are the host's: a program that runs as the checkout's owner for any local user who
can reach it. So every way to set those bits is refused (the chmod family, creating a file or a
directory with them, mknod), and so is what lets a process step outside the rules or reach
another one: new namespaces (a user namespace hands capabilities back), keyrings, bpf, perf,
ptrace and its relatives, io_uring (its operations bypass seccomp), module, mount and clock calls.
Everything else is allowed: the runtime's own profile (Docker's default, Kubernetes'
``RuntimeDefault``) stays in force underneath.

:data:`RULES` is the one table. From it come

* :func:`program`: the filter the helper installs on itself (:mod:`sandbox.helper.confine`) for
  x86_64 and aarch64, by syscall number (:data:`NUMBERS`). It checks the architecture first:
  anything but the native 64-bit ABI — i386 or arm compat calls, x86_64's x32 calls (numbers with
  bit 30 set) — kills the process, so no second syscall table can go around the rules;
* the JSON profile Docker is given as well (:func:`sandbox.seccomp.no_setid_profile`), by name.

A mode or flags argument is tested on its low 32 bits (``mode_t`` and clone's flags are 32-bit
values; the kernel ignores the upper half). Calls whose arguments the filter cannot see (a
pointer to a struct) answer ENOSYS, "not implemented", so that libc falls back to a call it can
see: ``openat2`` to ``openat``, ``fchmodat2`` to ``fchmodat``, ``clone3`` to ``clone``.

Written for sandloop; numbers and argument positions follow the kernel's own syscall tables.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

__all__ = ["ARCHES", "CLONE_NEW", "ENOSYS", "EPERM", "NUMBERS", "RULES", "SETID", "Arch", "Rule", "arch_for",
           "program"]

EPERM = 1
ENOSYS = 38

#: S_ISUID | S_ISGID
SETID = 0o6000
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: every namespace clone can make
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
#: unshare(2) alone takes this one (for clone the bit belongs to the exit signal)
_CLONE_NEWTIME = 0x00000080


class Rule(NamedTuple):
    """One refusal: ``syscall`` fails with ``errno`` — every call, or (``arg`` given) those
    whose argument ``arg`` has any bit of ``mask`` in its low 32 bits."""

    syscall: str
    errno: int
    arg: int | None = None
    mask: int = 0


# the mode argument of each call that creates a file or sets a mode
_MODE_ARG = {"open": 2, "openat": 3, "creat": 1, "mkdir": 1, "mkdirat": 2, "mknod": 1, "mknodat": 2,
             "chmod": 1, "fchmod": 1, "fchmodat": 2}

_NOT_IMPLEMENTED = ("openat2", "fchmodat2", "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")

_REFUSED = (
    # namespaces and mounts
    "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsmount", "fsconfig", "fspick",
    # keyrings, bpf, perf, userfaultfd
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    # reaching into another process
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # the kernel itself, the machine, the clock
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "lookup_dcookie",
    "iopl", "ioperm", "syslog", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "nfsservctl",
    "vhangup", "uselib", "ustat", "sysfs", "_sysctl",
)

#: The one table: what the helper's filter and Docker's profile both refuse.
RULES: tuple[Rule, ...] = (
    *(Rule(name, EPERM, index, SETID) for name, index in _MODE_ARG.items()),
    Rule("clone", EPERM, 0, CLONE_NEW),  # flags come first on x86_64 and aarch64 alike
    Rule("unshare", EPERM, 0, CLONE_NEW | _CLONE_NEWTIME),
    *(Rule(name, ENOSYS) for name in _NOT_IMPLEMENTED),
    *(Rule(name, EPERM) for name in _REFUSED),
)

#: syscall -> (x86_64 number, aarch64 number); None where that architecture has no such call
#: (aarch64 has only the ``*at`` forms; neither has ``umount``, which i386 and arm have).
NUMBERS: dict[str, tuple[int | None, int | None]] = {
    "open": (2, None), "openat": (257, 56), "creat": (85, None), "mkdir": (83, None), "mkdirat": (258, 34),
    "mknod": (133, None), "mknodat": (259, 33), "chmod": (90, None), "fchmod": (91, 52),
    "fchmodat": (268, 53), "clone": (56, 220), "unshare": (272, 97),
    "openat2": (437, 437), "fchmodat2": (452, 452), "clone3": (435, 435), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "setns": (308, 268), "mount": (165, 40), "umount": (None, None), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "mount_setattr": (442, 442), "move_mount": (429, 429),
    "open_tree": (428, 428), "fsopen": (430, 430), "fsmount": (432, 432), "fsconfig": (431, 431),
    "fspick": (433, 433),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443), "lookup_dcookie": (212, 18),
    "iopl": (172, None), "ioperm": (173, None), "syslog": (103, 116), "settimeofday": (164, 170),
    "clock_settime": (227, 112), "adjtimex": (159, 171), "clock_adjtime": (305, 266),
    "nfsservctl": (180, 42), "vhangup": (153, 58), "uselib": (134, None), "ustat": (136, None),
    "sysfs": (139, None), "_sysctl": (156, None),
}


class Arch(NamedTuple):
    name: str
    audit: int  # AUDIT_ARCH_*: what seccomp_data.arch holds for the native ABI
    column: int  # which number of NUMBERS
    x32: bool  # numbers with bit 30 set are another ABI (x86_64's x32)
    seccomp: int  # the seccomp(2) syscall's own number


ARCHES = {
    "x86_64": Arch("x86_64", 0xC000003E, 0, True, 317),
    "aarch64": Arch("aarch64", 0xC00000B7, 1, False, 277),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def arch_for(machine: str) -> Arch:
    """The architecture ``platform.machine()`` names; ValueError for one sandloop has no filter for."""
    arch = ARCHES.get(_ALIASES.get(machine.lower(), machine.lower()))
    if arch is None:
        raise ValueError(f"no seccomp filter for architecture {machine!r} (only {', '.join(ARCHES)})")
    return arch


# --- classic BPF -----------------------------------------------------------------------------

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word at offset k of seccomp_data
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_J* | BPF_K (unsigned comparisons)
_RET = 0x06  # BPF_RET | BPF_K

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH = 0, 4
_X32_BIT = 0x40000000


def _arg_low(index: int) -> int:
    return 16 + 8 * index  # the low half of args[index]: both architectures are little-endian


class _Insn(NamedTuple):
    code: int
    k: int
    jt: str | None = None  # a label, or None: the next instruction
    jf: str | None = None


if TYPE_CHECKING:  # an alias at run time would need Python 3.10, and the helper runs on older ones
    _Item = _Insn | str  # an instruction, or a label marking the next one's position


def _cases(nodes: list[tuple[int, str]], out: list[_Item], fresh: list[int]) -> None:
    """A search over sorted (number, label) pairs: at most three equality tests at the end of a
    few range splits, so an allowed call (most of them) runs about ten instructions."""
    if len(nodes) <= 3:
        out.extend(_Insn(_JEQ, nr, jt=target) for nr, target in nodes)
        out.append(_Insn(_RET, RET_ALLOW))
        return
    mid = len(nodes) // 2
    fresh[0] += 1
    upper = f"upper{fresh[0]}"
    out.append(_Insn(_JGE, nodes[mid][0], jt=upper))
    _cases(nodes[:mid], out, fresh)
    out.append(upper)
    _cases(nodes[mid:], out, fresh)


def _assemble(items: list[_Item]) -> bytes:
    where: dict[str, int] = {}
    count = 0
    for item in items:
        if isinstance(item, str):
            where[item] = count
        else:
            count += 1
    code = bytearray()
    pc = 0
    for item in items:
        if isinstance(item, str):
            continue
        jumps = []
        for label in (item.jt, item.jf):
            offset = 0 if label is None else where[label] - pc - 1
            if not 0 <= offset <= 255:  # classic BPF jumps forward, at most 255 instructions
                raise ValueError(f"a jump of {offset} instructions cannot be encoded")
            jumps.append(offset)
        code += struct.pack("<HBBI", item.code, jumps[0], jumps[1], item.k)
        pc += 1
    return bytes(code)


def program(machine: str) -> bytes:
    """The filter for ``machine`` as the kernel takes it: ``struct sock_filter`` entries."""
    arch = arch_for(machine)
    tests: dict[tuple[int, int, int], str] = {}  # (errno, arg, mask) -> the label of its test
    nodes: list[tuple[int, str]] = []
    for rule in RULES:
        nr = NUMBERS[rule.syscall][arch.column]
        if nr is None:
            continue
        if rule.arg is None:
            nodes.append((nr, f"errno{rule.errno}"))
        else:
            nodes.append((nr, tests.setdefault((rule.errno, rule.arg, rule.mask), f"test{len(tests)}")))
    nodes.sort()
    items: list[_Item] = [
        _Insn(_LD_ABS, _ARCH),
        _Insn(_JEQ, arch.audit, jf="kill"),  # i386, arm, or anything else: killed
        _Insn(_LD_ABS, _NR),
    ]
    if arch.x32:
        items.append(_Insn(_JGE, _X32_BIT, jt="x32"))
    _cases(nodes, items, [0])
    for (errno, arg, mask), label in tests.items():
        items += [label, _Insn(_LD_ABS, _arg_low(arg)), _Insn(_JSET, mask, jt=f"errno{errno}"),
                  _Insn(_RET, RET_ALLOW)]
    if arch.x32:
        # -1 is no call at all (what a tracer's skipped call looks like): the kernel says ENOSYS.
        items += ["x32", _Insn(_JEQ, 0xFFFFFFFF, jt="allow", jf="kill")]
    for errno in sorted({rule.errno for rule in RULES}):
        items += [f"errno{errno}", _Insn(_RET, RET_ERRNO | errno)]
    items += ["allow", _Insn(_RET, RET_ALLOW), "kill", _Insn(_RET, RET_KILL_PROCESS)]
    return _assemble(items)
