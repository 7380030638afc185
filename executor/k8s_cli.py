"""``sandloop k8s manifest``: every object a Kubernetes session would create, for auditors and
GitOps review — the NetworkPolicies, the egress proxy pod (with a network allow-list) and the
session pod, exactly as the session sends them, from a policy's ``[shell]``, ``[files]`` and
``[backend.kubernetes]`` sections and the checkout's read-only paths (its ``.git``, nested
repositories …: the pod mounts each read-only). Nothing is sent to a cluster.
"""

from __future__ import annotations

import argparse
import json
import secrets
from pathlib import Path
from typing import Any

from executor.environment import remote_config
from policies.engine import load_policy
from sandbox import backends
from sandbox.lifecycle import owner_labels
from sandbox.protected import find
from sandloop.errors import ConfigError

__all__ = ["manifest", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    k8s = subparsers.add_parser("k8s", help="the Kubernetes back-end: what it would create")
    sub = k8s.add_subparsers(dest="k8s_command", required=True)
    p = sub.add_parser(
        "manifest",
        help="print every object a session would create (NetworkPolicies, egress proxy, Pod)",
        description="Print the objects a Kubernetes session started now on the checkout would create, in "
        "creation order, from the policy's [shell], [files] and [backend.kubernetes] sections and the paths of the "
        "checkout it mounts read-only (YAML documents; --json: one v1 List). Labels carry this process as the "
        "owner, as a session's would. Nothing is sent to a cluster.",
    )
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--repo", default=".", help="the checkout a session would copy in (default: .)")
    p.add_argument("--image", help="the image a run would be given with --image")
    p.add_argument("--json", action="store_true", help="one JSON v1 List instead of YAML documents")
    p.add_argument("--warm-pool", metavar="NAME",
                   help="instead: what to apply once for warm pool NAME (agent-sandbox SandboxTemplate, "
                   "SandboxWarmPool, and a NetworkPolicy denying warm pods everything)")
    p.add_argument("--replicas", type=int, default=2, help="warm pods to keep ready (with --warm-pool)")
    p.set_defaults(func=_manifest)


def manifest(policy: str | None = None, *, repo: str | Path | None = None, image: str | None = None,
             warm_pool: str | None = None, replicas: int = 2) -> list[dict[str, Any]]:
    """The objects, as dicts (what ``--json`` prints as a List's items); ``repo``: the checkout
    whose read-only paths the pod would mount (None: a checkout with none)."""
    from sandbox.kubernetes.manifest import plan, pod_image, warm_pool_objects
    from sandbox.kubernetes.options import KubernetesOptions

    engine = load_policy(policy)
    options = backends.validate_options("kubernetes", KubernetesOptions, engine.policy.backend.options("kubernetes"),
                                        engine.loaded.where)
    config = remote_config(engine.loaded, "kubernetes", image=image)
    session_id = secrets.token_hex(6)
    p = plan(config, options, session_id=session_id,
             labels=owner_labels(session_id, config.max_lifetime_s, config.idle_expiry_s),
             namespace=options.namespace or "default",
             image=pod_image(config, options))
    if warm_pool:
        return warm_pool_objects(p, warm_pool, replicas)
    read_only: list[str] = []
    if repo is not None:
        checkout = Path(repo).resolve()
        if not checkout.is_dir():
            raise ConfigError(f"--repo {repo}: not a directory")
        read_only = [path.relative_to(checkout).as_posix() for path in find(checkout, config.read_only_paths).paths]
    return p.objects(read_only)


def _manifest(args: argparse.Namespace) -> int:
    objects = manifest(args.policy, repo=args.repo, image=args.image, warm_pool=args.warm_pool,
                       replicas=args.replicas)
    if args.json:
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
        return 0
    try:
        import yaml  # the kubernetes client's dependency, there whenever the back-end is
    except ImportError:
        raise ConfigError("YAML output needs PyYAML (pip install 'sandloop[kubernetes]'); --json needs "
                          "nothing") from None

    dumper_class: Any = type("Dumper", (yaml.SafeDumper,), {})  # our representer on a copy, not on yaml's

    def text(dumper: Any, value: str) -> Any:
        # The loader's source reads as code, not as one escaped line.
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    dumper_class.add_representer(str, text)
    print(yaml.dump_all(objects, Dumper=dumper_class, sort_keys=False, width=120), end="")
    return 0
