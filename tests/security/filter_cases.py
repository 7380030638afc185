"""What sandloop's seccomp filter must refuse inside a sandbox, and what it must let through: the
commands every back-end's tests run (Docker with runc and with gVisor, Kubernetes pods), and the
files they need, made on the host before the sandbox starts.

Refused: every way the task names to leave a setuid/setgid bit on a file of the checkout, a user
namespace, and — on x86_64, where the compiler can build them — calls through the i386 ABI
(``int 0x80``) and the x32 ABI (bit 30 on the number), which the filter answers by killing the
process (SIGSYS) before the kernel looks at them: the engine's own copy of the rules would answer
EPERM instead, so that exit status says the helper's filter is the one in force. Let through:
pip installing a package, git, gcc, Node.js with a worker thread, and multi-threaded programs.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
from pathlib import Path

from sandbox.base import Session
from tests.conftest import missing

#: What every sandbox refuses; each would otherwise leave a setid file (or a namespace).
REFUSED = [
    "touch t-us && chmod u+s t-us",
    "touch t-gs && chmod g+s t-gs",
    "install -m 4755 /bin/true t-install",
    "python3 -c \"import os; os.close(os.open('t-open', os.O_CREAT | os.O_WRONLY, 0o4755))\"",
    "mkdir -m 2775 t-dir",
    "mknod -m 4644 t-fifo p",
    "python3 -c \"import os, stat; os.mknod('t-node', stat.S_IFREG | 0o6644)\"",
    "unshare -U true",
]

#: chmod(abi-target, 04755) through another ABI than x86_64's own
_ABI_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
static char target[] = "abi-target";  /* a static binary's data lies below 4 GiB: int 0x80 can name it */
int main(int argc, char **argv) {
    long ret;
    if (argc == 2 && !strcmp(argv[1], "i386"))
        __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(15L), "b"(target), "c"(04755L) : "memory");
    else if (argc == 2 && !strcmp(argv[1], "x32"))
        ret = syscall(0x40000000L | SYS_chmod, target, 04755);
    else
        return 2;
    printf("returned %ld\n", ret);
    return 0;
}
"""

_THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
static void *work(void *arg) { return arg; }
int main(void) {
    pthread_t threads[8];
    long sum = 0;
    for (long i = 0; i < 8; i++) pthread_create(&threads[i], NULL, work, (void *)i);
    for (int i = 0; i < 8; i++) { void *r; pthread_join(threads[i], &r); sum += (long)r; }
    printf("threads %ld\n", sum);
    return 0;
}
"""

_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "demo"
version = "1.0"
"""

_WORKER_JS = """\
const { Worker } = require("worker_threads");
const worker = new Worker("require('worker_threads').parentPort.postMessage(6 * 7)", { eval: true });
worker.on("message", (m) => { console.log("worker " + m); worker.terminate(); });
"""

#: (command, the last line it prints): ordinary work, unchanged by the filter. Offline: pip
#: installs a package of the checkout with the image's setuptools (through ``python -m pip``:
#: /tmp is mounted noexec).
ORDINARY = [
    ("python3 -m venv --system-site-packages /tmp/venv && /tmp/venv/bin/python -m pip install -q --no-index "
     "--no-build-isolation --disable-pip-version-check ./pkg && "
     "/tmp/venv/bin/python -c 'import demo; print(demo.VALUE)'", "42"),
    ("git init -q repo && cd repo && echo x > f && git add f && "
     "git -c user.name=t -c user.email=t@example.test commit -qm first && git log --oneline | wc -l", "1"),
    ("gcc -O1 -pthread -o threads threads.c && ./threads", "threads 28"),
    ("node worker.js", "worker 42"),
    ("python3 -c 'import concurrent.futures as f; print(sum(f.ThreadPoolExecutor(8).map(abs, range(100))))'",
     "4950"),
    ("chmod 755 pkg && mkdir -m 750 plain && python3 -c \"import os; print(oct(os.stat('pkg').st_mode & 0o7777), "
     "oct(os.stat('plain').st_mode & 0o7777))\"", "0o755 0o750"),
]

SIGSYS_EXIT = 128 + signal.SIGSYS


def other_abis() -> bool:
    """Whether this machine can build the i386 / x32 probe (x86_64 and a C compiler)."""
    return platform.machine() == "x86_64"


def prepare(ws: Path) -> None:
    """The files the commands need, owned like the checkout: the sources, the package, and the
    ABI probe built here (static: it runs in any image)."""
    (ws / "pkg" / "demo").mkdir(parents=True)
    (ws / "pkg" / "pyproject.toml").write_text(_PYPROJECT)
    (ws / "pkg" / "demo" / "__init__.py").write_text("VALUE = 42\n")
    (ws / "threads.c").write_text(_THREADS_C)
    (ws / "worker.js").write_text(_WORKER_JS)
    (ws / "abi-target").write_text("a file of the checkout\n")
    if other_abis():
        gcc = shutil.which("gcc")
        if gcc is None:
            missing("gcc", "the i386 / x32 probe is built with it")
        assert gcc is not None
        (ws / "abi.c").write_text(_ABI_C)
        subprocess.run([gcc, "-static", "-no-pie", "-O1", "-o", str(ws / "abi"), str(ws / "abi.c")], check=True,
                       capture_output=True, timeout=120)
    owner = ws.stat()
    for path in [ws, *ws.rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid)


def setid_files(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if not p.is_symlink() and p.stat().st_mode & 0o6000]


async def check(session: Session, *, gvisor: bool = False) -> None:
    """Every refusal refused (the ABI probe killed by the filter), every ordinary command fine,
    and no setid file in the sandbox's checkout."""
    for command in REFUSED:
        result = await session.run(command)
        assert result.exit_code != 0, (command, result.stdout.text, result.stderr.text)
    if other_abis():
        for abi in ("i386", "x32"):
            result = await session.run(f"./abi {abi}")
            assert "returned" not in result.stdout.text, (abi, result.stdout.text)
            if gvisor and abi == "i386":
                # gVisor has no i386 ABI at all: int 0x80 is a fault there (SIGSEGV), never a call.
                assert result.signal is not None, result
            else:
                assert result.exit_code == SIGSYS_EXIT and result.signal == signal.SIGSYS, (abi, result)
    for command, last in ORDINARY:
        result = await session.run(command, timeout_s=300)
        assert result.exit_code == 0, (command, result.stdout.text, result.stderr.text)
        assert result.stdout.text.splitlines()[-1] == last, (command, result.stdout.text)
    found = await session.run("find . -perm /6000 -print")
    assert found.exit_code == 0 and found.stdout.text == "", found.stdout.text
