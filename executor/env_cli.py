"""``sandloop env``: build, show, list and prune environments (a policy's ``[environment]``).

* ``build`` runs setup now (live output on stderr, ``environment.log`` in a folder under the
  state directory) and prints the key and the image;
* ``show`` says what a run would use and whether it is cached, building and setting up nothing;
* ``ls`` lists cached environments (with when each was last used);
* ``prune`` removes environments not used for ``--days`` (default 30), and the
  ``sandloop-sandbox`` images of other Dockerfiles than this installation's built as long ago
  (``--all``: every environment and every such image).

Each takes ``--json``. Exit codes as ``sandloop run``: 0 done, 1 the engine failed, 2 usage (a
policy that does not load, a setup that failed, an image that cannot be used).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import docker

from executor.environment import environment_events
from executor.sandbox_config import environment_spec
from executor.terminal import console as terminal_console
from executor.terminal import shown
from policies.engine import PolicyEngine, load_policy
from sandbox.docker import engine_errors
from sandbox.environment import store
from sandbox.environment.prepare import plan, prepare
from sandloop.errors import ConfigError
from sandloop.text import short_image

__all__ = ["register"]


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="build, show, list and prune environments ([environment])",
                                # the module's text, without its reStructuredText quoting
                                description=(__doc__ or "").replace("``", "`"),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    group = env.add_subparsers(dest="env_command", required=True)

    def leaf(name: str, text: str, func: Any, *, policy: bool) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=text, description=text)
        if policy:
            p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
            p.add_argument("--repo", default=".", help="the checkout (default: .)")
            p.add_argument("--image", help="start from this image instead of the policy's")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.set_defaults(func=func)
        return p

    leaf("build", "run the environment's setup now (unless cached); print its key and image", _build, policy=True)
    leaf("show", "what a run would start from, and whether it is cached (builds nothing)", _show, policy=True)
    leaf("ls", "list cached environments", _ls, policy=False)
    p = leaf("prune", "remove environments not used for N days (or all), and sandbox images of other "
             "Dockerfiles built that long ago (or all)", _prune, policy=False)
    p.add_argument("--days", type=float, default=30.0, help="unused for this many days (default: 30)")
    p.add_argument("--all", action="store_true", help="remove every cached environment")


def _client() -> docker.DockerClient:
    with engine_errors("cannot reach the Docker engine"):
        return docker.from_env()


def _repo(args: argparse.Namespace) -> Path:
    repo = Path(args.repo)
    if not repo.is_dir():
        raise ConfigError(f"--repo {args.repo} is not a directory")
    return repo.resolve()


#: The name a checkout's own policy file usually has: never read unless given (--policy).
CHECKOUT_POLICY = "sandloop.toml"


def _policy(args: argparse.Namespace, repo: Path) -> tuple[PolicyEngine, str, str | None]:
    """The policy --policy names (else the default preset), how to name it, and a note when a
    policy file in the checkout or here was left unread: the checkout never chooses its own
    policy, and nobody should take the default for theirs."""
    engine = load_policy(args.policy)
    if args.policy is not None:
        return engine, str(engine.path), None
    unread = [path for path in dict.fromkeys((Path(CHECKOUT_POLICY), repo / CHECKOUT_POLICY))
              if path.is_file()]
    note = None
    if unread:
        note = (f"{unread[0]} is not read: a checkout never chooses its own policy; "
                f"give it with --policy {unread[0]}")
    return engine, "default (no --policy given)", note


def _build(args: argparse.Namespace) -> int:
    repo = _repo(args)
    engine, _, note = _policy(args, repo)
    if note:
        terminal_console().print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    spec = environment_spec(engine.loaded, args.image)
    console = terminal_console()
    log_dir = store.state_folder() / "logs" / time.strftime("%Y%m%dT%H%M%S")
    prepared = asyncio.run(prepare(spec, repo, client=_client(), log_dir=log_dir,
                                   on_event=environment_events(lambda kind, data: None, console)))
    result = {"image": prepared.image, "key": prepared.key, "source": prepared.source,
              "log": str(log_dir / "environment.log") if (log_dir / "environment.log").exists() else None}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"key: {prepared.key or '-'}\nimage: {prepared.image or 'the default shell image'}\n"
              f"source: {prepared.source}")
    return 0


def _show(args: argparse.Namespace) -> int:
    repo = _repo(args)
    engine, policy, note = _policy(args, repo)
    info = plan(environment_spec(engine.loaded, args.image), repo, _client())
    info["policy"] = policy
    if note:
        info["note"] = note
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    console = terminal_console()
    if args.policy is None:
        console.print("no --policy given: this is the default preset's environment, not a policy of yours",
                      highlight=False)
    if note:
        console.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    if info["default"]:
        console.print("no \\[environment]: runs start from the default shell image as it is", highlight=False)
    for name in ("policy", "preset", "base", "image", "key", "cached", "owner", "packages", "setup", "setup_network",
                 "setup_registries", "cache_key", "files", "cache_paths", "trust_host_ca"):
        if name in info:
            value = info[name]
            if isinstance(value, dict):
                value = ", ".join(f"{k}={short_image(str(v))}" for k, v in value.items()) or "-"
            elif isinstance(value, list):
                value = "; ".join(map(str, value)) or "-"
            console.print(f"{name}: {shown(value)}", highlight=False)
    return 0


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "never"


def _ls(args: argparse.Namespace) -> int:
    with engine_errors("cannot list environments"):
        found = store.list_environments(_client())
    if args.json:
        print(json.dumps([env.to_json() for env in found], indent=2))
        return 0
    for env in found:
        tags = ", ".join(env.tags) or env.image_id[7:19]
        print(f"{tags}  {env.kind}  +{env.size_mb} MB  created {_when(env.created)}  "
              f"last used {_when(env.last_used)}  from {env.base}")
    print(f"{len(found)} environment(s)")
    return 0


def _prune(args: argparse.Namespace) -> int:
    client = _client()
    with engine_errors("cannot prune environments"):
        removed, kept = store.prune(client, older_than_days=args.days, everything=args.all)
        stale, stale_kept = store.stale_sandbox_images(client, remove=True,
                                                       older_than_days=None if args.all else args.days)
    if args.json:
        print(json.dumps({"removed": [env.to_json() for env in removed], "stale_sandbox_images": stale,
                          "kept": [{"image": image, "reason": why} for image, why in [*kept, *stale_kept]]},
                         indent=2))
        return 0
    for env in removed:
        print(f"removed {', '.join(env.tags) or env.image_id[7:19]} (last used {_when(env.last_used)})")
    for tag in stale:
        print(f"removed {tag} (built from another Dockerfile)")
    for image, why in [*kept, *stale_kept]:
        print(f"kept {image}: {why}")
    print(f"{len(removed)} environment(s) and {len(stale)} stale sandbox image(s) removed")
    return 0
