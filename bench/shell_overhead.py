"""Shell-call overhead: sandloop's session vs native subprocess and `docker exec`, in one run.

1. Interleaved rounds of ``echo hi`` through native ``subprocess.run``, ``docker exec`` on a warm
   container (the docker SDK's exec API, which is what the CLI does) and a sandloop session.
   The native baseline is measured twice: called straight from the event loop (no thread hop:
   the floor, which the target is judged against) and through ``asyncio.to_thread`` (what an
   asyncio program must do with a blocking call). The hop itself is measured alone, and so is a
   helper round trip that runs no command (the transport's floor), and the native side's own
   code run by python3 inside the session's container, in batches of 20 between the rounds
   (the engine's floor: the container's cgroup share, seccomp filters and CPU quota).
2. One ``shell_call`` of 200 × ``true`` answered by the handler (the default policy, an audit log,
   the session), against 200 × native ``bash -c true``, interleaved.
3. 8 × ``sleep 0.5`` in parallel through one session, against 8 native ``bash -c 'sleep 0.5'``
   started at once and the same 8 started by one shell inside the container (the floors: what
   the kernel, bash and the container's CPU quota take beyond the 0.5 s).
4. Start-up, the same lifecycle on both sides: start → the first command (``echo hi``) answered
   → the container removed. A session (``DockerSession.create`` with its reap of stale
   containers, ``run``, ``close``) against a bare container of the same image (create with
   ``--network none``, attach, start, read the answer, remove), alternating which goes first;
   and, for context, a session that skips the reap, and the floor for a helper written in
   Python: a bare container whose answer comes from python3 importing the helper's modules.
5. A profile (full runs, or ``--profile``): py-spy samples the helper (by its pid on the host)
   and this process while the session runs ``echo hi``, and the samples are put in parts
   (:mod:`bench.profile`): the spawn, the wait for the command, the cgroup counters, the reply …

Where the time goes: 1.–3. print each hop's median (and its share of the median) from the
timestamps a command collects on its way (``CommandResult.timing``: host sent → helper received
→ shell being started → started → its exit seen → result made → reply on the host → caller
woken), so a regression shows where it is.

Targets: sandloop median ≤ 1.5× native (p90 ≤ 3×), ≥ 15× faster than docker exec; the 200-command
call ≤ 1.5× native; 8 parallel ≤ 1.05 × 0.5 s; session start ≤ 1.5× a bare container, to the first
answer and to removal. Run it on a loaded machine too (``make test`` beside it, or two busy
processes): load is where the hops show; the load average is printed at the start and the end.
Where a floor measured in the run already misses a target, the bench says so.
``BENCH_RUNTIME=runsc`` measures under gVisor (both sides of 4. use it).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
from openai.types.responses import ResponseFunctionShellToolCall

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.profile import Profile, Rule, pid_of, print_parts
from bench.report import QUICK, judge, load, median, p90, rounds, spread, timed
from executor.approvals import DenyAll
from executor.handlers.shell import handle_shell_call
from executor.policy_gate import PolicyGate
from executor.testing import shell_call
from policies.audit import AuditLog
from policies.engine import load_policy
from sandbox import images
from sandbox.docker import DockerConfig, DockerSession
from sandloop.errors import SandloopError
from sandloop.results import CommandResult

RUNTIME = os.environ.get("BENCH_RUNTIME") or None  # e.g. runsc, to measure under gVisor
ECHO = ["bash", "-c", "echo hi"]
TRUE = ["bash", "-c", "true"]

#: The hops a command passes, as (name, from stamp, to stamp) of CommandResult.timing.
HOPS = (
    ("host → helper", "sent", "received"),
    ("helper: request → shell being started", "received", "started"),
    ("spawn (fork, exec subreaper + bash)", "started", "spawned"),
    ("the command, until its exit is seen", "spawned", "exited"),
    ("output collected, result made", "exited", "answered"),
    ("helper → host", "answered", "arrived"),
    ("host: reply → caller woken", "arrived", "settled"),
)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def same_clock(timings: Sequence[Mapping[str, float]]) -> bool:
    """Do the helper's stamps fall between the host's (one clock: no kernel of the sandbox's own)?"""
    return all(t["sent"] <= t["received"] <= t["answered"] <= t["arrived"] for t in timings)


def _hop_line(name: str, values: Sequence[float], med_total: float, mean_total: float, indent: str) -> None:
    mean = statistics.fmean(values)
    print(f"{indent}{name:44s} median {ms(median(values)):>9} {median(values) / med_total:6.1%}   "
          f"mean {ms(mean):>9} {mean / mean_total:6.1%}")


def breakdown(timings: Sequence[Mapping[str, float]], totals: Sequence[float], *, indent: str = "    ") -> None:
    """Each hop's median and mean, and their shares of the median and mean ``totals`` (what the
    caller measured around each command): under load the tails are long, and only the means add
    up; the medians say what a typical command meets."""
    pairs = [(t, total) for t, total in zip(timings, totals, strict=True)
             if all(k in t for _, a, b in HOPS for k in (a, b)) and t["exited"]]
    if not pairs:
        print(f"{indent}(no timings: this back-end does not stamp its commands)")
        return
    timings, totals = [t for t, _ in pairs], [total for _, total in pairs]
    med_total, mean_total = median(totals), statistics.fmean(totals)
    hops: list[tuple[str, list[float]]] = []
    if same_clock(timings):
        hops = [(name, [t[b] - t[a] for t in timings]) for name, a, b in HOPS]
    else:  # the sandbox has a clock of its own (gVisor): both ways of the transport as one
        hops = [("host → helper → host", [t["arrived"] - t["sent"] - (t["answered"] - t["received"])
                                          for t in timings]),
                *((name, [t[b] - t[a] for t in timings]) for name, a, b in HOPS[1:5]),
                (HOPS[6][0], [t["settled"] - t["arrived"] for t in timings])]
    hops.append(("the session layer around it", [total - (t["settled"] - t["sent"]) for t, total in pairs]))
    for name, values in hops:
        _hop_line(name, values, med_total, mean_total, indent)


#: The native side's own code, run by python3 inside the session's container and timed there: the
#: same subprocess.run of the same command under the container's cgroup, seccomp filters and CPU
#: quota, where sandloop's commands run. What it takes beyond native is the engine's floor.
INSIDE_NATIVE = ("import subprocess, time\n"
                 "for _ in range({n}):\n"
                 "    start = time.perf_counter()\n"
                 "    subprocess.run({argv!r}, capture_output=True, check=True)\n"
                 "    print(time.perf_counter() - start)\n")
#: Rounds between two batches of the in-container native side (a batch is one command).
BATCH = 20


async def inside_native(session: DockerSession, count: int) -> list[float]:
    """``count`` in-container subprocess.run of ECHO, each timed inside (seconds)."""
    code = INSIDE_NATIVE.format(n=count, argv=ECHO)
    got = await session.run(f"python3 -I -S -c {shlex.quote(code)}", timeout_s=120)
    if got.exit_code != 0:
        raise RuntimeError(f"the in-container native side failed: {got.stderr.text}")
    return [float(line) for line in got.stdout.text.split()]


async def per_command(client: docker.DockerClient, image: str, session: DockerSession) -> None:
    n = rounds(200, quick=10)
    warm = client.containers.run(image, ["sleep", "3600"], detach=True, network_mode="none", remove=True)
    results: list[CommandResult] = []
    try:
        async def native_direct() -> None:
            subprocess.run(ECHO, capture_output=True, check=True)

        async def native_thread() -> None:
            await asyncio.to_thread(subprocess.run, ECHO, capture_output=True, check=True)

        async def hop() -> None:
            await asyncio.to_thread(int)

        async def docker_exec() -> None:
            await asyncio.to_thread(warm.exec_run, ECHO)

        async def sandloop() -> None:
            results.append(await session.run("echo hi"))

        async def round_trip() -> None:
            await session.stat("no-such-file")

        paths = {"native": native_direct, "native via thread": native_thread,
                 "thread hop alone": hop, "sandloop": sandloop, "helper round trip": round_trip,
                 "docker exec": docker_exec}
        samples: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(5):  # warm-up
            for fn in paths.values():
                await fn()
        results.clear()
        inside_native_samples: list[float] = []
        for i in range(n):
            if i % BATCH == 0:  # interleaved in batches: one command runs BATCH of them
                inside_native_samples += await inside_native(session, min(BATCH, n - i))
            for name, fn in paths.items():
                if name == "docker exec" and i % 4:
                    continue  # docker exec is slow: a quarter of the rounds is plenty
                samples[name].append(await timed(fn))
    finally:
        warm.remove(force=True)

    samples["native in the container"] = inside_native_samples
    med = {k: median(v) for k, v in samples.items()}
    tail = {k: p90(v) for k, v in samples.items()}
    print(f"echo hi, {n} interleaved rounds (docker exec: {len(samples['docker exec'])})")
    for k in samples:
        print(f"  {k:23s} median {ms(med[k]):>10}   p90 {ms(tail[k]):>10}")
    ratio, tail_ratio = med["sandloop"] / med["native"], tail["sandloop"] / tail["native"]
    judge("sandloop / native (no thread hop on the native side)",
          f"median {ratio:.2f}× ({ms(med['sandloop'])} vs {ms(med['native'])})", "<= 1.5×", ratio <= 1.5)
    judge("sandloop / native, p90", f"{tail_ratio:.2f}×", "<= 3×", tail_ratio <= 3)
    print("  where a command's time goes (each hop: median and its share of the median, mean and its share):")
    breakdown([r.timing for r in results], samples["sandloop"])
    inside = median([r.timing["exited"] - r.timing["started"] for r in results])
    floor = inside + med["helper round trip"]
    print(f"  floors, same run: the shell's own start and run inside the container {ms(inside)} "
          f"({inside / med['native']:.2f}× native's whole subprocess.run: the container's fork, exec "
          f"and wait under its seccomp filter and CPU quota); a helper round trip that runs no command "
          f"{ms(med['helper round trip'])}; the two together {ms(floor)} = {floor / med['native']:.2f}× "
          f"native, so sandloop is {med['sandloop'] / floor:.2f}× its floor")
    engine = med["native in the container"] / med["native"]
    print(f"  the engine's floor, same run: the native side's own subprocess.run inside the session's container "
          f"{ms(med['native in the container'])} = {engine:.2f}× native (the container's cgroup share on a busy "
          f"machine, its seccomp filters, its CPU quota; below 1×: the container is no floor in this run"
          f"); sandloop / that floor {med['sandloop'] / med['native in the container']:.2f}×")
    if engine * 1.05 > 1.5:
        print(f"  so the target is below the floor here: a command in this container cannot cost less than "
              f"{engine:.2f}× native before sandloop adds anything")
    print(f"  for context: sandloop / native via asyncio.to_thread "
          f"{med['sandloop'] / med['native via thread']:.2f}× (the hop alone: {ms(med['thread hop alone'])})")
    exec_ratio = med["docker exec"] / med["sandloop"]
    judge("docker exec / sandloop", f"median {exec_ratio:.1f}× slower ({ms(med['docker exec'])})",
          ">= 15×", exec_ratio >= 15)


async def one_call(session: DockerSession, state: Path) -> None:
    """One shell_call of 200 × ``true`` through the handler, its gate and audit log included."""
    count, n = 200, rounds(7, quick=1)
    engine = load_policy("default")
    gate = PolicyGate(engine, DenyAll(), AuditLog(state / "audit.jsonl"))
    call = ResponseFunctionShellToolCall.model_validate(shell_call(
        ["true"] * count, call_id="call_bench", id="sh_bench", status="completed"))
    ran: list[CommandResult | SandloopError] = []
    run_many = session.run_many

    async def recording(commands: Sequence[str], **kwargs: Any) -> list[CommandResult | SandloopError]:
        got = await run_many(commands, **kwargs)
        ran.extend(got)
        return got

    session.run_many = recording  # type: ignore[method-assign]
    native: list[float] = []
    ours: list[float] = []
    per_call: list[list[Mapping[str, float]]] = []
    try:
        await handle_shell_call(call, session, gate)  # warm-up
        for _ in range(n):
            start = time.perf_counter()
            for _ in range(count):
                subprocess.run(TRUE, capture_output=True, check=True)
            native.append(time.perf_counter() - start)
            ran.clear()
            start = time.perf_counter()
            out = await handle_shell_call(call, session, gate)
            ours.append(time.perf_counter() - start)
            assert all(o["outcome"] == {"type": "exit", "exit_code": 0} for o in out["output"]), out
            per_call.append([r.timing for r in ran if isinstance(r, CommandResult)])
    finally:
        del session.run_many
    ratio = median(ours) / median(native)
    print(f"one shell_call of {count} × true (default policy, audit log), {n} interleaved rounds: "
          f"call {spread(ours, ' ms', 1000, 0)}; {count} × native bash -c true {spread(native, ' ms', 1000, 0)}")
    judge(f"{count}-command call / {count} × native", f"median {ratio:.2f}× "
          f"({ms(median(ours) / count)} vs {ms(median(native) / count)} a command)", "<= 1.5×", ratio <= 1.5)
    print(f"  where a command's {ms(statistics.fmean(ours) / count)} (mean) go (means over the calls' "
          "commands, which add up):")
    timings = [t for call_timings in per_call for t in call_timings]
    gaps = [b["started"] - a["answered"] for c in per_call for a, b in itertools.pairwise(c)]
    inside = statistics.fmean([t["exited"] - t["started"] for t in timings])
    helper = statistics.fmean([c[-1]["answered"] - c[0]["received"] for c in per_call]) / count
    parts = (("helper: one command done → the next started", statistics.fmean(gaps)),
             ("the shell's start and run, until its exit is seen", inside),
             ("output collected, result made", statistics.fmean([t["answered"] - t["exited"] for t in timings])),
             ("host: gate, audit, request, outputs (not overlapped)", statistics.fmean(ours) / count - helper))
    for name, value in parts:
        print(f"    {name:56s} {ms(value):>10}  {value / (statistics.fmean(ours) / count):6.1%}")
    print(f"  floor, same run: the shell's own start and run inside the container, {ms(inside)}, is "
          f"{inside / (statistics.fmean(native) / count):.2f}× a whole native subprocess.run of bash -c true")


#: 8 × sleep 0.5 started at once by one shell inside the container, timed there: the floor the
#: container itself sets (its CPU quota, its seccomp filter, its share of a busy machine).
INSIDE_FLOOR = ("s=$EPOCHREALTIME; for i in 1 2 3 4 5 6 7 8; do bash -c 'sleep 0.5' & done; wait; "
                "echo $s $EPOCHREALTIME")


async def parallel(session: DockerSession) -> None:
    samples: list[float] = []
    floors: list[float] = []
    inside: list[float] = []
    slowest: list[Mapping[str, float]] = []
    for _ in range(rounds(10, quick=1)):
        start = time.perf_counter()
        procs = [subprocess.Popen(["bash", "-c", "sleep 0.5"]) for _ in range(8)]
        for proc in procs:
            proc.wait()
        floors.append((time.perf_counter() - start) / 0.5)
        began, ended = (await session.run(INSIDE_FLOOR)).stdout.text.replace(",", ".").split()
        inside.append((float(ended) - float(began)) / 0.5)
        start = time.perf_counter()
        got = await asyncio.gather(*[session.run("sleep 0.5") for _ in range(8)])
        samples.append((time.perf_counter() - start) / 0.5)
        slowest.append(max((r.timing for r in got), key=lambda t: t.get("settled", 0.0)))
    judge("8 × sleep 0.5 in parallel, × 0.5 s", spread(samples, "×", digits=3), "<= 1.05×",
          median(samples) <= 1.05)
    print(f"  floors, same run: 8 native bash -c 'sleep 0.5' at once {spread(floors, '×', digits=3)}; "
          f"the same started by one shell inside the container {spread(inside, '×', digits=3)}")
    floor = min(median(floors), median(inside))
    if floor > 1.05:
        print(f"  the floors miss the target themselves on this machine now (the lower {floor:.3f}×): the kernel's "
              f"and the engine's cost of starting 8 processes at once under this load, not sandloop's; sandloop "
              f"/ the in-container floor {median(samples) / median(inside):.3f}×")
    if slowest and all("sent" in t for t in slowest):
        print("  the last command of each round to answer (medians):")
        for name, a, b in (("sent → its shell started", "sent", "spawned"),
                           ("the sleep, until its exit is seen", "spawned", "exited"),
                           ("exit seen → the caller woken", "exited", "settled")):
            print(f"    {name:40s} {ms(median([t[b] - t[a] for t in slowest])):>10}")


#: The helper's parts, by the innermost frame of a sample taken while it served a request.
HELPER_PARTS: tuple[Rule, ...] = (
    ("spawn: vfork until the shell is exec'd (_fork_exec)", ("Popen._execute_child",)),
    ("spawn: Popen's own Python work", ("Popen.__init__", "Popen._get_handles")),
    ("spawn: the helper's books and oom_score_adj", ("Shells.",)),
    ("the command: select until its exit and EOFs, output read", ("Helper._follow (",)),
    ("cgroup counters (OOM kills, pids)", ("oom_kills", "pids_exhausted", "_read_int", "_pids_limit_hits")),
    ("output kept and base64'd", ("Capped.",)),
    ("the reply: JSON and write", ("Helper._send", "encode_frame")),
    ("request parsed, dispatched, result made", ("parse_request", "Helper._answer", "Helper._dispatch",
                                                  "Helper.run (")),
)
#: The host's parts, by the innermost frame of a sample taken in the event loop.
HOST_PARTS: tuple[Rule, ...] = (
    ("waiting for the helper (the loop's epoll)", ("select (selectors.py", "EpollSelector.select")),
    ("sending the request (frame, socket write)", ("HelperClient.request", "encode_frame", "_locked_send")),
    ("the reply: read, decoded, future settled", ("data_received", "FrameDecoder", "HelperClient.deliver",
                                                   "_settle")),
    ("the CommandResult made", ("result_from_wire", "capture_from_wire")),
    ("the session layer (limits, env, client)", ("HelperSession.run", "ReplaceableSession._client")),
    ("the event loop's own work", ("_run_once", "Handle._run")),
)


async def profiled(session: DockerSession) -> None:
    """``echo hi`` through the session with py-spy sampling the helper and this process: which
    parts of each side the time goes to (a phase of its own: the sampling costs CPU)."""
    n = rounds(400, quick=40)
    pid = pid_of(session.inspect())
    if pid is None:
        print("profile: the helper's pid is unknown")
        return
    helper, host = Profile(pid), Profile(os.getpid())
    timings: list[Mapping[str, float]] = []
    start = time.perf_counter()
    try:
        if helper.problem is None or host.problem is None:
            for _ in range(n):
                timings.append((await session.run("echo hi")).timing)
    finally:
        elapsed = time.perf_counter() - start
        helper_samples, host_samples = helper.stop(), host.stop()
    per = elapsed / max(1, len(timings))
    print(f"profile (py-spy, sampling both sides; {len(timings)} × echo hi at {ms(per)} a command while sampled)")
    if helper.problem:
        print(f"    the helper: {helper.problem}")
    else:
        serve = statistics.fmean([t["answered"] - t["received"] for t in timings])
        print_parts("the helper, while serving a request (of its mean "
                    f"{ms(serve)} from request read to result made)", helper_samples, HELPER_PARTS,
                    within="Helper._serve_one", per=serve)
    if host.problem:
        print(f"    the host: {host.problem}")
    else:
        print_parts("the host's event loop", host_samples, HOST_PARTS, within="_run_once", per=per)


#: A bare container's answer from python3 importing what the helper imports (the standard library
#: modules of sandbox/helper), for the start-up's floor: any helper written in Python pays this.
PYTHON_HI = ["python3", "-I", "-S", "-c",
             "import argparse, base64, contextlib, ctypes, errno, functools, json, selectors, signal, socket, "
             "struct, subprocess, threading, typing; print('hi')"]


def bare_lifecycle(client: docker.DockerClient, image: str, argv: Sequence[str] = ECHO) -> tuple[float, float]:
    """A plain container: (seconds to the answer of ``argv`` (``hi``), seconds until it is removed)."""
    api = client.api
    start = time.perf_counter()
    created = api.create_container(image, list(argv), network_disabled=True,
                                   host_config=api.create_host_config(network_mode="none", runtime=RUNTIME))
    raw = api.attach_socket(created["Id"], params={"stdout": 1, "stderr": 1, "stream": 1})
    sock: socket.socket = getattr(raw, "_sock", raw)
    try:
        api.start(created["Id"])
        data = b""
        while b"hi\n" not in data:  # the attach stream is framed, the payload is in there
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"the bare container closed its stream early: {data!r}")
            data += chunk
        answered = time.perf_counter() - start
    finally:
        sock.close()
    api.remove_container(created["Id"], force=True)
    return answered, time.perf_counter() - start


async def session_lifecycle(client: docker.DockerClient, workspace: Path, *,
                            reap: bool = True) -> tuple[float, float]:
    """A session: (seconds to the answer of ``echo hi``, seconds until closed and removed)."""
    start = time.perf_counter()
    session = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client,
                                         reap_stale=reap)
    try:
        result = await session.run("echo hi")
        assert result.stdout.text == "hi\n", result
        answered = time.perf_counter() - start
    finally:
        await session.close()
    return answered, time.perf_counter() - start


async def startup(client: docker.DockerClient, image: str, workspace: Path) -> None:
    n = rounds(15, quick=2)
    bare: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    unreaped: list[tuple[float, float]] = []
    python: list[tuple[float, float]] = []
    for i in range(n):  # alternate who goes first, so neither always meets a warmer engine
        if i % 2:
            ours.append(await session_lifecycle(client, workspace))
            bare.append(await asyncio.to_thread(bare_lifecycle, client, image))
        else:
            bare.append(await asyncio.to_thread(bare_lifecycle, client, image))
            ours.append(await session_lifecycle(client, workspace))
        unreaped.append(await session_lifecycle(client, workspace, reap=False))
        python.append(await asyncio.to_thread(bare_lifecycle, client, image, PYTHON_HI))
    print(f"start-up, the same lifecycle on both sides, {n} rounds each")
    for label, index in (("start → first answer", 0), ("start → answer → removed", 1)):
        s, b = [x[index] for x in ours], [x[index] for x in bare]
        ratio = median(s) / median(b)
        print(f"  {label}: session {spread(s, ' ms', 1000, 0)}; bare {spread(b, ' ms', 1000, 0)}")
        judge(f"session / bare container, {label}", f"{ratio:.2f}×", "<= 1.5×", ratio <= 1.5)
    bare_first = median([x[0] for x in bare])
    skip = median([x[0] for x in unreaped])
    print(f"  for context: a session that skips its reap of stale containers answers first in "
          f"{skip * 1000:.0f} ms ({skip / bare_first:.2f}× bare)")
    floor = median([x[0] for x in python])
    print(f"  floor, same run: a bare container whose answer comes from python3 importing the helper's standard "
          f"library modules answers in {floor * 1000:.0f} ms ({floor / bare_first:.2f}× bare): what a Python helper "
          f"pays before its first line of its own; the session / that floor "
          f"{median([x[0] for x in ours]) / floor:.2f}×")


async def main() -> None:
    client = docker.from_env()
    image = images.ensure(client, "shell")
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-") as tmp:
        workspace = Path(tmp)
        os.chown(workspace, 1000, 1000)
        session = await DockerSession.create(workspace, DockerConfig(runtime=RUNTIME), client=client)
        print(f"runtime: {session.runtime_in_force()}; {load()}")
        try:
            await per_command(client, image, session)
            with tempfile.TemporaryDirectory(prefix="sandloop-bench-state-") as state:
                await one_call(session, Path(state))
            await parallel(session)
            if not QUICK or "--profile" in sys.argv[1:]:
                await profiled(session)
        finally:
            await session.close()
        await startup(client, image, workspace)
    print(f"at the end: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
