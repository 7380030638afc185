"""Every object a session creates, as plain dicts: the session sends exactly these, and
``sandloop k8s manifest`` prints them for auditors and GitOps review.

The session pod carries the container's hardening (``sandbox/docker.py``) in Kubernetes' words:

=====================================  =========================================================
Docker                                 Pod
=====================================  =========================================================
non-root workspace owner               ``runAsNonRoot``, ``runAsUser``/``runAsGroup`` (options)
``no-new-privileges``                  ``allowPrivilegeEscalation: false``, ``privileged: false``
``cap_drop ALL``                       ``capabilities.drop: [ALL]``
seccomp profile (sandloop's rules)     ``seccompProfile: RuntimeDefault`` (pod and container), and
                                       sandloop's rules installed by the helper on itself
read-only root, tmpfs ``/tmp``         ``readOnlyRootFilesystem``, emptyDir ``/tmp`` (Memory)
memory / CPU limits                    ``resources`` requests = limits (from ``[shell.resources]``)
nothing from the host environment      no ``env``, ``automountServiceAccountToken: false``,
                                       ``enableServiceLinks: false``
``network_mode=none``                  a NetworkPolicy denying all ingress and egress
allow-list proxy on an internal net    a proxy pod; egress only to it, its ingress only from us
runtime ``runsc``                      ``runtimeClassName`` (``gvisor`` by default)
labels, reaper, max lifetime           the same labels, ``activeDeadlineSeconds``
the helper, read-only bind mount       the loader (:mod:`.loader`), the helper's sha256 pinned
``.git`` & co. mounted read-only       ``subPath`` mounts of the workspace volume, ``readOnly``,
(read-only workspace: all of it)       filled by the ``copy-in`` init container before the
                                       helper's container starts (:meth:`Plan.pod`)
=====================================  =========================================================

Not expressible in a Pod: a per-pod pids limit (the kubelet's ``podPidsLimit`` is per node).
sandloop's seccomp rules need no ``Localhost`` profile on the nodes: the helper installs them on
itself before it runs any command (:mod:`sandbox.helper.confine`), over the node's default.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sandloop.errors import ConfigError

from .. import images
from ..bundle import HELPER_MODULES, PROXY_MODULES, zipapp
from ..docker import DockerConfig
from ..egress import PROXY_PORT
from . import loader, untar
from .options import KubernetesOptions

__all__ = ["CHECKOUT", "COPY_IN", "COPY_IN_CONTAINER", "HELPER_CONTAINER", "PROXY_CONTAINER", "ROLE_LABEL",
           "SANDBOX_EXT_GROUP", "SANDBOX_GROUP", "SANDBOX_VERSION", "WORKSPACE", "Plan", "cpu_quantity",
           "memory_quantity", "plan", "read_only_subpath", "warm_pool_objects"]

WORKSPACE = "/workspace"
HELPER_CONTAINER = "helper"
#: The init container that writes the workspace volume before the helper's container starts
#: (:mod:`.untar`), where it sees the whole volume (read-only parts included) at :data:`COPY_IN`.
COPY_IN_CONTAINER = "copy-in"
COPY_IN = "/copy-in"
#: Where the checkout lies in the workspace volume when it is written by the copy-in container
#: (mounted at /workspace by ``subPath``); each read-only path's content lies beside it, at
#: :func:`read_only_subpath`.
CHECKOUT = "checkout"
PROXY_CONTAINER = "proxy"
ROLE_LABEL = "sandloop.role"
MANAGED = {"app.kubernetes.io/managed-by": "sandloop"}
PROXY_USER = 65534  # nobody: the proxy owns no files and needs no privilege
#: agent-sandbox's API groups (kubernetes-sigs/agent-sandbox): Sandbox, and its extensions
#: SandboxTemplate / SandboxWarmPool / SandboxClaim.
SANDBOX_GROUP = "agents.x-k8s.io"
SANDBOX_EXT_GROUP = "extensions.agents.x-k8s.io"
SANDBOX_VERSION = "v1beta1"


def memory_quantity(docker: str) -> str:
    """Docker's ``2g`` / ``512m`` / ``64k`` / bytes as a Kubernetes quantity (binary units)."""
    m = re.fullmatch(r"(\d+)([bkmg]?)", docker.strip().lower())
    if m is None:
        raise ValueError(f"not a Docker memory size: {docker!r}")
    number, unit = m.groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def cpu_quantity(cpus: float) -> str:
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _security(uid: int, gid: int) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def read_only_subpath(index: int) -> str:
    """The workspace volume's subPath holding the content of the session's ``index``-th read-only path."""
    return f"read-only/{index}"


def _pod_spec(*, uid: int, gid: int, deadline_s: int, runtime_class: str | None, node_selector: dict[str, str],
              container: dict[str, Any], volumes: list[dict[str, Any]],
              init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "activeDeadlineSeconds": deadline_s,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "fsGroup": gid,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        **({"initContainers": init} if init else {}),
        "containers": [container],
        "volumes": volumes,
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return spec


@dataclass
class Plan:
    """The objects of one session (``pod`` is built per start: each replacement gets a new name)."""

    namespace: str
    session_id: str
    labels: dict[str, str]
    image: str
    config: DockerConfig
    options: KubernetesOptions
    helper: bytes = field(repr=False)
    proxy: bytes = field(repr=False)

    @property
    def runtime_class(self) -> str | None:
        if self.options.runtime_class:
            return self.options.runtime_class
        return "gvisor" if self.config.runtime == "runsc" else None

    @property
    def deadline_s(self) -> int:
        return max(1, int(self.config.max_lifetime_s))

    def _meta(self, name: str, role: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.namespace,
                "labels": {**MANAGED, **self.labels, ROLE_LABEL: role},
                "annotations": {"sandloop.io/helper-sha256": loader.sha256(self.helper)}}

    def _selector(self, role: str) -> dict[str, Any]:
        return {"matchLabels": {"sandloop.session": self.session_id, ROLE_LABEL: role}}

    # --- the session pod ------------------------------------------------------------------

    def pod_name(self, start: int) -> str:
        return f"sandloop-{self.session_id}-{start}"

    def staged(self, read_only: Sequence[str]) -> tuple[str, ...]:
        """The workspace-relative paths mounted read-only over the checkout in a pod of a checkout
        whose read-only paths are ``read_only`` — none when the whole workspace is read-only."""
        return () if self.config.read_only_workspace else tuple(read_only)

    def copy_in(self, read_only: Sequence[str]) -> bool:
        """Whether a pod of such a checkout has the ``copy-in`` init container (:meth:`pod`)."""
        return self.config.read_only_workspace or bool(self.staged(read_only))

    def pod(self, start: int = 0, read_only: Sequence[str] = ()) -> dict[str, Any]:
        """The session pod. With ``read_only`` paths (``.git`` & co., found in the checkout), or a
        read-only workspace, what the helper's container sees read-only is a volume mounted
        ``readOnly``: the pod cannot mount anything without privilege once it runs, and nothing
        it runs could then be kept from writing what its own uid owns. So the workspace volume is
        written first, by an init container (``copy-in``: :mod:`.untar`, which reads the checkout
        from its own attach stream, unpacks it and exits), and the helper's container mounts its
        parts: the checkout at /workspace (``subPath:
        checkout``), and each read-only path's content over it (``subPath: read-only/N``,
        ``readOnly: true``). Without either, the helper's container mounts the whole volume and
        the checkout is copied in through its own helper."""
        cfg, opts = self.config, self.options
        resources = {"cpu": cpu_quantity(cfg.cpus), "memory": memory_quantity(cfg.memory)}
        staged = self.staged(read_only)
        init = self.copy_in(read_only)
        mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
        if init:
            mounts.append({"name": "workspace", "mountPath": WORKSPACE, "subPath": CHECKOUT,
                           **({"readOnly": True} if cfg.read_only_workspace else {})})
            mounts += [{"name": "workspace", "mountPath": f"{WORKSPACE}/{rel}", "subPath": read_only_subpath(i),
                        "readOnly": True} for i, rel in enumerate(staged)]
        else:
            mounts.append({"name": "workspace", "mountPath": WORKSPACE})
        args = ["--workspace", WORKSPACE, "--idle", str(cfg.idle_expiry_s), "--contained"]
        container = self._container(HELPER_CONTAINER, loader.command(self.helper, args), WORKSPACE, mounts, resources)
        copy_in = self._container(COPY_IN_CONTAINER, untar.command(), COPY_IN,
                                  [{"name": "workspace", "mountPath": COPY_IN}], resources)
        volumes = [
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": memory_quantity(cfg.tmpfs_size)}},
            {"name": "workspace", "emptyDir": {"sizeLimit": opts.workspace_size}},
        ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._meta(self.pod_name(start), "sandbox"),
            "spec": _pod_spec(uid=opts.run_as_user, gid=opts.run_as_group, deadline_s=self.deadline_s,
                              runtime_class=self.runtime_class, node_selector=opts.node_selector,
                              container=container, volumes=volumes, init=[copy_in] if init else None),
        }

    def _container(self, name: str, command: list[str], workdir: str, mounts: list[dict[str, Any]],
                   resources: dict[str, str]) -> dict[str, Any]:
        """A container of the session pod: the helper's, or the copy-in one (the same limits: an
        init container's requests count only while no other container runs)."""
        opts = self.options
        return {
            "name": name,
            "image": self.image,
            "imagePullPolicy": opts.image_pull_policy,
            "command": command,
            "workingDir": workdir,
            # stdinOnce: the program's stdin is our attach stream, and ends with it.
            "stdin": True,
            "stdinOnce": True,
            "tty": False,
            "securityContext": _security(opts.run_as_user, opts.run_as_group),
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": mounts,
        }

    # --- network ------------------------------------------------------------------------------

    def deny_all(self) -> dict[str, Any]:
        """No ingress, no egress for the session pod: ``network_mode=none``."""
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"sandloop-{self.session_id}-deny-all", "namespace": self.namespace,
                         "labels": {**MANAGED, **self.labels}},
            "spec": {"podSelector": self._selector("sandbox"), "policyTypes": ["Ingress", "Egress"],
                     "ingress": [], "egress": []},
        }

    def allow_proxy(self) -> dict[str, Any]:
        """The session pod's one way out: the session's proxy pod, on the proxy port."""
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"sandloop-{self.session_id}-egress-proxy", "namespace": self.namespace,
                         "labels": {**MANAGED, **self.labels}},
            "spec": {"podSelector": self._selector("sandbox"), "policyTypes": ["Egress"],
                     "egress": [{"to": [{"podSelector": self._selector("egress-proxy")}],
                                 "ports": [{"protocol": "TCP", "port": PROXY_PORT}]}]},
        }

    def proxy_ingress(self) -> dict[str, Any]:
        """Only this session's pod may use its proxy (it decides where requests go itself)."""
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"sandloop-{self.session_id}-proxy-ingress", "namespace": self.namespace,
                         "labels": {**MANAGED, **self.labels}},
            "spec": {"podSelector": self._selector("egress-proxy"), "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": self._selector("sandbox")}],
                                  "ports": [{"protocol": "TCP", "port": PROXY_PORT}]}]},
        }

    def proxy_pod(self) -> dict[str, Any]:
        allow = list(self.config.network_allow or ())
        args = ["--port", str(PROXY_PORT), *[a for entry in allow for a in ("--allow", entry)]]
        if self.config.secrets:
            # The values come over the attach stream after the program (sandbox.egress_inject),
            # never in this spec; a host may be an internal service only where its entry says so.
            args.append("--secrets")
        resources = {"cpu": "500m", "memory": "64Mi"}
        container = {
            "name": PROXY_CONTAINER,
            "image": self.options.proxy_image or self.image,
            "imagePullPolicy": self.options.image_pull_policy,
            "command": loader.command(self.proxy, args),
            "stdin": True,
            "stdinOnce": True,
            "tty": False,
            "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
            "ports": [{"containerPort": PROXY_PORT, "protocol": "TCP"}],
            "securityContext": _security(PROXY_USER, PROXY_USER),
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }
        volumes = [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]
        meta = self._meta(f"sandloop-{self.session_id}-egress", "egress-proxy")
        meta["annotations"] = {"sandloop.io/proxy-sha256": loader.sha256(self.proxy)}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": _pod_spec(uid=PROXY_USER, gid=PROXY_USER, deadline_s=self.deadline_s, runtime_class=None,
                              node_selector=self.options.node_selector, container=container, volumes=volumes),
        }

    def network_policies(self) -> list[dict[str, Any]]:
        """Created before any pod, so no pod of the session ever runs unconfined."""
        if self.config.network_allow is None:
            return [self.deny_all()]
        return [self.deny_all(), self.allow_proxy(), self.proxy_ingress()]

    def objects(self, read_only: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Everything, in creation order, for a checkout whose read-only paths are ``read_only``."""
        pods = [self.proxy_pod()] if self.config.network_allow is not None else []
        return [*self.network_policies(), *pods, self.pod(1, read_only)]


def pod_image(config: DockerConfig, options: KubernetesOptions) -> str:
    """The image a session pod runs: what the run chose (``--image``, or the front-end's
    resolution of the policy: see ``executor.environment``), else ``[backend.kubernetes] image``,
    else sandloop's shell image under its local name (which the cluster must be able to pull)."""
    return config.image or options.image or images.image_name("shell")


def plan(config: DockerConfig, options: KubernetesOptions, *, session_id: str, labels: dict[str, str],
         namespace: str, image: str) -> Plan:
    return Plan(namespace=namespace, session_id=session_id, labels=labels, image=image, config=config,
                options=options, helper=zipapp(HELPER_MODULES), proxy=zipapp(PROXY_MODULES))


def warm_pool_objects(p: Plan, pool: str, replicas: int) -> list[dict[str, Any]]:
    """What an operator applies once for ``[backend.kubernetes] warm_pool = POOL`` (agent-sandbox):
    a deny-all NetworkPolicy for every warm pod (a claim adds the session's own policies' labels
    later), the SandboxTemplate (the session pod, minus the session's labels) and the pool.

    A warm pod is started before anyone knows the checkout it will serve, so it cannot have the
    read-only parts a session's own pod mounts (:meth:`Plan.pod`): a session claims one only for
    a checkout with nothing read-only in it, and a policy whose whole workspace is read-only gets
    no warm pool at all."""
    if p.config.read_only_workspace:
        raise ConfigError("a warm pool cannot serve this policy: its workspace is read-only, which a pod started "
                          "before the checkout is known cannot mount (sessions of it start plain pods)")
    pod = p.pod(0)
    base = {**MANAGED, ROLE_LABEL: "sandbox"}
    template = {
        "apiVersion": f"{SANDBOX_EXT_GROUP}/{SANDBOX_VERSION}",
        "kind": "SandboxTemplate",
        "metadata": {"name": pool, "namespace": p.namespace, "labels": dict(MANAGED)},
        "spec": {
            "podTemplate": {"metadata": {"labels": base, "annotations": pod["metadata"]["annotations"]},
                            "spec": pod["spec"]},
            # Ours, not the controller's default (which lets pods reach the public internet).
            "networkPolicyManagement": "Unmanaged",
        },
    }
    deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"sandloop-{pool}-deny-all", "namespace": p.namespace, "labels": dict(MANAGED)},
        "spec": {"podSelector": {"matchLabels": base}, "policyTypes": ["Ingress", "Egress"], "ingress": [],
                 "egress": []},
    }
    warm = {
        "apiVersion": f"{SANDBOX_EXT_GROUP}/{SANDBOX_VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": pool, "namespace": p.namespace, "labels": dict(MANAGED)},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": pool}},
    }
    return [deny, template, warm]
