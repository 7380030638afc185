"""`sandloop gc` and `sandloop doctor`: the sandbox side of the command line.

Each subcommand sets ``func`` (args → exit code), the convention every part of the CLI follows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sandloop.errors import ConfigError

from . import backends, snapshots
from .docker import DockerConfig

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gc = subparsers.add_parser(
        "gc",
        help="remove sandbox containers whose owner is dead or whose expiry passed",
        description="Remove sandloop containers left behind (owner process dead, expired, exited). "
        "Exit 0 on success, 1 when no engine answers.",
    )
    gc.add_argument("--all", action="store_true", help="remove every sandloop container, live owners too")
    gc.add_argument("--json", action="store_true", help="print what was removed as JSON")
    _backend_flags(gc)
    gc.set_defaults(func=_gc)

    doctor = subparsers.add_parser(
        "doctor",
        help="check the engine, images, runtime and isolation actually in force",
        description="Start a real session and report what is really in force: the OCI runtime, the "
        "container user and why, capabilities, network, images, the browser. Exit 0 when a session "
        "works, 1 otherwise.",
    )
    doctor.add_argument("--repo", type=Path, default=Path.cwd(), help="workspace to check (default: .)")
    doctor.add_argument("--runtime", choices=["runc", "runsc"], default=None, help="runtime to insist on")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    _backend_flags(doctor)
    doctor.set_defaults(func=_doctor)


def _backend_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=backends.names(), default="docker",
                        help="the back-end to act on (default: docker)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a back-end option, as in the policy's [backend.NAME] table "
                        "(e.g. --set namespace=agents --set context=kind-sandloop)")


def _backend_options(args: argparse.Namespace) -> tuple[backends.Backend, Any]:
    table: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: write KEY=VALUE")
        try:
            table[key] = json.loads(value)  # numbers, booleans, lists as in TOML
        except ValueError:
            table[key] = value
    backend = backends.get(args.backend)
    return backend, backends.options_for(backend, table, lambda path: "--set")


def _gc(args: argparse.Namespace) -> int:
    backend, options = _backend_options(args)
    removed = backend.reap(options, everything=args.all)
    if args.json:
        # "container" on Docker, as it always was; a cluster's objects are "kind/name"
        key = "container" if args.backend == "docker" else "object"
        print(json.dumps([{key: name, "reason": reason} for name, reason in removed]))
    else:
        for name, reason in removed:
            print(f"removed {name}: {reason}")
        print(f"{len(removed)} {'container(s)' if args.backend == 'docker' else 'object(s)'} removed")
        # Snapshots are the user's (a run to resume), never garbage: counted, left alone.
        kept = snapshots.list_snapshots()
        if kept:
            size = sum(snap.size for snap in kept) / 1e6
            print(f"{len(kept)} snapshot(s) kept ({size:.1f} MB in run folders, and their images): "
                  "`sandloop snapshot ls` lists them, `sandloop snapshot prune` removes them")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    if not args.repo.is_dir():
        raise ConfigError(f"--repo {args.repo} is not a directory")
    backend, options = _backend_options(args)
    report = backend.doctor(args.repo, options, DockerConfig(runtime=args.runtime))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    from rich.console import Console
    from rich.table import Table

    table = Table(title="sandloop doctor", show_header=False)
    for key, value in report.items():
        if isinstance(value, dict):
            value = "\n".join(f"{k}: {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        table.add_row(key, str(value))
    Console().print(table)
    return 0 if report["ok"] else 1
