"""A fake Kubernetes API server on 127.0.0.1, for tests and benches without a cluster.

It speaks the REST paths the back-end uses — pods (create, get, list, watch, delete),
NetworkPolicies, SelfSubjectAccessReviews, RuntimeClasses, ``/version`` and, when asked, the
agent-sandbox CRDs (:mod:`.sandboxes`) — with the real shapes (:mod:`.rest`: ``Status`` errors,
chunked watch streams of JSON lines from a resourceVersion, 410 for one too old), and attach over a
websocket with the real framing: ``v5.channel.k8s.io`` / ``v4.channel.k8s.io`` chosen in the
client's order (403 when none fits), a channel byte on every binary message, the empty stdout
message on connect, v5's ``[255, ch]`` half-close, the final Status on channel 3 and a close
frame. Each container of a pod is a real local Docker container (:mod:`.pods`) — its init
containers first, each to its end, then its container, as a kubelet runs them; attach reaches
whichever runs —, so the real ``kubernetes`` client, the websocket, the helper, the workspace
copy and the policy all run for real.

Not a cluster: one node, no scheduler, no kubelet probes, no admission (PodSecurity), and
NetworkPolicies are approximated with Docker networks (see :mod:`.pods`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import secrets
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
from aiohttp import WSMsgType, web

from .pods import DockerPods
from .rest import Obj, get, list_or_watch, now, status
from .sandboxes import Controller
from .store import Store, label_match

__all__ = ["FakeKubernetes"]

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
NP_GROUP = "networking.k8s.io"
#: How the fake cuts the stream it forwards: arbitrarily, like io.Copy, so clients re-assemble.
CHUNK = 16384


def _container_status(container: Obj, state: Obj) -> Obj:
    return {"name": container["name"], "ready": False, "restartCount": 0, "image": container["image"],
            "imageID": "", "started": False, "state": state}


class FakeKubernetes:
    """The server, in a background thread. ``with FakeKubernetes(docker_client) as k8s:``

    * ``kubeconfig(path)`` writes a kubeconfig naming it (context ``fake``, namespace ``sandloop``);
    * ``protocols``: the channel protocols attach accepts, in the server's order (``(V4,)``
      plays an old API server);
    * ``denied``: ``(verb, resource, subresource)`` SelfSubjectAccessReviews answer "no" for;
    * ``forbidden``: resources (plurals) this identity's Role leaves out: every request on them
      is answered 403 — before the server looks whether they exist, as a real one authorizes
      first — and access reviews say no;
    * ``runtime_classes``: RuntimeClass name → Docker runtime;
    * ``agent_sandbox``: serve the agent-sandbox CRDs and run their controller (may be switched);
    * ``requests``: ``(method, path)`` of every request; ``attaches``: the protocol each attach chose.
    """

    def __init__(self, client: docker.DockerClient, *, namespace: str = "sandloop",
                 protocols: tuple[str, ...] = (V5, V4), runtime_classes: dict[str, str] | None = None,
                 agent_sandbox: bool = False, pids_limit: int = 1024) -> None:
        self.client = client
        self.namespace = namespace
        self.protocols = protocols
        self.denied: set[tuple[str, str, str]] = set()
        self.forbidden: set[str] = set()
        self.runtime_classes = dict(runtime_classes or {})
        self.agent_sandbox = agent_sandbox
        self.token = secrets.token_hex(16)
        self.server_id = secrets.token_hex(4)
        self.pods = DockerPods(client, self.server_id, self.runtime_classes, pids_limit)
        self.store = Store()
        self.requests: list[tuple[str, str]] = []
        self.attaches: list[str] = []
        self.port = 0
        self._containers: dict[tuple[str, str], str] = {}  # (namespace, pod) -> its running container's id
        self._running: dict[tuple[str, str], str] = {}  # (namespace, pod) -> that container's name
        self._ended: dict[tuple[str, str], list[str]] = {}  # (namespace, pod) -> its ended init containers
        self._networks: dict[tuple[str, str], list[str]] = {}  # pod -> its policy networks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._controller = Controller(self.store, self)
        self._tmp = tempfile.TemporaryDirectory(prefix="sandloop-fake-k8s-")
        # The pods' emptyDirs: in memory where this host has a tmpfs for it, as the fake's
        # emptyDirs were when they were tmpfs volumes (on a busy disk, a checkout's copy-in took
        # several times longer than on a node's).
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._volumes = tempfile.TemporaryDirectory(prefix="sandloop-fake-k8s-volumes-", dir=shm)
        # Each running pod has a thread blocked in its container's wait, for the pod's whole life:
        # in the loop's default executor (6 threads on 2 cores) six pods would leave no thread for
        # any other Docker call — no pod created, attached or deleted again.
        self._waits = ThreadPoolExecutor(max_workers=256, thread_name_prefix="fake-k8s-wait")

    # --- life ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeKubernetes:
        self._thread = threading.Thread(target=self._serve, name="fake-k8s", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or not self.port:
            raise RuntimeError("the fake Kubernetes API server did not start")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        loop = self._loop
        if loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self.pods.remove_everything()  # which ends every container's wait
        self._waits.shutdown(wait=False)
        self._tmp.cleanup()
        self._volumes.cleanup()

    async def _shutdown(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:  # pods still followed: their containers go in remove_everything()
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else 0
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def kubeconfig(self, path: Path | None = None) -> Path:
        """A kubeconfig file for this server (token auth, plain HTTP on loopback)."""
        path = path or Path(self._tmp.name) / "kubeconfig"
        text = json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.base_url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                       "namespace": self.namespace}}],
        })
        path.write_text(text)  # JSON is YAML
        return path

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run a coroutine on the server's loop from another thread (tests)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(120)

    # --- HTTP --------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        self.requests.append((request.method, request.path_qs))
        auth = request.headers.get("authorization", "")
        if auth.split(" ", 1)[-1] != self.token:
            return status(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        refused = next((p for p in parts if p in self.forbidden), None)
        if refused is not None:
            return status(403, "Forbidden", f'{refused} is forbidden: User "sandloop" cannot {method.lower()} '
                          f'resource "{refused}" in namespace "{self.namespace}"')
        if parts == ["version"]:
            return web.json_response({"major": "1", "minor": "35", "gitVersion": "v1.35.0-sandloop-fake"})
        if parts[:2] == ["api", "v1"] and len(parts) >= 5 and parts[2] == "namespaces" and parts[4] == "pods":
            ns = parts[3]
            if len(parts) == 5:
                return await (self._create_pod(request, ns) if method == "POST"
                              else list_or_watch(request, self.store, "pods", ns))
            name = parts[5]
            if len(parts) == 7 and parts[6] == "attach" and method == "GET":
                return await self._attach(request, ns, name)
            if len(parts) == 6 and method == "GET":
                return get(self.store, "pods", ns, name)
            if len(parts) == 6 and method == "DELETE":
                return await self._delete_pod(ns, name)
        if parts[:3] == ["apis", NP_GROUP, "v1"] and len(parts) >= 6 and parts[5] == "networkpolicies":
            ns = parts[4]
            if len(parts) == 6:
                return await (self._create_policy(request, ns) if method == "POST"
                              else list_or_watch(request, self.store, "networkpolicies", ns))
            if method == "DELETE":
                return await self._delete_policy(ns, parts[6])
            return get(self.store, "networkpolicies", ns, parts[6])
        if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
            return await self._access_review(request)
        if parts[:4] == ["apis", "node.k8s.io", "v1", "runtimeclasses"] and len(parts) == 5:
            handler = self.runtime_classes.get(parts[4])
            if handler is None:
                return status(404, "NotFound", f'runtimeclasses.node.k8s.io "{parts[4]}" not found')
            return web.json_response({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                      "metadata": {"name": parts[4]}, "handler": handler})
        if self.agent_sandbox:
            answer = await self._controller.route(request, parts)
            if answer is not None:
                return answer
        return status(404, "NotFound", f"the server could not find the requested resource ({method} {request.path})")

    async def _access_review(self, request: web.Request) -> web.Response:
        review = await request.json()
        attrs = (review.get("spec") or {}).get("resourceAttributes") or {}
        key = (attrs.get("verb", ""), attrs.get("resource", ""), attrs.get("subresource", ""))
        allowed = key not in self.denied and key[1] not in self.forbidden
        review["status"] = {"allowed": allowed} if allowed else {"allowed": False, "reason": "denied by the fake"}
        return web.json_response(review, status=201)

    # --- network policies ---------------------------------------------------------------------

    @staticmethod
    def _network_name(ns: str, name: str) -> str:
        return f"fake-k8s-{ns}-{name}"[:60]

    @staticmethod
    def _targets(policy: Obj) -> list[dict[str, str]]:
        """The pod selectors a policy's egress rules let its pods reach."""
        return [peer["podSelector"].get("matchLabels") or {}
                for rule in (policy.get("spec") or {}).get("egress") or []
                for peer in rule.get("to") or [] if "podSelector" in peer]

    async def _create_policy(self, request: web.Request, ns: str) -> web.Response:
        body = await request.json()
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return status(422, "Invalid", "NetworkPolicy.networking.k8s.io is invalid: metadata.name: Required value")
        if self.store.get("networkpolicies", ns, name) is not None:
            return status(409, "AlreadyExists", f'networkpolicies.networking.k8s.io "{name}" already exists')
        if self._targets(body):
            labels = (body.get("metadata") or {}).get("labels") or {}
            await asyncio.to_thread(self.pods.ensure_network, self._network_name(ns, name), labels)
            for (pod_ns, pod), cid in list(self._containers.items()):  # pods that are already targets
                obj = self.store.get("pods", pod_ns, pod)
                if pod_ns == ns and obj and any(label_match(obj["metadata"].get("labels") or {}, list(t.items()))
                                                for t in self._targets(body)):
                    await asyncio.to_thread(self.pods.connect, cid, self._network_name(ns, name))
        obj = self.store.add("networkpolicies", ns, body)
        return web.json_response(obj, status=201)

    async def _delete_policy(self, ns: str, name: str) -> web.Response:
        obj = self.store.remove("networkpolicies", ns, name)
        if obj is None:
            return status(404, "NotFound", f'networkpolicies.networking.k8s.io "{name}" not found')
        if self._targets(obj):
            await asyncio.to_thread(self.pods.remove_network, self._network_name(ns, name))
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}})

    def _placement(self, ns: str, labels: dict[str, str]) -> tuple[list[str], bool]:
        """The Docker networks a pod with ``labels`` joins, and whether it may use the bridge."""
        networks: list[str] = []
        restricted = False
        unrestricted_rule = False
        for policy in self.store.list("networkpolicies", ns, []):
            spec = policy.get("spec") or {}
            name = policy["metadata"]["name"]
            selector = (spec.get("podSelector") or {}).get("matchLabels") or {}
            if label_match(labels, list(selector.items())) and "Egress" in (spec.get("policyTypes") or []):
                restricted = True
                for rule in spec.get("egress") or []:
                    peers = rule.get("to") or []
                    if not peers or any("ipBlock" in p for p in peers):
                        unrestricted_rule = True
                if self._targets(policy):
                    networks.append(self._network_name(ns, name))
            if any(label_match(labels, list(t.items())) for t in self._targets(policy)):
                networks.append(self._network_name(ns, name))
        return list(dict.fromkeys(networks)), not restricted or unrestricted_rule

    # --- pods -----------------------------------------------------------------------------------

    async def _create_pod(self, request: web.Request, ns: str) -> web.Response:
        created = self.create_pod(ns, await request.json())
        return created if isinstance(created, web.Response) else web.json_response(created, status=201)

    def create_pod(self, ns: str, body: Obj) -> Obj | web.Response:
        """Store a pod and start its container (on the loop); an error Status when it cannot be."""
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                return status(422, "Invalid", "Pod is invalid: metadata.name: Required value")
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        name = meta["name"]
        if self.store.get("pods", ns, name) is not None:
            return status(409, "AlreadyExists", f'pods "{name}" already exists')
        spec = body.get("spec") or {}
        containers = spec.get("containers") or []
        if len(containers) != 1:
            return status(422, "Invalid", "the fake runs pods of exactly one container (and any init containers)")
        inits = spec.get("initContainers") or []
        names = [c.get("name") for c in [*inits, *containers]]
        if len(set(names)) != len(names):
            return status(422, "Invalid", "Pod is invalid: spec.initContainers: Duplicate value")
        waiting = {"waiting": {"reason": "PodInitializing" if inits else "ContainerCreating"}}
        body["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                          "containerStatuses": [_container_status(containers[0], waiting)]}
        if inits:
            body["status"]["conditions"].append({"type": "Initialized", "status": "False",
                                                 "reason": "ContainersNotInitialized"})
            body["status"]["initContainerStatuses"] = [
                _container_status(c, {"waiting": {"reason": "PodInitializing"}}) for c in inits]
        meta["namespace"] = ns
        obj = self.store.add("pods", ns, body)
        asyncio.get_running_loop().create_task(self._run_pod(ns, name, copy.deepcopy(body)))
        return obj

    async def relabel_pod(self, ns: str, name: str, labels: dict[str, str]) -> None:
        """New labels on a running pod: it joins the networks its NetworkPolicies now give it."""
        pod = self.store.update("pods", ns, name, lambda p: p["metadata"].setdefault("labels", {}).update(labels))
        cid = self._containers.get((ns, name))
        if pod is None or cid is None:
            return
        networks, _ = self._placement(ns, pod["metadata"]["labels"])
        for network in networks:
            if network not in self._networks.get((ns, name), []):
                await asyncio.to_thread(self.pods.connect, cid, network)
                self._networks.setdefault((ns, name), []).append(network)

    def _set_state(self, ns: str, name: str, phase: str, state: Obj, *, container: str,
                   reason: str | None = None, ip: str | None = None, initialized: bool = False) -> None:
        """The pod's phase, and ``container``'s state (its ``containerStatuses`` or
        ``initContainerStatuses`` entry)."""
        def change(pod: Obj) -> None:
            st = pod["status"]
            st["phase"] = phase
            if reason:
                st["reason"] = reason
            if ip is not None:
                st["podIP"] = ip
                st["podIPs"] = [{"ip": ip}] if ip else []
            if initialized:
                for cond in st.get("conditions") or []:
                    if cond["type"] == "Initialized":
                        cond.update(status="True")
                        cond.pop("reason", None)
            for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
                if cs["name"] == container:
                    cs["state"] = state
                    cs["ready"] = cs["started"] = "running" in state

        self.store.update("pods", ns, name, change)

    async def _run_pod(self, ns: str, name: str, pod: Obj) -> None:
        """As a kubelet: each init container in turn, to its end (the pod fails with the first
        that fails), then the container; ``activeDeadlineSeconds`` over all of it."""
        networks, bridge = self._placement(ns, pod["metadata"].get("labels") or {})
        self._networks[(ns, name)] = networks
        spec = pod.get("spec") or {}
        deadline = spec.get("activeDeadlineSeconds")
        until = asyncio.get_running_loop().time() + float(deadline) if deadline else None
        try:
            folders = await asyncio.to_thread(self._volume_folders, ns, name, spec)
            for init in spec.get("initContainers") or []:
                if await self._run_container(ns, name, pod, init, networks, bridge, folders, until, init=True) != 0:
                    return
            await self._run_container(ns, name, pod, spec["containers"][0], networks, bridge, folders, until,
                                      init=False)
        finally:
            if self.store.get("pods", ns, name) is None:  # deleted meanwhile: what it had is gone with it
                await asyncio.to_thread(self._remove_folders, ns, name)

    async def _run_container(self, ns: str, name: str, pod: Obj, container: Obj, networks: list[str], bridge: bool,
                             folders: dict[str, Path], until: float | None, *,
                             init: bool) -> int | None:
        """Start one container of the pod and follow it to its end: its exit code (the pod's phase
        follows), or None when the pod is gone, cannot go on, or reached its deadline (its state
        said)."""
        cname = container["name"]
        phase = "Pending" if init else "Running"
        try:
            cid = await asyncio.to_thread(self.pods.create, pod, container, networks, bridge, folders)
        except Exception as exc:  # the image, the runtime, a field the fake cannot do: as a kubelet says it
            self._set_state(ns, name, "Pending", {"waiting": {"reason": "CreateContainerError", "message": str(exc)}},
                            container=cname)
            return None
        if self.store.get("pods", ns, name) is None:  # deleted while being created
            await asyncio.to_thread(self.pods.remove, cid)
            return None
        self._containers[(ns, name)] = cid
        self._running[(ns, name)] = cname
        try:
            await asyncio.to_thread(self.pods.start, cid)
        except Exception as exc:
            self._set_state(ns, name, "Failed", {"terminated": {"exitCode": 128, "reason": "StartError",
                                                                "message": str(exc)}}, container=cname)
            return None
        ip = await asyncio.to_thread(self.pods.ip, cid, networks)
        self._set_state(ns, name, phase, {"running": {"startedAt": now()}}, container=cname, ip=ip)
        waiter = asyncio.get_running_loop().run_in_executor(self._waits, self.pods.wait, cid)
        left = None if until is None else max(0.0, until - asyncio.get_running_loop().time())
        done, _ = await asyncio.wait({waiter}, timeout=left)
        if not done:
            await asyncio.to_thread(self.pods.kill, cid)
            await waiter
            self._set_state(ns, name, "Failed", {"terminated": {"exitCode": 137, "reason": "Error"}},
                            container=cname, reason="DeadlineExceeded")
            return None
        code, oom = waiter.result()
        if self.store.get("pods", ns, name) is None:
            return None
        self._running.pop((ns, name), None)
        if init:  # ended: as a kubelet, the fake keeps it (stopped) until the pod goes
            self._containers.pop((ns, name), None)
            self._ended.setdefault((ns, name), []).append(cid)
        phase = "Failed" if code != 0 else "Pending" if init else "Succeeded"
        self._set_state(ns, name, phase, {"terminated": {"exitCode": code, "reason": "OOMKilled" if oom else
                                                        "Completed" if code == 0 else "Error", "finishedAt": now()}},
                        container=cname, initialized=init and code == 0)
        return code

    # --- volumes: a folder of this host per emptyDir on disk ----------------------------------

    def _pod_folder(self, ns: str, name: str) -> Path:
        return Path(self._volumes.name) / ns / name

    def _volume_folders(self, ns: str, name: str, spec: Obj) -> dict[str, Path]:
        """An empty 0777 folder per emptyDir on disk, as a kubelet makes them (blocking)."""
        folders = {}
        for volume in spec.get("volumes") or []:
            if "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") != "Memory":
                folder = self._pod_folder(ns, name) / volume["name"]
                folder.mkdir(parents=True)
                folder.chmod(0o777)
                folders[volume["name"]] = folder
        return folders

    def _remove_folders(self, ns: str, name: str) -> None:
        shutil.rmtree(self._pod_folder(ns, name), ignore_errors=True)  # never follows a link

    async def delete_pod(self, ns: str, name: str) -> None:
        await self._delete_pod(ns, name)

    async def _delete_pod(self, ns: str, name: str) -> web.Response:
        obj = self.store.get("pods", ns, name)
        if obj is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        cid = self._containers.pop((ns, name), None)
        ended = self._ended.pop((ns, name), [])
        self._running.pop((ns, name), None)
        self._networks.pop((ns, name), None)
        obj = self.store.remove("pods", ns, name) or obj
        for container in [*([cid] if cid is not None else []), *ended]:
            await asyncio.to_thread(self.pods.remove, container)
        await asyncio.to_thread(self._remove_folders, ns, name)
        return web.json_response(obj)

    def container(self, name: str, ns: str | None = None) -> str | None:
        """The Docker container behind a pod (tests reach behind the API with it)."""
        return self._containers.get((ns or self.namespace, name))

    def kill_pod(self, name: str, ns: str | None = None) -> None:
        """What the OOM killer or a node failure does: the container dies (the pod stays)."""
        cid = self._containers.get((ns or self.namespace, name))
        if cid is not None:
            self.pods.kill(cid)

    # --- attach ---------------------------------------------------------------------------------

    async def _attach(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        pod = self.store.get("pods", ns, name)
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        main = pod["spec"]["containers"][0]["name"]
        container = request.query.get("container") or main
        if container != main and container not in {c["name"] for c in pod["spec"].get("initContainers") or []}:
            return status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        phase = pod["status"].get("phase")
        cid = self._containers.get((ns, name))
        if phase in ("Succeeded", "Failed"):
            return status(400, "BadRequest", f"cannot attach to a container in a completed pod; current phase is "
                                             f"{phase}")
        if self._running.get((ns, name)) != container or cid is None:
            if container != main:  # an init container that has not started, or has ended
                return status(400, "BadRequest", f'container "{container}" in pod "{name}" is not running')
            waiting = "PodInitializing" if pod["spec"].get("initContainers") else "ContainerCreating"
            return status(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: '
                                             f"{waiting}")
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return status(400, "BadRequest", "attach needs a websocket (or SPDY, which the fake does not speak)")
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        chosen = next((p for p in offered if p in self.protocols), None)
        if chosen is None:
            return web.Response(status=403)  # what golang.org/x/net/websocket answers
        self.attaches.append(chosen)
        ws = web.WebSocketResponse(protocols=(chosen,), compress=False, max_msg_size=32 << 20, autoping=True)
        await ws.prepare(request)
        sock = await asyncio.to_thread(self.pods.attach_socket, cid)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await ws.send_bytes(b"\x01")  # the empty message on the lowest requested output channel

        async def out() -> None:
            """Docker's multiplexed stream → channel messages, cut at CHUNK bytes."""
            buf = b""
            while True:
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    return
                buf += data
                while len(buf) >= 8:
                    stream_id, size = buf[0], struct.unpack(">I", buf[4:8])[0]
                    if len(buf) < 8 + size:
                        break
                    payload, buf = buf[8:8 + size], buf[8 + size:]
                    channel = 2 if stream_id == 2 else 1
                    for start in range(0, len(payload), CHUNK):
                        await ws.send_bytes(bytes([channel]) + payload[start:start + CHUNK])

        async def into() -> None:
            async for msg in ws:
                if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                    continue
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                if not data:
                    continue
                if data[0] == 255 and chosen == V5:
                    if len(data) == 2 and data[1] == 0:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_WR)  # stdin ends; stdout keeps flowing
                        continue
                    return  # a malformed CLOSE ends the session, as the real server does
                if data[0] == 0:
                    await loop.sock_sendall(sock, data[1:])

        reader = asyncio.ensure_future(out())
        writer = asyncio.ensure_future(into())
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done and not ws.closed:  # the container's streams ended
                success = {"metadata": {}, "status": "Success"}
                with contextlib.suppress(ConnectionResetError):
                    await ws.send_bytes(b"\x03" + json.dumps(success).encode())
                    await ws.close(code=1000)
        except (ConnectionResetError, OSError):
            pass
        finally:
            for task in (reader, writer):
                task.cancel()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            if not ws.closed:
                with contextlib.suppress(ConnectionResetError):
                    await ws.close()
        return ws
