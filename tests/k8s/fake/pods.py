"""The fake's pods are real Docker containers, one per container of the pod (init containers
included): each pod field the back-end sets becomes the Docker setting with the same effect
(blocking calls; the server runs them in threads).

===============================  ===============================================================
Pod                              Docker
===============================  ===============================================================
``command`` + ``args``, image    the container's command and image
``runAsUser``/``runAsGroup``     ``User``
``readOnlyRootFilesystem``       ``ReadonlyRootfs``
``capabilities.drop: [ALL]``     ``CapDrop ALL`` (and ``add``: ``CapAdd``)
``allowPrivilegeEscalation``     ``no-new-privileges`` when false
``privileged``                   refused (the fake runs nothing privileged)
emptyDir                         a 0777 folder of the pod on this host (the server's; on its
                                 /dev/shm tmpfs where it has one), bind-mounted into each container
                                 that mounts it — so a pod's containers share it, init containers
                                 included, and it outlives each of them;
                                 ``subPath`` binds that folder's sub-path (made if missing, never
                                 through a link out of the volume), ``readOnly`` a read-only bind.
                                 ``sizeLimit`` is not enforced (a kubelet evicts the pod for it)
emptyDir ``medium: Memory``      an empty 0777 tmpfs volume per container, ``sizeLimit`` as its
                                 size (not shared between a pod's containers; no ``subPath``)
limits.memory / limits.cpu       ``Memory`` (no swap) / ``NanoCpus``
``stdin`` / ``stdinOnce``        ``OpenStdin`` / ``StdinOnce``
``runtimeClassName``             ``Runtime`` (the fake's RuntimeClass → handler map)
NetworkPolicies                  ``none``; an ``--internal`` network per allow-to-pods policy;
                                 the default bridge where egress is not restricted
(kubelet ``podPidsLimit``)       ``PidsLimit``
===============================  ===============================================================
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import DriverConfig, Mount

__all__ = ["FAKE_LABEL", "DockerPods", "quantity_bytes", "quantity_cpus"]

FAKE_LABEL = "sandloop.fake-k8s"
_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def quantity_bytes(text: str) -> int:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(text))
    if m is None:
        raise ValueError(f"not a quantity: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


def quantity_cpus(text: str) -> float:
    text = str(text)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _mount(mount: dict[str, Any], volume: dict[str, Any], folders: Mapping[str, Path]) -> Mount:
    """One volumeMount as a Docker mount."""
    name = mount["name"]
    if "emptyDir" not in volume:
        raise ValueError(f"volume {name}: only emptyDir is supported by the fake")
    read_only = bool(mount.get("readOnly"))
    sub = str(mount.get("subPath") or "")
    empty_dir = volume["emptyDir"] or {}
    if empty_dir.get("medium") == "Memory":
        if sub:
            raise ValueError(f"volume {name}: the fake takes no subPath of a Memory emptyDir")
        # An emptyDir is an empty 0777 directory, whatever the image has at that path: an
        # anonymous tmpfs volume with nocopy (a plain tmpfs mount would take the image
        # directory's owner and mode).
        size = empty_dir.get("sizeLimit")
        options = "nosuid,nodev,mode=0777" + (f",size={quantity_bytes(size)}" if size else "")
        return Mount(mount["mountPath"], None, type="volume", no_copy=True, read_only=read_only,
                     driver_config=DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options}))
    root = folders[name]
    source = root
    if sub:
        if sub.startswith("/") or ".." in sub.split("/"):
            raise ValueError(f"volume {name}: subPath {sub!r} must be a relative path without '..'")
        # As a kubelet: a sub-path that leaves the volume through a link is refused — the
        # volume's content is the pod's to plant links in —, and a missing one is made (0750).
        source = (root / sub).resolve()
        if not source.is_relative_to(root.resolve()):
            raise ValueError(f"volume {name}: subPath {sub!r} is outside the volume")
        if not os.path.lexists(source):
            source.mkdir(mode=0o750, parents=True)
    return Mount(mount["mountPath"], str(source), type="bind", read_only=read_only)


class DockerPods:
    def __init__(self, client: docker.DockerClient, server_id: str, runtimes: dict[str, str],
                 pids_limit: int) -> None:
        self.client = client
        self.server_id = server_id
        self.runtimes = runtimes
        self.pids_limit = pids_limit

    def create(self, pod: dict[str, Any], container: dict[str, Any], networks: list[str], bridge: bool,
               folders: Mapping[str, Path]) -> str:
        """Create (not start) the container of one of the pod's containers (``folders``: each disk
        emptyDir's folder); ValueError if it cannot be."""
        spec = pod["spec"]
        meta = pod["metadata"]
        pod_sc = spec.get("securityContext") or {}
        sc = {**pod_sc, **(container.get("securityContext") or {})}
        if sc.get("privileged"):
            raise ValueError("privileged containers are not supported by the fake")
        uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
        if sc.get("runAsNonRoot") and not uid:
            raise ValueError("container has runAsNonRoot and no non-root runAsUser")
        caps = sc.get("capabilities") or {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts = [_mount(mount, volumes.get(mount["name"]) or {}, folders)
                  for mount in container.get("volumeMounts") or []]
        limits = (container.get("resources") or {}).get("limits") or {}
        memory = quantity_bytes(limits["memory"]) if "memory" in limits else None
        runtime = None
        if spec.get("runtimeClassName"):
            runtime = self.runtimes.get(spec["runtimeClassName"])
            if runtime is None:
                raise ValueError(f"RuntimeClass {spec['runtimeClassName']!r} not found")
        api = self.client.api
        host_config = api.create_host_config(
            init=False,
            read_only=bool(sc.get("readOnlyRootFilesystem")),
            mounts=mounts,
            cap_drop=caps.get("drop") or None,
            cap_add=caps.get("add") or None,
            security_opt=["no-new-privileges"] if sc.get("allowPrivilegeEscalation") is False else None,
            pids_limit=self.pids_limit,
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(quantity_cpus(limits["cpu"]) * 1e9) if "cpu" in limits else None,
            network_mode=networks[0] if networks else "bridge" if bridge else "none",
            runtime=runtime,
        )
        created = api.create_container(
            container["image"],
            command=[*(container.get("command") or []), *(container.get("args") or [])] or None,
            name=f"fake-k8s-{self.server_id}-{meta['namespace']}-{meta['name']}-{container['name']}"[:120],
            user=f"{uid}:{gid or uid}" if uid is not None else None,
            working_dir=container.get("workingDir"),
            stdin_open=bool(container.get("stdin")),
            detach=not container.get("stdinOnce"),  # docker-py: stdin_open and not detach → StdinOnce
            tty=bool(container.get("tty")),
            environment={e["name"]: e.get("value", "") for e in container.get("env") or []},
            labels={**(meta.get("labels") or {}), FAKE_LABEL: self.server_id},
            hostname=meta["name"][:63],
            network_disabled=not networks and not bridge,
            host_config=host_config,
        )
        cid: str = created["Id"]
        try:
            for extra in networks[1:] + (["bridge"] if networks and bridge else []):
                api.connect_container_to_network(cid, extra)
        except docker.errors.APIError:
            self.remove(cid)
            raise
        return cid

    def start(self, cid: str) -> None:
        self.client.api.start(cid)

    def wait(self, cid: str) -> tuple[int, bool]:
        """Blocks until the container exits: (exit code, OOM-killed)."""
        try:
            code = int(self.client.api.wait(cid)["StatusCode"])
            state = self.client.api.inspect_container(cid)["State"]
            return code, bool(state.get("OOMKilled"))
        except docker.errors.NotFound:
            return 137, False

    def ip(self, cid: str, networks: list[str]) -> str:
        with contextlib.suppress(docker.errors.APIError):
            found = self.client.api.inspect_container(cid)["NetworkSettings"]["Networks"] or {}
            for name in [*networks, "bridge"]:
                if found.get(name, {}).get("IPAddress"):
                    return str(found[name]["IPAddress"])
        return ""

    def kill(self, cid: str) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self.client.api.kill(cid)

    def remove(self, cid: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.client.api.remove_container(cid, force=True, v=True)
            except docker.errors.APIError as exc:
                if "already in progress" not in str(exc):
                    raise

    def attach_socket(self, cid: str) -> socket.socket:
        raw = self.client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        sock: socket.socket = getattr(raw, "_sock", raw)
        sock.settimeout(None)
        return sock

    # --- networks (one per NetworkPolicy that lets pods reach other pods) ---------------------

    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        api = self.client.api
        if api.networks(names=[name]):
            return
        api.create_network(name, driver="bridge", internal=True,
                           options={"com.docker.network.bridge.inhibit_ipv4": "true"},
                           labels={**labels, FAKE_LABEL: self.server_id})

    def connect(self, cid: str, network: str) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self.client.api.connect_container_to_network(cid, network)

    def remove_network(self, name: str) -> None:
        api = self.client.api
        for row in api.networks(names=[name]):
            info = api.inspect_network(row["Id"])
            for endpoint in info.get("Containers") or {}:
                with contextlib.suppress(docker.errors.APIError):
                    api.disconnect_container_from_network(endpoint, row["Id"], force=True)
            with contextlib.suppress(docker.errors.APIError):
                api.remove_network(row["Id"])

    def remove_everything(self) -> None:
        """Every container and network this fake made (its server id label)."""
        api = self.client.api
        for row in api.containers(all=True, filters={"label": f"{FAKE_LABEL}={self.server_id}"}):
            self.remove(row["Id"])
        for row in api.networks(filters={"label": f"{FAKE_LABEL}={self.server_id}"}):
            self.remove_network(row["Name"])
