#!/usr/bin/env python3
"""Time a first ``make demo`` as a bare machine runs it, phase by phase, without touching the
engine everyone else uses.

A bare machine has no venv, no images and no base image. This script makes one as far as the
project's own state goes: a fresh clone (no ``.venv``, no ``.build``) and a second, private
Docker daemon with its own data root, exec root, pid file, socket and bridge, so it starts with
no images at all — then runs the command (``make demo`` unless told otherwise) in the clone
with ``DOCKER_HOST`` pointed at that daemon, stamps every line it prints, and splits the run
into phases at the bootstrap's own progress lines (venv, base image, each sandbox image, the
demo). The shared engine is never asked anything; the private daemon is stopped by its PID and
its data removed at the end.

What it cannot make bare: host packages (docker.io, debootstrap, chromium) are already installed
on a machine that runs this, so their apt-get install time is not in the figures; the script
says which of them the run would have installed. Nothing is cached between runs: debootstrap
downloads the base system again and every image builds from nothing.

Not run in CI (it takes minutes). Run it as root from a checkout:
    python3 scripts/time_bootstrap.py [--ref HEAD] [--json FILE] [--after CMD] [-- CMD ...]
``--after`` times a second command once the first is done (e.g. ``./scripts/bootstrap``: how
long until ``make test`` has everything, with the background builds the demo left running).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BRIDGE = "sltb0"
SUBNET = "10.231.7"  # a /24 that no other engine on this machine uses
TARGET_S = 120

# (pattern on a line the bootstrap or the demo prints, the phase that line starts)
PHASES: tuple[tuple[str, str], ...] = (
    (r"creating venv|installing sandloop", "venv"),
    (r"Docker engine answers|starting dockerd", "engine check"),
    (r"pulling debian:bookworm-slim", "base image"),
    (r"building sandloop-sandbox:(\w+)", "image {0}"),
    (r"in the background \(pid", "background build started"),
    (r"waiting for the build of sandloop-sandbox:(\w+)", "wait for {0}"),
    (r"install -y chromium", "host chromium"),
    (r"sandloop demo", "demo"),
)


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


@contextmanager
def _network() -> Iterator[None]:
    """A bridge of its own, and the two rules a build container needs to reach the apt mirror
    through it (the private daemon is told not to touch iptables, which the shared one owns)."""
    rules = [("-t", "nat", "POSTROUTING", "-s", f"{SUBNET}.0/24", "!", "-o", BRIDGE, "-j", "MASQUERADE"),
             ("-t", "filter", "FORWARD", "-i", BRIDGE, "-j", "ACCEPT"),
             ("-t", "filter", "FORWARD", "-o", BRIDGE, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
              "-j", "ACCEPT")]
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    added: list[tuple[str, ...]] = []
    try:
        _run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for table, name, chain, *spec in rules:
            _run("iptables", table, name, "-I", chain, "1", *spec)
            added.append((table, name, chain, *spec))
        yield
    finally:
        for table, name, chain, *spec in added:
            _run("iptables", table, name, "-D", chain, *spec, check=False)
        _run("ip", "link", "del", BRIDGE, check=False)


@contextmanager
def _private_engine(work: Path) -> Iterator[tuple[str, float]]:
    """A second dockerd with nothing in it; yields its DOCKER_HOST and how long it took to answer."""
    engine = work / "e"
    engine.mkdir()
    config: dict[str, object] = {"bridge": BRIDGE, "iptables": False, "ip-masq": False}
    shared = Path("/etc/docker/daemon.json")
    if shared.is_file() and shared.stat().st_size:  # the same runtimes (runsc), so the bootstrap
        runtimes = json.loads(shared.read_text()).get("runtimes")  # never reconfigures an engine
        if runtimes:
            config["runtimes"] = runtimes
    (engine / "daemon.json").write_text(json.dumps(config))
    host = f"unix://{engine}/docker.sock"
    started = time.monotonic()
    with (engine / "dockerd.log").open("wb") as log:
        daemon = subprocess.Popen(
            ["dockerd", "--config-file", str(engine / "daemon.json"), "--data-root", str(engine / "data"),
             "--exec-root", str(engine / "x"), "--pidfile", str(engine / "dockerd.pid"), "-H", host],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        env = {**os.environ, "DOCKER_HOST": host}
        for _ in range(120):
            if subprocess.run(["docker", "info"], env=env, capture_output=True).returncode == 0:
                break
            if daemon.poll() is not None:
                raise SystemExit(f"the private dockerd exited: see {engine / 'dockerd.log'}")
            time.sleep(0.5)
        else:
            raise SystemExit(f"the private dockerd did not answer: see {engine / 'dockerd.log'}")
        yield host, time.monotonic() - started
    finally:
        daemon.send_signal(signal.SIGTERM)  # this daemon only, by its own PID
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _phase(line: str) -> str | None:
    for pattern, name in PHASES:
        if match := re.search(pattern, line):
            return name.format(*match.groups())
    return None


Phases = list[tuple[str, float]]


def _timed(argv: Sequence[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[Phases, float, int]:
    """Run argv, echo and stamp its lines; returns the phases (name, start offset), the total and
    the exit code."""
    phases: Phases = [("start", 0.0)]
    started = time.monotonic()
    with log.open("w") as out, subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True, bufsize=1) as child:
        assert child.stdout is not None
        for line in child.stdout:
            at = time.monotonic() - started
            out.write(f"{at:7.1f} {line}")
            sys.stdout.write(f"{at:7.1f} {line}")
            name = _phase(line)
            if name is not None and name != phases[-1][0]:
                phases.append((name, at))
    return phases, time.monotonic() - started, child.returncode


def _report(title: str, phases: Phases, total: float) -> list[dict[str, object]]:
    print(f"\n{title}: {total:.1f} s")
    rows: list[dict[str, object]] = []
    for (name, at), nxt in zip(phases, [p[1] for p in phases[1:]] + [total], strict=True):
        rows.append({"phase": name, "start_s": round(at, 1), "seconds": round(nxt - at, 1)})
        print(f"  {name:<22} from {at:6.1f} s  {nxt - at:6.1f} s")
    return rows


def _stop_background(state: Path) -> None:
    """The background image build the demo's bootstrap left running (it talks to the private
    daemon, which is about to stop): ended by the PID it recorded."""
    pid_file = state / "sandloop" / "images" / "background.pid"
    try:
        pid = int(pid_file.read_text().strip())
        os.killpg(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="time_bootstrap.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="HEAD", help="what to clone from this checkout (default HEAD)")
    parser.add_argument("--json", help="write the phases here as JSON")
    parser.add_argument("--after", help="a second command to time once the first is done (shell syntax)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (clone, logs)")
    parser.add_argument("command", nargs="*", help="what to time (default: make demo)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (a second dockerd, a bridge)")
    command = args.command or ["make", "demo"]
    work = Path(tempfile.mkdtemp(prefix="sl-tb-"))
    clone = work / "clone"
    result: dict[str, object] = {"ref": _run("git", "-C", str(ROOT), "rev-parse", args.ref).stdout.strip(),
                                 "command": command, "cores": os.cpu_count(),
                                 "load_before": os.getloadavg()[0],
                                 "host_packages_present": [p for p in ("dockerd", "debootstrap", "chromium")
                                                           if shutil.which(p)]}
    try:
        _run("git", "clone", "-q", "--no-local", str(ROOT), str(clone))
        _run("git", "-C", str(clone), "checkout", "-q", result["ref"])  # type: ignore[arg-type]
        with _network(), _private_engine(work) as (host, engine_s):
            result["engine_start_s"] = round(engine_s, 1)
            print(f"private engine {host} answered in {engine_s:.1f} s; timing {' '.join(command)}", flush=True)
            # Its own state folder too: build locks and the background build's pid and log.
            env = {**os.environ, "DOCKER_HOST": host, "XDG_STATE_HOME": str(work / "state")}
            env.pop("VIRTUAL_ENV", None)
            phases, total, code = _timed(command, clone, env, work / "first.log")
            result.update(first=_report(" ".join(command), phases, total), first_total_s=round(total, 1),
                          first_rc=code)
            # The target for a first `make demo` on this machine class (quiet or not, the
            # load is printed beside it: the figure is only comparable under the same load).
            print(f"target <= {TARGET_S} s: {'met' if total <= TARGET_S else 'MISSED'} "
                  f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            if args.after and code == 0:
                phases, total, code = _timed(["bash", "-c", args.after], clone, env, work / "after.log")
                result.update(after=_report(args.after, phases, total), after_total_s=round(total, 1),
                              after_rc=code)
            _stop_background(work / "state")
        result["load_after"] = os.getloadavg()[0]
        print(json.dumps(result, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        return 0 if result.get("first_rc") == 0 and result.get("after_rc", 0) == 0 else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
            if work.exists():
                print(f"could not remove all of {work}: remove it by hand", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
