"""``subreaper PROGRAM ARGS...``: become a child subreaper, then exec PROGRAM. A 200-byte program.

Every command's shell must be a child subreaper (see :mod:`sandbox.helper.shells`), and a
process can only make itself one, between fork and exec. Python gets code there only through
``preexec_fn``, which costs a real fork of the helper and Python in the child: measured in a
container, 2.6 ms to start ``bash -c 'echo hi'`` with vfork, 6.2 ms with ``preexec_fn``. Exec'ing
this program first instead keeps vfork: 2.5 ms. No image carries such a program (tini -s does it
but is not in images; bash has no prctl), so the host writes it: a static ELF executable, nothing
but two system calls, for the two architectures below. Elsewhere the helper falls back to
``preexec_fn``.

What it does, in either architecture's words::

    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)   # a failure is ignored: exec anyway
    execve(argv[1], &argv[1], envp)              # envp: the stack after argv's NULL
    exit(127)                                    # only when execve failed

Standard library only; the host writes the file (:func:`sandbox.bundle.install`) where the
container bind-mounts it read-only, like the helper itself.
"""

from __future__ import annotations

import platform
import struct

__all__ = ["program"]

_X86_64 = bytes.fromhex(
    "b89d000000"  # mov eax, 157            prctl
    "bf24000000"  # mov edi, 36             PR_SET_CHILD_SUBREAPER
    "be01000000"  # mov esi, 1
    "31d2"  # xor edx, edx
    "4d31d2"  # xor r10, r10
    "4d31c0"  # xor r8, r8
    "0f05"  # syscall
    "488b0c24"  # mov rcx, [rsp]          argc
    "488d742410"  # lea rsi, [rsp+16]       &argv[1]
    "488b3e"  # mov rdi, [rsi]          argv[1]
    "488d54cc10"  # lea rdx, [rsp+rcx*8+16] envp
    "b83b000000"  # mov eax, 59             execve
    "0f05"  # syscall
    "bf7f000000"  # mov edi, 127
    "b83c000000"  # mov eax, 60             exit
    "0f05"  # syscall
)

_AARCH64 = struct.pack(
    "<17I",
    0xD28014E8,  # mov x8, #167            prctl
    0xD2800480,  # mov x0, #36             PR_SET_CHILD_SUBREAPER
    0xD2800021,  # mov x1, #1
    0xAA1F03E2,  # mov x2, xzr
    0xAA1F03E3,  # mov x3, xzr
    0xAA1F03E4,  # mov x4, xzr
    0xD4000001,  # svc #0
    0xF94003E9,  # ldr x9, [sp]            argc
    0x910043E1,  # add x1, sp, #16         &argv[1]
    0xF9400020,  # ldr x0, [x1]            argv[1]
    0x8B296FE2,  # add x2, sp, x9, lsl #3
    0x91004042,  # add x2, x2, #16         envp
    0xD2801BA8,  # mov x8, #221            execve
    0xD4000001,  # svc #0
    0xD2800FE0,  # mov x0, #127
    0xD2800BA8,  # mov x8, #93             exit
    0xD4000001,  # svc #0
)

#: platform.machine() -> (ELF e_machine, code)
_CODE = {"x86_64": (62, _X86_64), "amd64": (62, _X86_64), "aarch64": (183, _AARCH64), "arm64": (183, _AARCH64)}

_BASE = 0x400000  # where the one segment is loaded


def _elf(machine: int, code: bytes) -> bytes:
    """A minimal 64-bit little-endian executable: the ELF header, one loadable segment, the code."""
    ehsize, phsize = 64, 56
    size = ehsize + phsize + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1, SysV
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        machine,
        1,  # EV_CURRENT
        _BASE + ehsize + phsize,  # entry: the code, right after the two headers
        ehsize,  # program headers follow the ELF header
        0,  # no section headers
        0,  # flags
        ehsize,
        phsize,
        1,  # one program header
        0,
        0,
        0,
    )
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)  # PT_LOAD, R+X
    return header + segment + code


def program(machine: str | None = None) -> bytes | None:
    """The executable for ``machine`` (this one's by default), or None where there is none."""
    entry = _CODE.get((machine or platform.machine()).lower())
    return None if entry is None else _elf(*entry)
