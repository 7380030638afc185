"""Removing what dead front-ends left in a namespace: by the same labels and the same rule as
on Docker (:func:`sandbox.lifecycle.stale_reason`) — owner process gone (on this host), expiry
passed, or the pod completed (its helper exited: the stream ended)."""

from __future__ import annotations

from sandloop.errors import SandboxUnavailable

from ..lifecycle import LABEL, stale_reason
from .cluster import Cluster

__all__ = ["reap"]


def reap(cluster: Cluster, *, everything: bool = False) -> list[tuple[str, str]]:
    """Delete stale sandloop pods, NetworkPolicies and warm-pool claims (or all of them)."""
    removed: list[tuple[str, str]] = []
    for pod in cluster.list_pods(LABEL):
        meta = pod.get("metadata") or {}
        phase = str((pod.get("status") or {}).get("phase") or "")
        state = "exited" if phase in ("Succeeded", "Failed") else phase.lower()
        reason = "gc --all" if everything else stale_reason(meta.get("labels") or {}, state)
        if reason is None or meta.get("deletionTimestamp"):
            continue
        try:
            cluster.delete_pod(str(meta["name"]))
        except SandboxUnavailable:
            continue
        removed.append((f"pod/{meta['name']}", reason))
    for policy in cluster.list_network_policies(LABEL):
        meta = policy.get("metadata") or {}
        reason = "gc --all" if everything else stale_reason(meta.get("labels") or {}, "")
        if reason is None:
            continue
        try:
            cluster.delete_network_policy(str(meta["name"]))
        except SandboxUnavailable:
            continue
        removed.append((f"networkpolicy/{meta['name']}", reason))
    from .warmpool import reap_claims  # claims only exist where agent-sandbox is installed

    return removed + reap_claims(cluster, everything=everything)
