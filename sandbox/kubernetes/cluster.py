"""The REST calls the back-end makes, through the official ``kubernetes`` client (blocking:
call from a thread). Objects go and come as plain dicts (``_preload_content=False``), exactly as
:mod:`.manifest` builds them and as the API server sends them.

Every failure becomes :class:`~sandloop.errors.SandboxUnavailable` with one line: the API
server's own message (``pods "x" is forbidden: ...``) or, when it does not answer, why not.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import urllib3.exceptions
from kubernetes import client as _client
from kubernetes import config as _config
from kubernetes import watch as _watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from sandloop.errors import ConfigError, SandboxUnavailable

from .options import KubernetesOptions

__all__ = ["Cluster", "api_errors", "one_line", "pod_running", "pod_state"]

log = logging.getLogger("sandloop.kubernetes")

# The client's generated methods are typed for its models; we send and receive plain dicts.
client: Any = _client
config: Any = _config
watch: Any = _watch

Obj = dict[str, Any]
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def one_line(text: object, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _message(exc: ApiException) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{exc.status} {exc.reason}"


@contextlib.contextmanager
def api_errors(doing: str) -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        if exc.status == 0:  # a websocket handshake the server refused; its reason holds the rest
            raise SandboxUnavailable(f"{doing}: {one_line(exc.reason)}") from exc
        raise SandboxUnavailable(f"{doing}: {one_line(_message(exc))}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise SandboxUnavailable(f"the Kubernetes API server does not answer ({one_line(exc)})") from exc


class Cluster:
    """One kubeconfig context and namespace."""

    def __init__(self, options: KubernetesOptions) -> None:
        self.options = options
        self.configuration: Any = client.Configuration()
        namespace = None
        try:
            # KUBECONFIG may name several files: the client merges them, as kubectl does.
            path = options.kubeconfig or os.environ.get("KUBECONFIG") or None
            default = os.path.expanduser(config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
            if path is None and not os.path.exists(default) and options.context is None:
                config.load_incluster_config(client_configuration=self.configuration)
                self.context = "in-cluster"
                with contextlib.suppress(OSError), open(IN_CLUSTER_NAMESPACE) as fh:
                    namespace = fh.read().strip() or None
            else:
                config.load_kube_config(config_file=path, context=options.context,
                                        client_configuration=self.configuration)
                contexts, active = config.list_kube_config_contexts(config_file=path)
                chosen = next((c for c in contexts if c["name"] == options.context), active)
                self.context = str(chosen["name"])
                namespace = (chosen.get("context") or {}).get("namespace")
        except (ConfigException, OSError, TypeError, KeyError) as exc:
            raise ConfigError(f"no Kubernetes configuration to use: {one_line(exc)}") from None
        self.namespace: str = options.namespace or namespace or "default"
        self.server = str(self.configuration.host)
        self.api: Any = client.ApiClient(self.configuration)
        self.core: Any = client.CoreV1Api(self.api)
        self.networking: Any = client.NetworkingV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)

    def new_api(self) -> Any:
        """An ApiClient of its own: ``kubernetes.stream`` patches the client it is given while it
        connects, so two streams must never share one."""
        return client.ApiClient(self.configuration)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()

    @staticmethod
    def _json(response: Any) -> Obj:
        data = json.loads(response.data or b"{}")
        return data if isinstance(data, dict) else {}

    # --- pods -----------------------------------------------------------------------------

    def create_pod(self, body: Obj) -> Obj:
        with api_errors(f"cannot create pod {body['metadata'].get('name')} in {self.namespace}"):
            return self._json(self.core.create_namespaced_pod(self.namespace, body, _preload_content=False))

    def get_pod(self, name: str) -> Obj | None:
        try:
            with api_errors(f"cannot read pod {name}"):
                return self._json(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False))
        except SandboxUnavailable as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return None
            raise

    def delete_pod(self, name: str) -> None:
        """Best effort and at once (a grace period would only keep a dead session's pod around)."""
        try:
            with api_errors(f"cannot delete pod {name}"):
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                                propagation_policy="Background", _preload_content=False)
        except SandboxUnavailable as exc:
            if not (isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404):
                raise

    def list_pods(self, selector: str) -> list[Obj]:
        with api_errors(f"cannot list pods in {self.namespace}"):
            data = self._json(self.core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                            _preload_content=False))
        return list(data.get("items") or [])

    def wait_pod(self, name: str, done: Callable[[Obj], bool], timeout_s: float) -> Obj:
        """The pod once ``done(pod)`` (which may raise to give up): see :meth:`wait`."""
        return self.wait(name, lambda: self.get_pod(name), self.core.list_namespaced_pod, (self.namespace,),
                         done, timeout_s)

    def wait(self, name: str, get: Callable[[], Obj | None], lister: Callable[..., Any], args: tuple[Any, ...],
             done: Callable[[Obj], bool], timeout_s: float, *, kind: str = "pod") -> Obj:
        """Object ``name`` once ``done(obj)``, watched — never polled — from the resourceVersion
        of a first read (``lister(*args)`` is its list call). SandboxUnavailable at the timeout."""
        deadline = time.monotonic() + timeout_s
        obj = get()
        while True:
            if obj is None:
                raise SandboxUnavailable(f"{kind} {name} is gone")
            if done(obj):
                return obj
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxUnavailable(f"{kind} {name} was not ready in {timeout_s:.0f} s ({pod_state(obj)})")
            rv = str(obj.get("metadata", {}).get("resourceVersion") or "0")
            changed = self._next_change(name, rv, min(left, 60.0), lister, args)
            obj = changed if changed is not None else get()

    def _next_change(self, name: str, rv: str, timeout_s: float, lister: Callable[..., Any],
                     args: tuple[Any, ...]) -> Obj | None:
        """The object's next version after ``rv`` (None when the watch ended without one)."""
        w = watch.Watch()
        with api_errors(f"cannot watch {name}"):
            try:
                for event in w.stream(lister, *args, field_selector=f"metadata.name={name}", resource_version=rv,
                                      timeout_seconds=max(1, int(timeout_s))):
                    raw = event.get("raw_object")
                    if event.get("type") == "DELETED":
                        return {"metadata": {"name": name}, "status": {"phase": "Deleted"}}
                    if isinstance(raw, dict) and event.get("type") in ("ADDED", "MODIFIED"):
                        return raw
            except ApiException as exc:
                if exc.status == 410:  # our resourceVersion is too old: read again
                    return None
                raise
            finally:
                w.stop()
        return None

    # --- network policies -------------------------------------------------------------------

    def create_network_policy(self, body: Obj) -> None:
        with api_errors(f"cannot create NetworkPolicy {body['metadata']['name']}"):
            self.networking.create_namespaced_network_policy(self.namespace, body, _preload_content=False)

    def delete_network_policy(self, name: str) -> None:
        try:
            with api_errors(f"cannot delete NetworkPolicy {name}"):
                self.networking.delete_namespaced_network_policy(name, self.namespace, _preload_content=False)
        except SandboxUnavailable as exc:
            if not (isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404):
                raise

    def list_network_policies(self, selector: str) -> list[Obj]:
        with api_errors(f"cannot list NetworkPolicies in {self.namespace}"):
            data = self._json(self.networking.list_namespaced_network_policy(
                self.namespace, label_selector=selector, _preload_content=False))
        return list(data.get("items") or [])

    # --- checks for doctor --------------------------------------------------------------------

    def can(self, verb: str, resource: str, *, group: str = "", subresource: str = "",
            namespaced: bool = True) -> tuple[bool, str]:
        """A SelfSubjectAccessReview: may we ``verb`` the resource? (allowed, the server's reason)"""
        attributes: Obj = {"verb": verb, "group": group, "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        if namespaced:
            attributes["namespace"] = self.namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}
        with api_errors("cannot ask the API server what we may do"):
            review = self._json(client.AuthorizationV1Api(self.api).create_self_subject_access_review(
                body, _preload_content=False))
        status = review.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")

    def runtime_class(self, name: str) -> Obj | None:
        try:
            with api_errors(f"cannot read RuntimeClass {name}"):
                return self._json(client.NodeV1Api(self.api).read_runtime_class(name, _preload_content=False))
        except SandboxUnavailable as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return None
            raise

    def version(self) -> str:
        with api_errors("cannot read the API server's version"):
            data = self._json(client.VersionApi(self.api).get_code(_preload_content=False))
        return str(data.get("gitVersion") or "unknown")

    def has_resource(self, group: str, version: str, plural: str) -> bool:
        """Can this identity use ``plural.group/version`` here: its CRD installed (not 404) and
        listing it allowed (not 403)? A front-end whose Role leaves out an optional feature's
        resources (warm pools) works without that feature, as where it is not installed."""
        try:
            with api_errors(f"cannot list {plural}.{group}"):
                self.custom.list_namespaced_custom_object(group, version, self.namespace, plural, limit=1,
                                                          _preload_content=False)
        except SandboxUnavailable as exc:
            status = exc.__cause__.status if isinstance(exc.__cause__, ApiException) else None
            if status == 403:
                log.info("not allowed to list %s.%s in %s: working without them", plural, group, self.namespace)
            if status in (403, 404):
                return False
            raise
        return True

def pod_state(pod: Obj) -> str:
    """One line: phase, and why a container waits or ended."""
    status = pod.get("status") or {}
    parts = [str(status.get("phase") or "Unknown")]
    if status.get("reason"):
        parts.append(str(status["reason"]))
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            parts.append(f"unschedulable: {cond.get('message') or cond.get('reason')}")
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            if kind in state:
                detail = state[kind]
                text = f"{cs.get('name')} {kind}: {detail.get('reason') or ''}"
                if detail.get("message"):
                    text += f" ({one_line(detail['message'], 160)})"
                if kind == "terminated":
                    text += f" exit code {detail.get('exitCode')}"
                parts.append(text)
    return ", ".join(parts)


#: Container waiting reasons that will not resolve by waiting.
HOPELESS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
            "CreateContainerError", "RunContainerError"}


def pod_running(container: str, *, init: bool = False) -> Callable[[Obj], bool]:
    """``done`` for :meth:`Cluster.wait_pod`: the container (an init container with ``init``)
    runs; raises when it never will."""

    def done(pod: Obj) -> bool:
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed", "Deleted"):
            raise SandboxUnavailable(f"pod {pod['metadata'].get('name')} ended before the session began "
                                     f"({pod_state(pod)})")
        for cs in status.get("initContainerStatuses" if init else "containerStatuses") or []:
            if cs.get("name") != container:
                continue
            state = cs.get("state") or {}
            waiting = state.get("waiting") or {}
            if waiting.get("reason") in HOPELESS or (init and "terminated" in state):
                raise SandboxUnavailable(f"pod {pod['metadata'].get('name')} cannot start: {pod_state(pod)}")
            # An init container runs while the pod is Pending; the others, once it is Running.
            return "running" in state and (init or phase == "Running")
        return False

    return done
