"""The 200-byte program that makes a command's shell a subreaper before it execs the shell."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from sandbox.helper.subreaper import program


@pytest.fixture
def subreaper(tmp_path: Path) -> Path:
    code = program()
    if code is None:
        pytest.skip("no subreaper program for this architecture")
    path = tmp_path / "subreaper"
    path.write_bytes(code)
    path.chmod(0o555)
    return path


def test_it_execs_its_arguments_with_the_environment(subreaper: Path) -> None:
    r = subprocess.run([str(subreaper), "/bin/bash", "-c", 'echo "$0|$*|$MARK"; exit 7', "zero", "a b", "c"],
                       env={"MARK": "kept", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (7, "zero|a b c|kept\n", "")


def test_what_the_shell_orphans_comes_back_to_the_shell(subreaper: Path) -> None:
    # A double fork: the middle process exits at once; the grandchild (sh) names its parent.
    script = "(sh -c 'sleep 0.3; grep PPid /proc/$$/status' &); sleep 1; echo shell $$"
    r = subprocess.run([str(subreaper), "/bin/bash", "-c", script], capture_output=True, text=True, timeout=30)
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines())
    assert lines["PPid:"].strip() == lines["shell"].strip(), r.stdout


def test_a_program_that_cannot_be_started_is_exit_127(subreaper: Path) -> None:
    assert subprocess.run([str(subreaper), "/no/such/program"]).returncode == 127


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_architecture_gets_a_well_formed_executable(machine: str, tmp_path: Path) -> None:
    code = program(machine)
    assert code is not None and code[:4] == b"\x7fELF" and code[4:6] == b"\x02\x01"  # 64-bit, little-endian
    e_type, e_machine, _, entry, phoff = struct.unpack_from("<HHIQQ", code, 16)
    assert (e_type, e_machine, phoff) == (2, {"x86_64": 62, "aarch64": 183}[machine], 64)
    p_type, p_flags, p_offset, p_vaddr, _, filesz, memsz = struct.unpack_from("<IIQQQQQ", code, 64)
    assert (p_type, p_flags, p_offset, filesz, memsz) == (1, 5, 0, len(code), len(code))
    assert p_vaddr + 120 == entry  # the code starts right after the two headers
    emulator = shutil.which("qemu-aarch64") if machine == "aarch64" and os.uname().machine != "aarch64" else None
    if machine != os.uname().machine and emulator is None:
        return  # nothing to run it with here
    path = tmp_path / "subreaper"
    path.write_bytes(code)
    path.chmod(0o555)
    r = subprocess.run([*([emulator] if emulator else []), str(path), "/bin/sh", "-c", "echo $0 ran; exit 4", "sh"],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (4, "sh ran\n")


def test_other_architectures_have_none() -> None:
    assert program("riscv64") is None and program("s390x") is None
