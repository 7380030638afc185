"""What sandloop's seccomp filter costs the commands under it, in one run.

One hardened container (the session's own settings: the engine's copy of the rules included, as
in every session); the same work run by ``docker exec`` alternately as it is and through the
helper's exec mode (``helper.pyz --exec``: the filter, then the same program), so the only
difference is the helper's filter. Each side measures the CPU time (user + system) of its work
from inside, after the filter is in place (bash's ``time``), so neither the exec nor Python's
start is counted, and the load of a shared machine changes little.

1. A syscall-bound loop (``getppid``, ``stat`` and a ``chmod`` whose mode the filter reads,
   100 000 times): the filter's cost per call, as bare as it gets.
2. Ordinary work: ``find /usr`` (a stat per file) and compiling a C file with gcc.

Targets: ordinary work ≤ 1.05× without the filter; the bare syscall loop ≤ 1.10× (every call of
it runs the filter and does almost nothing else). ``BENCH_RUNTIME=runsc`` measures under gVisor.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, median, rounds, spread
from sandbox import images
from sandbox.docker import WORKSPACE, confined, hardened_host_config, helper_mounts, workspace_mounts
from sandbox.lifecycle import owner_labels

RUNTIME = os.environ.get("BENCH_RUNTIME") or None

_LOOP_C = r"""
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct stat st;
    for (long i = atol(argv[1]); i > 0; i--) {
        getppid();                         /* a call the filter lets through at once */
        stat("/", &st);
        chmod("/no/such/file", 0755);      /* a call whose mode argument the filter reads */
    }
    return 0;
}
"""

WORK = {
    "syscall loop (3 × 100 000 calls)": "./loop 100000",
    "find /usr": "find /usr -xdev > /dev/null",
    "gcc -O2 of a small C file": "gcc -O2 -o loop2 loop.c",
}


def _timed(command: str) -> list[str]:
    # The CPU time (user + system) the work and its children used: the filter runs in the kernel
    # on every call, so it shows there, and unlike the wall clock it does not change with the
    # load of a shared machine.
    return ["bash", "-c", f'TIMEFORMAT="cpu %3U %3S"; {{ time {{ {command}; }} ; }} 2>&1']


def _run(container: object, argv: list[str]) -> float:
    code, out = container.exec_run(argv, workdir=WORKSPACE, user="1000:1000")  # type: ignore[attr-defined]
    last = out.decode(errors="replace").splitlines()[-1].split() if out else []
    if code != 0 or last[:1] != ["cpu"]:
        raise RuntimeError(f"{argv}: exit {code}: {out.decode(errors='replace')}")
    return float(last[1]) + float(last[2])


def main() -> None:
    client = docker.from_env()
    image = images.ensure(client, "shell")
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-") as tmp:
        workspace = Path(tmp)
        (workspace / "loop.c").write_text(_LOOP_C)
        for path in (workspace, workspace / "loop.c"):
            os.chown(path, 1000, 1000)
        host_config = hardened_host_config(
            client.api, mounts=[*workspace_mounts(workspace, ()), *helper_mounts([workspace], subreaper=False)],
            network="none", memory="1g", cpus=2.0, pids_limit=256, tmpfs_size="64m", runtime=RUNTIME,
            auto_remove=False)
        created = client.api.create_container(image, ["sleep", "3600"], user="1000:1000", network_disabled=True,
                                              host_config=host_config,
                                              labels=owner_labels("bench-seccomp", 3600.0, 3600.0))
        container = client.containers.get(created["Id"])
        container.start()
        try:
            _run(container, _timed("gcc -O2 -o loop loop.c"))
            print(f"runtime: {RUNTIME or 'engine default'}; the engine's profile in force on both sides")
            n = rounds(9, quick=1)
            for label, command in WORK.items():
                bare: list[float] = []
                filtered: list[float] = []
                for i in range(n):  # alternate who goes first: neither always meets warm caches
                    pair = [(bare, _timed(command)), (filtered, confined(_timed(command)))]
                    for samples, argv in pair if i % 2 else pair[::-1]:
                        samples.append(_run(container, argv))
                ratio = median(filtered) / median(bare)
                print(f"  {label}: without {spread(bare, ' ms', 1000, 1)}; with {spread(filtered, ' ms', 1000, 1)}")
                limit = 1.10 if label.startswith("syscall") else 1.05
                judge(f"{label}, with the filter / without", f"{ratio:.3f}×", f"<= {limit}×", ratio <= limit)
        finally:
            container.remove(force=True)


if __name__ == "__main__":
    main()
