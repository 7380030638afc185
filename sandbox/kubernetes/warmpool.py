"""Sessions claimed from an agent-sandbox ``SandboxWarmPool`` (kubernetes-sigs/agent-sandbox).

When the cluster serves the ``extensions.agents.x-k8s.io/v1beta1`` CRDs, a session creates a
``SandboxClaim`` naming the pool, watches it (no polling) until it names a ready ``Sandbox``,
and attaches to that sandbox's pod. The pool's pods are the session pod of ``sandloop k8s
manifest --warm-pool NAME`` (its ``SandboxTemplate``): they wait in the loader until a session
attaches and sends the helper, so a claimed session skips scheduling, image pull and container
start. The claim adds the session's labels to the pod, so the session's NetworkPolicies apply;
until then a namespace-wide NetworkPolicy from the same manifest denies warm pods everything.
Deleting the claim releases (deletes) the sandbox. Without the CRDs, plain Pods.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from sandloop.errors import SandboxUnavailable

from ..lifecycle import LABEL, stale_reason
from .cluster import Cluster, Obj, api_errors
from .manifest import ROLE_LABEL, SANDBOX_EXT_GROUP, SANDBOX_GROUP, SANDBOX_VERSION, Plan

__all__ = ["GROUP", "SANDBOX_GROUP", "VERSION", "Claim", "claim_pod", "reap_claims"]

log = logging.getLogger("sandloop.kubernetes")

GROUP = SANDBOX_EXT_GROUP
VERSION = SANDBOX_VERSION
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
#: Ready=False with one of these reasons will not become True by waiting.
FATAL = {"TemplateNotFound", "WarmPoolNotFound", "InvalidMetadata", "EnvVarsInjectionRejected",
         "VolumeClaimTemplatesError", "ClaimExpired", "SandboxExpired"}


@dataclass
class Claim:
    cluster: Cluster
    name: str
    pod: str

    def release(self) -> None:
        _delete(self.cluster, self.name)


def _delete(cluster: Cluster, name: str) -> None:
    with contextlib.suppress(SandboxUnavailable), api_errors(f"cannot delete SandboxClaim {name}"):
        try:
            cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "sandboxclaims", name,
                                                           _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _ready(claim: Obj) -> bool:
    status = claim.get("status") or {}
    if (claim.get("status") or {}).get("phase") == "Deleted":
        raise SandboxUnavailable(f"SandboxClaim {claim['metadata']['name']} was deleted")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") == "False" and cond.get("reason") in FATAL:
                raise SandboxUnavailable(f"SandboxClaim {claim['metadata']['name']}: {cond.get('reason')}: "
                                         f"{cond.get('message', '')}".rstrip(": "))
            if cond.get("status") == "True":
                return bool((status.get("sandbox") or {}).get("name"))
    return False


def claim_pod(cluster: Cluster, plan: Plan, pool: str, *, timeout_s: float) -> Claim | None:
    """A ready pod claimed from ``pool``; None where agent-sandbox is not installed."""
    if not cluster.has_resource(GROUP, VERSION, "sandboxclaims"):
        log.info("agent-sandbox is not installed here (or this identity may not list SandboxClaims): a plain "
                 "pod instead of warm pool %s", pool)
        return None
    name = f"sandloop-{plan.session_id}"
    shutdown = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=plan.deadline_s)
    labels = {**plan.labels, ROLE_LABEL: "sandbox"}
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": dict(plan.labels)},
        "spec": {
            "warmPoolRef": {"name": pool},
            "lifecycle": {"shutdownTime": shutdown.strftime("%Y-%m-%dT%H:%M:%SZ"), "shutdownPolicy": "Delete"},
            "additionalPodMetadata": {"labels": labels},
        },
    }
    custom = cluster.custom
    with api_errors(f"cannot claim a sandbox from warm pool {pool}"):
        custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "sandboxclaims", body,
                                               _preload_content=False)
    try:
        claim = cluster.wait(name, lambda: _get(cluster, GROUP, "sandboxclaims", name),
                             custom.list_namespaced_custom_object, (GROUP, VERSION, cluster.namespace, "sandboxclaims"),
                             _ready, timeout_s, kind="SandboxClaim")
        sandbox_name = str(claim["status"]["sandbox"]["name"])
        sandbox = _get(cluster, SANDBOX_GROUP, "sandboxes", sandbox_name) or {}
        annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
        return Claim(cluster, name, str(annotations.get(POD_NAME_ANNOTATION) or sandbox_name))
    except BaseException:
        _delete(cluster, name)
        raise


def _get(cluster: Cluster, group: str, plural: str, name: str) -> Obj | None:
    try:
        with api_errors(f"cannot read {plural}/{name}"):
            response = cluster.custom.get_namespaced_custom_object(group, VERSION, cluster.namespace, plural, name,
                                                                   _preload_content=False)
    except SandboxUnavailable as exc:
        if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
            return None
        raise
    return Cluster._json(response)


def reap_claims(cluster: Cluster, *, everything: bool = False) -> list[tuple[str, str]]:
    if not cluster.has_resource(GROUP, VERSION, "sandboxclaims"):
        return []
    with api_errors("cannot list SandboxClaims"):
        data = Cluster._json(cluster.custom.list_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, "sandboxclaims", label_selector=LABEL, _preload_content=False))
    removed = []
    for claim in data.get("items") or []:
        meta = claim.get("metadata") or {}
        reason = "gc --all" if everything else stale_reason(meta.get("labels") or {}, "")
        if reason is not None:
            _delete(cluster, str(meta["name"]))
            removed.append((f"sandboxclaim/{meta['name']}", reason))
    return removed
