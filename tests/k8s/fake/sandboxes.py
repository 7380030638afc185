"""agent-sandbox in the fake: its CRDs served, and a controller small enough to read.

``SandboxTemplate``, ``SandboxWarmPool`` and ``SandboxClaim`` (``extensions.agents.x-k8s.io``)
and ``Sandbox`` (``agents.x-k8s.io``), all ``v1beta1``, with the fields sandloop uses. A warm
pool keeps ``replicas`` sandboxes, each with a pod made from the template; a claim adopts a
sandbox whose pod runs (or a new one: a cold start), adds its ``additionalPodMetadata`` labels
to the pod, points the sandbox's ``agents.x-k8s.io/pod-name`` annotation at it, sets
``status.sandbox.name`` and ``Ready``, and the pool makes a replacement. Deleting a claim deletes
its sandbox and pod. Not modelled: lifecycle/shutdown times, template hashes, updates, scale.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
from typing import Protocol

from aiohttp import web

from sandbox.kubernetes.manifest import SANDBOX_EXT_GROUP, SANDBOX_GROUP, SANDBOX_VERSION

from .rest import Obj, list_or_watch, status
from .store import Store

__all__ = ["Controller", "Pods"]
KINDS = {"sandboxtemplates": "SandboxTemplate", "sandboxwarmpools": "SandboxWarmPool",
         "sandboxclaims": "SandboxClaim", "sandboxes": "Sandbox"}
POD_NAME = "agents.x-k8s.io/pod-name"


class Pods(Protocol):
    """What the controller asks of the server: the pods behind its sandboxes (the server runs
    them; the controller only says which, and which labels they carry)."""

    def create_pod(self, ns: str, body: Obj) -> Obj | web.Response: ...

    async def relabel_pod(self, ns: str, name: str, labels: dict[str, str]) -> None: ...

    async def delete_pod(self, ns: str, name: str) -> None: ...


class Controller:
    def __init__(self, store: Store, pods: Pods) -> None:
        self.store = store
        self.pods = pods
        self.claimed: set[tuple[str, str]] = set()  # sandboxes a claim adopted

    async def route(self, request: web.Request, parts: list[str]) -> web.StreamResponse | None:
        """Answer a request for one of the CRDs; None for anything else."""
        if len(parts) < 6 or parts[0] != "apis" or parts[2] != SANDBOX_VERSION or parts[3] != "namespaces":
            return None
        group, ns, plural = parts[1], parts[4], parts[5]
        if plural not in KINDS or group != (SANDBOX_GROUP if plural == "sandboxes" else SANDBOX_EXT_GROUP):
            return None
        if len(parts) == 6:
            if request.method == "POST" and plural != "sandboxes":
                return await self._create(ns, plural, await request.json())
            return await list_or_watch(request, self.store, plural, ns, kind=KINDS[plural] + "List",
                                       api_version=f"{group}/{SANDBOX_VERSION}")
        name = parts[6]
        obj = self.store.get(plural, ns, name)
        if obj is None:
            return status(404, "NotFound", f'{plural}.{group} "{name}" not found')
        if request.method == "DELETE":
            if plural == "sandboxclaims":
                await self._release(ns, obj)
            self.store.remove(plural, ns, name)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return web.json_response(obj)

    async def _create(self, ns: str, plural: str, body: Obj) -> web.Response:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return status(422, "Invalid", f"{KINDS[plural]} is invalid: metadata.name: Required value")
        if self.store.get(plural, ns, name) is not None:
            return status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        obj = self.store.add(plural, ns, body)
        if plural == "sandboxwarmpools":
            for _ in range(int((body.get("spec") or {}).get("replicas", 1))):
                self._sandbox(ns, name)
        elif plural == "sandboxclaims":
            asyncio.get_running_loop().create_task(self._claim(ns, name))
        return web.json_response(obj, status=201)

    def _sandbox(self, ns: str, pool: str) -> str | None:
        """A new sandbox of ``pool`` and its pod, from the pool's template."""
        warm = self.store.get("sandboxwarmpools", ns, pool) or {}
        template_name = ((warm.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
        template = self.store.get("sandboxtemplates", ns, str(template_name))
        if template is None:
            return None
        name = f"{pool}-{secrets.token_hex(3)}"
        pod_template = copy.deepcopy(template["spec"]["podTemplate"])
        labels = {**(pod_template.get("metadata") or {}).get("labels", {}), "agents.x-k8s.io/warm-pool-sandbox": pool}
        self.store.add("sandboxes", ns, {
            "apiVersion": f"{SANDBOX_GROUP}/{SANDBOX_VERSION}", "kind": "Sandbox",
            "metadata": {"name": name, "labels": {"agents.x-k8s.io/launch-type": "warm"}, "annotations": {}},
            "spec": {"podTemplate": pod_template}})
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": labels,
                            "annotations": (pod_template.get("metadata") or {}).get("annotations", {})},
               "spec": pod_template["spec"]}
        self.pods.create_pod(ns, pod)
        return name

    def _ready(self, ns: str, name: str) -> bool:
        pod = self.store.get("pods", ns, name)
        return pod is not None and pod["status"].get("phase") == "Running"

    async def _claim(self, ns: str, name: str) -> None:
        claim = self.store.get("sandboxclaims", ns, name) or {}
        spec = claim.get("spec") or {}
        pool = (spec.get("warmPoolRef") or {}).get("name", "")
        if self.store.get("sandboxwarmpools", ns, pool) is None:
            self._condition(ns, name, "False", "WarmPoolNotFound", f"warm pool {pool} not found")
            return
        free = [s["metadata"]["name"] for s in self.store.list("sandboxes", ns, [])
                if (ns, s["metadata"]["name"]) not in self.claimed
                and s["spec"]["podTemplate"].get("metadata", {}).get("labels") is not None
                and self.store.get("pods", ns, s["metadata"]["name"]) is not None
                and (self.store.get("pods", ns, s["metadata"]["name"]) or {}).get("metadata", {}).get("labels", {})
                .get("agents.x-k8s.io/warm-pool-sandbox") == pool]
        ready = [s for s in free if self._ready(ns, s)]
        chosen = (ready or free or [self._sandbox(ns, pool)])[0]
        if chosen is None:
            self._condition(ns, name, "False", "TemplateNotFound", "the pool's template is gone")
            return
        self.claimed.add((ns, chosen))
        self._sandbox(ns, pool)  # the pool stays full
        queue = self.store.subscribe()
        try:
            while not self._ready(ns, chosen):
                await queue.get()
        finally:
            self.store.unsubscribe(queue)
        labels = ((spec.get("additionalPodMetadata") or {}).get("labels")) or {}
        await self.pods.relabel_pod(ns, chosen, labels)
        self.store.update("sandboxes", ns, chosen,
                          lambda s: s["metadata"].setdefault("annotations", {}).update({POD_NAME: chosen}))

        def done(c: Obj) -> None:
            c.setdefault("status", {})["sandbox"] = {"name": chosen}
            c["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "SandboxReady"}]

        self.store.update("sandboxclaims", ns, name, done)

    def _condition(self, ns: str, name: str, value: str, reason: str, message: str) -> None:
        def change(c: Obj) -> None:
            c.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": value, "reason": reason,
                                                         "message": message}]

        self.store.update("sandboxclaims", ns, name, change)

    async def _release(self, ns: str, claim: Obj) -> None:
        sandbox = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if sandbox:
            self.claimed.discard((ns, sandbox))
            self.store.remove("sandboxes", ns, sandbox)
            if self.store.get("pods", ns, sandbox) is not None:
                await self.pods.delete_pod(ns, sandbox)
