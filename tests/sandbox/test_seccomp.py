"""sandloop's seccomp filter itself: the classic-BPF program made from the rule table (read by a
small interpreter, for both architectures, every rule and every other call), the same program
installed by the real kernel in forked children (threads, children, 32-bit and x32 calls), the
helper program that cannot install it and so refuses every request, and the Docker profile made
from the same table. What the filter does inside containers and pods: tests/security and tests/k8s.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox import seccomp
from sandbox.bundle import helper_programs
from sandbox.helper import confine
from sandbox.helper.client import HelperClient
from sandbox.helper.main import Helper
from sandbox.helper.seccomp_rules import (
    ARCHES,
    CLONE_NEW,
    ENOSYS,
    EPERM,
    NUMBERS,
    RULES,
    SETID,
    Rule,
    arch_for,
    program,
)
from sandloop.errors import SandboxUnavailable
from tests.conftest import missing

ALLOW, KILL, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
AUDIT_I386, AUDIT_ARM = 0x40000003, 0x40000028
HOST = os.uname().machine


# --- a classic-BPF interpreter, for these tests only -----------------------------------------


def evaluate(code: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the kernel's seccomp would return for this call, read instruction by instruction
    (only what a seccomp program may hold: word loads from seccomp_data, jumps, returns)."""
    data = struct.pack("<IIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    insns = [struct.unpack_from("<HBBI", code, at) for at in range(0, len(code), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == 0x20:
            assert k % 4 == 0 and k < len(data), k  # the kernel's own check of a load
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op in (0x15, 0x35, 0x45):
            taken = acc == k if op == 0x15 else acc >= k if op == 0x35 else bool(acc & k)
            pc += 1 + (jt if taken else jf)
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"instruction {op:#x} has no place in a seccomp filter")


def _numbered(arch: str) -> list[tuple[Rule, int]]:
    column = ARCHES[arch].column
    return [(rule, nr) for rule in RULES if (nr := NUMBERS[rule.syscall][column]) is not None]


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_every_rule_refuses_exactly_what_it_names(arch: str) -> None:
    code, native = program(arch), ARCHES[arch].audit
    assert len(code) % 8 == 0 and len(code) // 8 < 4096  # BPF_MAXINSNS
    for rule, nr in _numbered(arch):
        if rule.arg is None:
            assert evaluate(code, nr, native, (0o4755,) * 6) == ERRNO | rule.errno, rule
            continue
        clean = 0o755 if rule.mask == SETID else 17  # a plain mode; clone's SIGCHLD
        for bit in (1 << n for n in range(32) if rule.mask >> n & 1):
            args = [clean] * 6
            args[rule.arg] = clean | bit
            assert evaluate(code, nr, native, tuple(args)) == ERRNO | EPERM, (rule, bit)
            args[rule.arg] = bit << 32 | clean  # the upper half is not the mode: the kernel ignores it
            assert evaluate(code, nr, native, tuple(args)) == ALLOW, (rule, bit)
        others = [0o6777] * 6  # the bits in any other argument do not matter
        others[rule.arg] = clean
        assert evaluate(code, nr, native, tuple(others)) == ALLOW, rule


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_every_other_call_is_allowed_and_other_abis_are_killed(arch: str) -> None:
    code, native = program(arch), ARCHES[arch].audit
    listed = {nr for _, nr in _numbered(arch)}
    for nr in range(1024):
        if nr not in listed:
            assert evaluate(code, nr, native, (0o6777, CLONE_NEW, 0o6777, 0o6777)) == ALLOW, nr
    for foreign in {AUDIT_I386, AUDIT_ARM, *(a.audit for a in ARCHES.values())} - {native}:
        assert evaluate(code, 20, foreign) == KILL  # getpid as i386 or arm (or the other 64-bit ABI)
    assert evaluate(code, 0xFFFFFFFF, native) == ALLOW  # no call at all: the kernel answers ENOSYS
    if ARCHES[arch].x32:
        assert evaluate(code, 0x40000000 | 39, native) == KILL  # x32's getpid
        assert evaluate(code, 0x40000000 | 90, native, (0, 0o755)) == KILL  # x32's chmod


def test_the_numbers_are_the_kernels(request: pytest.FixtureRequest) -> None:
    """Every number against the kernel's own tables (the C library headers of this machine)."""
    headers = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
               "aarch64": Path("/usr/include/asm-generic/unistd.h")}
    if not all(path.is_file() for path in headers.values()):
        missing("the kernel's syscall headers", "install linux-libc-dev")
    newer = {"fchmodat2": 452}  # newer than some headers (Linux 6.6): the same number everywhere
    for arch, path in headers.items():
        known = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", path.read_text())}
        for name, numbers in NUMBERS.items():
            nr = numbers[ARCHES[arch].column]
            if nr is None:
                assert name not in known, (arch, name)
            elif name in known:
                assert known[name] == nr, (arch, name)
            else:
                assert newer.get(name) == nr, (arch, name)
    assert {rule.syscall for rule in RULES} == set(NUMBERS)


def test_the_docker_profile_is_the_same_table() -> None:
    for runtime in (None, "runc", "runsc"):
        profile = json.loads(seccomp.no_setid_profile(runtime, "x86_64"))
        assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
        assert profile["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
        named = {name for entry in profile["syscalls"] for name in entry["names"]}
        expected = {rule.syscall for rule in RULES} - ({"clone3"} if runtime == "runsc" else set())
        assert named == expected
        for rule in RULES:
            entries = [e for e in profile["syscalls"] if rule.syscall in e["names"]]
            if runtime == "runsc" and rule.syscall == "clone3":
                continue
            assert {e["errnoRet"] for e in entries} == {rule.errno}
            if rule.arg is not None:  # one rule per bit of the mask, on the same argument
                bits = sorted(a["value"] for e in entries for a in e["args"])
                assert sum(bits) == rule.mask and {a["index"] for e in entries for a in e["args"]} == {rule.arg}
    assert json.loads(seccomp.no_setid_profile(None, "aarch64"))["architectures"] == ["SCMP_ARCH_AARCH64",
                                                                                       "SCMP_ARCH_ARM"]


def test_an_unknown_architecture_has_no_filter() -> None:
    with pytest.raises(ValueError, match="s390x"):
        program("s390x")
    assert arch_for("amd64").name == "x86_64" and arch_for("arm64").name == "aarch64"


# --- the real kernel -------------------------------------------------------------------------


def in_child(body: Callable[[], dict[str, object]]) -> tuple[dict[str, object], int]:
    """Run ``body`` in a forked child (the filter stays there); its answer and its wait status."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            answer = json.dumps(body()).encode()
        except BaseException as exc:
            answer = json.dumps({"error": repr(exc)}).encode()
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    return (json.loads(data) if data else {}), status


def _syscall(nr: int, *args: int | bytes) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return 0 if result >= 0 else ctypes.get_errno()


def _errno(call: Callable[[], object]) -> int:
    try:
        call()
    except OSError as exc:
        return exc.errno or -1
    return 0


def test_the_kernel_refuses_what_the_table_says_in_every_thread_and_child(tmp_path: Path) -> None:
    column = arch_for(HOST).column

    def nr(name: str) -> int:
        number = NUMBERS[name][column]
        assert number is not None
        return number

    def body() -> dict[str, object]:
        os.chdir(tmp_path)
        open("f", "w").close()
        started, go, seen = threading.Event(), threading.Event(), {}

        def other_thread() -> None:  # already running when the filter comes: TSYNC covers it
            started.set()
            go.wait()
            seen["thread chmod"] = _errno(lambda: os.chmod("f", 0o4755))

        thread = threading.Thread(target=other_thread)
        thread.start()
        started.wait()
        confine.install()
        go.set()
        thread.join()
        shell = subprocess.run(["sh", "-c", "touch g; chmod u+s g || echo refused; grep Seccomp /proc/self/status"],
                               capture_output=True, text=True)
        late = threading.Thread(target=lambda: seen.setdefault("new thread", "started"))
        late.start()  # glibc's clone3 answers ENOSYS, and pthread_create falls back to clone
        late.join()
        return {
            **seen,
            "chmod 4755": _errno(lambda: os.chmod("f", 0o4755)),
            "chmod 2755": _errno(lambda: os.chmod("f", 0o2755)),
            "chmod 0755": _errno(lambda: os.chmod("f", 0o755)),
            "open 4755": _errno(lambda: os.close(os.open("h", os.O_CREAT | os.O_WRONLY, 0o4755))),
            "mkdir 2775": _errno(lambda: os.mkdir("d", 0o2775)),
            "mknod 4644": _errno(lambda: os.mknod("n", stat.S_IFREG | 0o4644)),
            "fchmodat 6755": _syscall(nr("fchmodat"), -100, b"f", 0o6755, 0),
            "fchmodat2": _syscall(nr("fchmodat2"), -100, b"f", 0o755, 0),
            "openat2": _syscall(nr("openat2"), -100, b"f", 0, 0),
            "clone3": _syscall(nr("clone3"), 0, 0),
            # Each of these fails without the filter too, but with another errno: nothing is made.
            "clone NEWUSER": _syscall(nr("clone"), 0x10000000 | 0x10000, 0, 0, 0, 0),  # CLONE_THREAD: EINVAL
            "unshare NEWUSER": _syscall(nr("unshare"), 0x10000000),
            "unshare FILES": _syscall(nr("unshare"), 0x400),  # no namespace: allowed
            "ptrace": _syscall(nr("ptrace"), 0x7FFF, os.getpid(), 0, 0),  # ESRCH otherwise
            "io_uring_setup": _syscall(nr("io_uring_setup"), 8, 0),
            "shell": shell.stdout,
            "status": dict(confine.status()),
        }

    answer, status = in_child(body)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, answer
    assert answer.pop("new thread") == "started"
    shell, state = answer.pop("shell"), answer.pop("status")
    assert answer == {
        "thread chmod": EPERM, "chmod 4755": EPERM, "chmod 2755": EPERM, "chmod 0755": 0, "open 4755": EPERM,
        "mkdir 2775": EPERM, "mknod 4644": EPERM, "fchmodat 6755": EPERM, "fchmodat2": ENOSYS,
        "openat2": ENOSYS, "clone3": ENOSYS, "clone NEWUSER": EPERM, "unshare NEWUSER": EPERM,
        "unshare FILES": 0, "ptrace": EPERM, "io_uring_setup": ENOSYS,
    }
    assert "refused" in str(shell) and "Seccomp:\t2" in str(shell)  # children inherit it
    assert state == {"filter": "installed", "mode": 2, "filters": 1 + (confine.status()["filters"] or 0), "arch": HOST}
    for name in ("f", "g", "h", "n"):
        path = tmp_path / name
        assert not path.exists() or not path.stat().st_mode & SETID, name
    assert not (tmp_path / "d").exists()


def test_a_call_of_another_abi_kills_the_process() -> None:
    def x32_getpid() -> dict[str, object]:
        confine.install()
        return {"returned": _syscall(0x40000000 | 39)}

    if not ARCHES[arch_for(HOST).name].x32:
        pytest.skip(f"{HOST} has no x32 ABI (the 32-bit arm one: tests/security, with a compiler)")
    answer, status = in_child(x32_getpid)
    assert answer == {} and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS


def test_the_helper_class_never_installs_it(tmp_path: Path) -> None:
    """Tests run Helper in-process: only the program's entry point installs the filter."""
    before = confine.status()
    hello = Helper(tmp_path).hello()
    assert hello["seccomp"]["filter"] == "off"
    assert confine.status() == before and before["filter"] == "off"


# --- the helper program ----------------------------------------------------------------------

#: Fills this process's seccomp budget (the kernel caps the instructions of all the filters of a
#: process, each counting a few more) with filters that allow everything, until not even one
#: instruction fits, then execs the helper: the kernel refuses its filter (ENOMEM), as a kernel
#: without room or without seccomp would.
_NO_ROOM = textwrap.dedent("""
    import ctypes, os, struct, sys
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    n = 4096
    while n:
        code = ctypes.create_string_buffer(struct.pack("<HBBI", 6, 0, 0, 0x7FFF0000) * n)
        if libc.prctl(22, 2, ctypes.byref(Fprog(n, ctypes.addressof(code))), 0, 0) != 0:
            n //= 2
    os.execv(sys.executable, [sys.executable, "-I", *sys.argv[1:]])
""")


def _start(argv: list[str]) -> tuple[subprocess.Popen[bytes], HelperClient]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def send(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    return proc, HelperClient(stdout.read1, send, name="helper program")  # type: ignore[attr-defined]


async def test_a_helper_without_its_filter_refuses_every_request(tmp_path: Path) -> None:
    helper, _ = helper_programs()
    proc, client = _start([sys.executable, "-I", "-c", _NO_ROOM, str(helper), "--workspace", str(tmp_path)])
    try:
        with pytest.raises(SandboxUnavailable) as info:
            await client.hello()
        assert "seccomp filter could not be installed (seccomp(SECCOMP_SET_MODE_FILTER): Cannot allocate memory)" \
            in str(info.value)
        assert "runs no command" in str(info.value)
        with pytest.raises(SandboxUnavailable):
            await client.run("touch ran", timeout_s=5, max_output_bytes=100, env={})
        assert not (tmp_path / "ran").exists()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(30) == 0  # the end of its input ends it
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


async def test_the_helper_program_installs_it_unless_told_not_to(tmp_path: Path) -> None:
    helper, _ = helper_programs()
    for extra, expected in (([], "installed"), (["--no-seccomp"], "off")):
        proc, client = _start([sys.executable, "-I", str(helper), "--workspace", str(tmp_path), *extra])
        try:
            hello = await client.hello()
            assert hello["seccomp"]["filter"] == expected
            result = await client.run("touch f; chmod u+s f; echo $?", timeout_s=10, max_output_bytes=100, env={})
            assert result.stdout.text == ("1\n" if expected == "installed" else "0\n")
        finally:
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            proc.stdin.close()
            proc.wait(30)
            proc.stdout.close()
            proc.stderr.close()
        (tmp_path / "f").unlink()


def test_the_exec_mode_installs_it_then_runs_the_program(tmp_path: Path) -> None:
    helper, _ = helper_programs()
    (tmp_path / "f").touch()
    done = subprocess.run([sys.executable, "-I", "-S", str(helper), confine.EXEC, "sh", "-c",
                           "chmod u+s f || echo refused; grep Seccomp: /proc/self/status"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines() == ["refused", "Seccomp:\t2"], done
    assert not (tmp_path / "f").stat().st_mode & SETID
    gone = subprocess.run([sys.executable, "-I", "-S", str(helper), confine.EXEC, "/no/such/program"],
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 127 and "cannot run /no/such/program" in gone.stderr
