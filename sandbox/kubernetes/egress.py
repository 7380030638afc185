"""A policy's ``[shell] network`` allow-list on a cluster: the same egress proxy as on Docker,
as a pod of its own.

The session pod may reach nothing but its proxy pod (NetworkPolicies, :mod:`.manifest`), which
only the session pod may reach, and which forwards only to listed hosts — the very program
Docker sessions use (:mod:`sandbox.egress_proxy`), delivered the same way as the helper
(:mod:`.loader`). Commands find it through ``HTTP(S)_PROXY`` set to the proxy pod's IP (no DNS
is needed, and none is allowed). Every decision it makes is a JSON line on its stdout, read
through its attach stream and handed to the session's ``on_egress`` (the policy gate's audit
chain), as on Docker; when that stream closes the proxy exits.

A separate pod rather than a sidecar: a sidecar shares the session pod's network namespace, so
a NetworkPolicy could not tell the sandbox's traffic from the proxy's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sandloop.errors import SandboxUnavailable

from ..egress import PROXY_PORT, EgressDecision, decision_of, proxy_events, secrets_line
from ..injection import Injection
from . import loader
from .channels import AttachStream, attach
from .cluster import Cluster, pod_running, pod_state
from .manifest import PROXY_CONTAINER, Plan

__all__ = ["EgressPod", "start"]

log = logging.getLogger("sandloop.kubernetes")


@dataclass
class EgressPod:
    cluster: Cluster
    name: str
    address: str
    stream: AttachStream = field(repr=False)
    reader: threading.Thread | None = field(default=None, repr=False)
    #: the session CA's certificate, when the proxy adds secrets ("" otherwise)
    ca_pem: str = ""

    @property
    def env(self) -> dict[str, str]:
        url = f"http://{self.address}:{PROXY_PORT}"
        return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}

    def _stop(self) -> None:
        self.stream.close()
        if self.reader is not None:
            self.reader.join(timeout=10)
        with contextlib.suppress(SandboxUnavailable):
            self.cluster.delete_pod(self.name)

    async def close(self) -> None:
        await asyncio.to_thread(self._stop)


def _start(cluster: Cluster, plan: Plan, on_decision: Callable[[EgressDecision], None] | None,
           secrets: tuple[Injection, ...], trust_pem: str) -> EgressPod:
    body = plan.proxy_pod()
    name = body["metadata"]["name"]
    cluster.create_pod(body)
    stream: AttachStream | None = None
    try:
        pod = cluster.wait_pod(name, pod_running(PROXY_CONTAINER), plan.options.start_timeout_s)
        address = str((pod.get("status") or {}).get("podIP") or "")
        if not address:
            raise SandboxUnavailable(f"the egress proxy pod {name} has no IP ({pod_state(pod)})")
        stream = attach(cluster, name, PROXY_CONTAINER)
        stream.send(loader.frame(plan.proxy))
        ca_pem = ""
        if secrets:
            # Over the attach stream, like the program: the value is never in a pod spec, a
            # Secret or anything else the API server stores.
            line, ca_pem = secrets_line(secrets, trust_pem, plan.session_id)
            stream.send(line)
        lines = proxy_events(iter(lambda: stream.recv(65536), b""))
        first = next(lines, None)
        if first is None or first.get("event") != "ready":
            raise SandboxUnavailable(f"the egress proxy did not start: {stream.stderr_text() or first}")
    except BaseException:
        if stream is not None:
            stream.close()
        with contextlib.suppress(SandboxUnavailable):
            cluster.delete_pod(name)
        raise
    handle = EgressPod(cluster, name, address, stream, ca_pem=ca_pem)

    def read() -> None:
        for event in lines:
            if event.get("event") != "decision":
                continue
            decision = decision_of(event)
            if on_decision is None:
                log.info("egress %s: %s %s", "allowed" if decision.allowed else "refused", decision.method,
                         decision.target)
                continue
            try:
                on_decision(decision)
            except Exception:  # a faulty callback must not stop the log of later decisions
                log.exception("egress decision callback failed")

    handle.reader = threading.Thread(target=read, daemon=True, name=f"egress-{plan.session_id}")
    handle.reader.start()
    return handle


async def start(cluster: Cluster, plan: Plan, on_decision: Callable[[EgressDecision], None] | None,
                secrets: tuple[Injection, ...] = (), trust_pem: str = "") -> EgressPod:
    """The session's proxy pod, running and attached (its NetworkPolicies must exist already);
    with ``secrets``, told them (and ``trust_pem``, what it verifies their servers against)."""
    return await asyncio.to_thread(_start, cluster, plan, on_decision, secrets, trust_pem)
