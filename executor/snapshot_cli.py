"""``sandloop snapshot RUN | ls | prune``: take, list and remove sessions' snapshots.

* ``snapshot RUN`` asks the running ``sandloop run`` of RUN (a run id or folder) for a snapshot:
  SIGUSR1 to its front-end (named with its start time in the run's folder, so a reused pid is
  never signalled), which takes it at the conversation's next safe point; the command waits for
  the snapshot's manifest to be written anew and prints where it is;
* ``snapshot ls`` lists every run's snapshot (size, turns, the root's image if committed);
* ``snapshot prune`` removes snapshots older than ``--days`` (default 30), or ``--all``: their
  folder and image; the rest of each run folder (logs, audit) stays.

Resume one with ``sandloop run --resume RUN [TASK]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from executor.exits import ExitCode, fail
from sandloop.errors import SandloopError, describe
from sandloop.text import short_image

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("snapshot", help="snapshot a running session; list or prune snapshots",
                              description=(__doc__ or "").replace("``", "`"),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="RUN | ls | prune", help="a running run's id or folder, or ls, or prune")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="RUN: seconds to wait for the snapshot (default: 300; a turn's calls finish first)")
    p.add_argument("--days", type=float, default=30.0, help="prune: older than this many days (default: 30)")
    p.add_argument("--all", action="store_true", help="prune: every snapshot")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.target == "ls":
            return _ls(args)
        if args.target == "prune":
            return _prune(args)
        return _take(args)
    except (SandloopError, OSError) as exc:
        return fail(args, ExitCode.USAGE if isinstance(exc, SandloopError) else ExitCode.ERROR, describe(exc))


def _count(folder: Path) -> int:
    from sandbox.snapshots import FOLDER, MANIFEST

    try:
        count = json.loads((folder / FOLDER / MANIFEST).read_text(encoding="utf-8")).get("count")
    except (OSError, ValueError, AttributeError):
        return 0
    return count if isinstance(count, int) else 0


def _take(args: argparse.Namespace) -> int:
    from executor.run import FRONTEND, SNAPSHOT_FAILED, SNAPSHOT_REQUEST
    from executor.snapshot import run_folder_of
    from sandbox.lifecycle import proc_start_time
    from sandbox.snapshots import FOLDER
    from sandloop.hostfiles import HostDir

    folder = run_folder_of(args.target)
    try:
        frontend = json.loads((folder / FRONTEND).read_text(encoding="utf-8"))
        pid, start = int(frontend["pid"]), frontend["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return fail(args, ExitCode.USAGE, f"{folder} has no running front-end to ask (only `sandloop run` takes "
                                          "snapshots on request; from Python, call run.snapshot())")
    if start is None or proc_start_time(pid) != start:
        return fail(args, ExitCode.USAGE, f"the run in {folder} is not running any more (pid {pid}): resume its last "
                                          "snapshot with `sandloop run --resume`")
    before = _count(folder)
    asked = time.time()
    request = f"{SNAPSHOT_REQUEST}{secrets.token_hex(8)}"
    with HostDir(folder) as run:
        run.replace(request, b"")
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + args.timeout
    while _count(folder) <= before:
        failed = _failure(folder / SNAPSHOT_FAILED, asked)
        if failed is not None:
            return fail(args, ExitCode.ERROR, f"the run in {folder} could not take the snapshot: {failed}")
        if proc_start_time(pid) != start:
            _withdraw(folder, request)
            return fail(args, ExitCode.ERROR, f"the run in {folder} (pid {pid}) ended before its snapshot came")
        if time.monotonic() > deadline:
            if _withdraw(folder, request):
                return fail(args, ExitCode.ERROR, f"no snapshot came from the run in {folder} (pid {pid}) within "
                                                  f"{args.timeout:g} s: the request is withdrawn, none will be taken")
            if _count(folder) > before:
                break  # taken up and written since the last look
            return fail(args, ExitCode.ERROR, f"no snapshot came from the run in {folder} (pid {pid}) within "
                                              f"{args.timeout:g} s, but the run is taking it now: it will still "
                                              "be written (`sandloop snapshot ls` shows it)")
        time.sleep(0.05)
    where = folder / FOLDER
    if args.json:
        print(json.dumps({"snapshot": str(where), "count": _count(folder)}))
    else:
        print(f"snapshot {_count(folder)} of {folder.name}: {where}  (resume: sandloop run --resume {folder.name})")
    return 0


def _withdraw(folder: Path, request: str) -> bool:
    """Take back a request the run has not taken up yet; False when it already has."""
    from sandloop.hostfiles import HostDir

    with HostDir(folder) as run:
        return run.remove(request)


def _failure(path: Path, since: float) -> str | None:
    """The error a run wrote after ``since`` when a snapshot it was asked for failed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("time"), (int, float)) or data["time"] < since:
        return None
    return str(data.get("error"))


def _ls(args: argparse.Namespace) -> int:
    from sandbox.snapshots import list_snapshots

    client = _engine()
    try:
        found = list_snapshots(client=client)
    finally:
        if client is not None:
            client.close()
    if args.json:
        print(json.dumps([snap.to_json() for snap in found], indent=2))
        return 0
    if not found:
        print("no snapshots")
    for snap in found:
        when = datetime.datetime.fromtimestamp(snap.created).strftime("%Y-%m-%d %H:%M")
        size = f"files {snap.size / 1e6:.1f} MB"
        if snap.image:  # the root's layer is on the engine, not in the folder: both are shown
            layer = "gone" if snap.layer is None else f"{snap.layer / 1e6:.1f} MB"
            size += f" + root layer {layer}"
        image = f"  root {short_image(snap.image)}" if snap.image else ""
        print(f"{snap.run_id}  {when}  {size}  {snap.turns} turn(s){image}")
    return 0


def _engine() -> Any:
    """A Docker client when some snapshot committed its root (None otherwise: listing the
    others needs no engine)."""
    from sandbox.docker import engine_errors
    from sandbox.snapshots import list_snapshots

    if not any(snap.image for snap in list_snapshots()):
        return None
    import docker

    with engine_errors("cannot reach the Docker engine"):
        return docker.from_env()


def _prune(args: argparse.Namespace) -> int:
    from sandbox.snapshots import prune

    client = _engine()
    try:
        removed = prune(older_than_days=args.days, everything=args.all, client=client)
    finally:
        if client is not None:
            client.close()
    if args.json:
        print(json.dumps([snap.to_json() for snap in removed], indent=2))
    else:
        print(f"removed {len(removed)} snapshot(s)" + "".join(f"\n  {snap.run_id}" for snap in removed))
    return 0
