"""The Kubernetes back-end, registered: :class:`~.session.KubernetesSession` behind the seam,
its reaper, and the checks ``sandloop doctor --backend kubernetes`` prints."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sandloop.errors import SandloopError

from ..base import Session
from ..docker import DockerConfig
from ..seam import Backend
from ..seccomp import describe
from .cluster import Cluster
from .manifest import SANDBOX_GROUP
from .options import KubernetesOptions
from .reaper import reap
from .session import KubernetesSession
from .warmpool import GROUP, VERSION

__all__ = ["BACKEND", "PERMISSIONS", "WARM_POOL_PERMISSIONS", "KubernetesBackend", "permissions"]

#: (verb, group, resource, subresource) the back-end needs in its namespace. A websocket attach
#: is authorized as ``get`` on pods/attach, and since Kubernetes 1.35 also as ``create``.
PERMISSIONS = [
    *[(verb, "", "pods", "") for verb in ("create", "get", "list", "watch", "delete")],
    ("create", "", "pods", "attach"),
    ("get", "", "pods", "attach"),
    ("create", "networking.k8s.io", "networkpolicies", ""),
    ("delete", "networking.k8s.io", "networkpolicies", ""),
    ("list", "networking.k8s.io", "networkpolicies", ""),
]


#: what claiming from a warm pool needs besides (agent-sandbox's SandboxClaims and Sandboxes).
WARM_POOL_PERMISSIONS = [
    *[(verb, GROUP, "sandboxclaims", "") for verb in ("create", "get", "list", "watch", "delete")],
    ("get", SANDBOX_GROUP, "sandboxes", ""),
]


def permissions(cluster: Cluster, *, warm_pool: bool = False) -> dict[str, str]:
    """Each permission: "allowed" or "DENIED (reason)", asked with SelfSubjectAccessReviews."""
    out = {}
    for verb, group, resource, sub in PERMISSIONS + (WARM_POOL_PERMISSIONS if warm_pool else []):
        allowed, reason = cluster.can(verb, resource, group=group, subresource=sub)
        what = f"{verb} {resource}{'/' + sub if sub else ''}{'.' + group if group else ''}"
        out[what] = "allowed" if allowed else f"DENIED{f' ({reason})' if reason else ''}"
    return out


class KubernetesBackend(Backend):
    name = "kubernetes"
    options_model = KubernetesOptions

    async def open(self, workspace: Path, config: DockerConfig, options: Any) -> Session:
        return await KubernetesSession.create(workspace, config, options)

    def reap(self, options: Any, *, everything: bool = False) -> list[tuple[str, str]]:
        cluster = Cluster(options)
        try:
            return reap(cluster, everything=everything)
        finally:
            cluster.close()

    def doctor(self, workspace: Path, options: Any, config: DockerConfig | None = None) -> dict[str, Any]:
        report: dict[str, Any] = {"ok": False, "backend": "kubernetes", "workspace": str(workspace.resolve())}
        try:
            cluster = Cluster(options)
        except SandloopError as exc:
            report["context"] = f"failed: {exc}"
            return report
        try:
            report["context"] = {"name": cluster.context, "server": cluster.server, "namespace": cluster.namespace,
                                 "version": cluster.version()}
            report["permissions"] = permissions(cluster, warm_pool=options.warm_pool is not None)
            config = config or DockerConfig()
            wanted = options.runtime_class or ("gvisor" if config.runtime == "runsc" else None)
            if wanted:
                found = cluster.can("get", "runtimeclasses", group="node.k8s.io", namespaced=False)[0]
                rc = cluster.runtime_class(wanted) if found else None
                report["runtime_class"] = (f"{wanted}: handler {rc.get('handler')}" if rc else
                                           f"{wanted}: not installed" if found else
                                           f"{wanted}: cannot read RuntimeClasses (pod creation will tell)")
            else:
                report["runtime_class"] = "none asked for (the cluster's default runtime)"
            if options.warm_pool:
                installed = cluster.has_resource(GROUP, VERSION, "sandboxclaims")
                report["warm_pool"] = (f"{options.warm_pool} (agent-sandbox installed)" if installed
                                       else "agent-sandbox is not installed, or this identity may not list "
                                       "SandboxClaims: plain pods")
            report["session"] = asyncio.run(_probe(workspace, config, options, cluster))
            denied = [k for k, v in report["permissions"].items() if v != "allowed"]
            report["ok"] = not denied and "not installed" not in str(report.get("runtime_class"))
        except SandloopError as exc:
            report["session"] = f"failed: {exc}"
        finally:
            cluster.close()
        return report


async def _probe(workspace: Path, config: DockerConfig, options: KubernetesOptions, cluster: Cluster) -> dict[str, Any]:
    probe = Cluster(options)  # the session closes the cluster it is given
    session = await KubernetesSession.create(workspace, config, options, cluster=probe, reap_stale=False)
    try:
        r = await session.run("id -u; grep -E '^CapEff' /proc/self/status | cut -f2; uname -r")
        uid, caps, kernel = ([*r.stdout.text.splitlines(), "", "", ""])[:3]
        pod = session.inspect()
        return {"pod": session.pod, "protocol": session.protocol, "uid_inside": uid,
                "capabilities_effective": caps, "kernel_inside": kernel,
                "runtime_class": (pod.get("spec") or {}).get("runtimeClassName") or "default",
                "seccomp": describe(session.hello), "helper": session.hello}
    finally:
        await session.close(copy_back=False)


BACKEND = KubernetesBackend()
