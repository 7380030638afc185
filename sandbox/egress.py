"""Enforcing ``[shell] network = [...]``: an internal network and an allow-list proxy per session.

The sandbox joins an ``--internal`` Docker network (nothing is forwarded off it, and the bridge
has no host address: ``inhibit_ipv4``) whose embedded DNS answers only for containers on it (the
proxy's own name; nothing outside), so nothing leaves except through the one other member: a
proxy container (``egress_proxy.py`` in the shell image) that is also on the default bridge and
forwards only to listed hosts. Commands find it through ``HTTP(S)_PROXY``; a program that ignores
those variables simply has no network, so the list is enforced, not hinted.

Per session rather than one proxy per host, because:

* sandboxes never share a network, so one session cannot reach another's servers;
* the proxy needs no map from source address to policy: it holds one allow-list;
* life-cycle matches the sandbox's: the proxy is attached like the helper (it exits when our
  stream closes) and carries the same labels, so ``reap`` and :func:`reap_networks` clean up
  after a dead owner.

The cost is a small container and one engine address pool per session (Docker's default
pools allow about 30 bridge networks; hosts with more concurrent sessions set
``default-address-pools`` in daemon.json).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
from docker.types import Mount
from docker.utils.socket import frames_iter

from sandloop.errors import SandboxUnavailable

from . import images
from .bundle import PROXY_MODULES, file_archive, zipapp
from .injection import Injection
from .lifecycle import HELPER_DIR, LABEL, stale_reason

__all__ = ["EgressDecision", "EgressHandle", "EgressProxy", "attach_egress", "decision_of", "proxy_events",
           "reap_networks", "secrets_line"]

log = logging.getLogger("sandloop.egress")

PROXY_FILE = "egress.pyz"
PROXY_PORT = 3128
PROXY_USER = "65534:65534"  # nobody: the proxy owns no files and needs no privilege
ROLE_LABEL = "sandloop.role"
READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 5.0
NETWORK_OPTIONS = {"com.docker.network.bridge.inhibit_ipv4": "true"}


def proxy_events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The proxy's JSON events, one per line of its output however the stream cuts it; any other
    line goes to the log (the proxy is ours: its output is not a sandbox's)."""
    buf = b""
    for data in chunks:
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict):
                yield event
            else:
                log.warning("egress proxy said: %r", line)


@dataclass(frozen=True)
class EgressDecision:
    """One allow/refuse decision the proxy made, as it logged it."""

    allowed: bool
    method: str
    target: str
    rule: str
    reason: str
    client: str = ""
    #: the name of the secret the proxy added to this request ("" for none): never its value
    secret: str = ""


def secrets_line(secrets: tuple[Injection, ...], trust_pem: str, label: str) -> tuple[bytes, str]:
    """The proxy's secrets configuration, one JSON line for its stdin (never its command line or
    environment, which the engine or the API server shows to anyone who inspects it), and the
    certificate of the session CA that issued each host's certificate; the CA's key is dropped
    with it, here."""
    from .session_ca import SessionCA  # cryptography: only for a session with secrets

    hosts = [secret.host for secret in secrets]
    ca = SessionCA(hosts, label=label)
    certs = {host: [leaf.cert_pem, leaf.key_pem] for host in dict.fromkeys(hosts) for leaf in [ca.issue(host)]}
    config = {"secrets": [secret.for_proxy() for secret in secrets], "certs": certs, "trust": trust_pem}
    return json.dumps(config).encode() + b"\n", ca.cert_pem


def decision_of(event: dict[str, Any]) -> EgressDecision:
    """A proxy's decision event as an EgressDecision."""
    fields = {k: str(event.get(k, "")) for k in ("method", "target", "rule", "reason", "client", "secret")}
    return EgressDecision(allowed=bool(event.get("allowed")), **fields)


def _log_decision(decision: EgressDecision) -> None:
    verb = "allowed" if decision.allowed else "refused"
    log.info("egress %s: %s %s (%s: %s)", verb, decision.method, decision.target, decision.rule, decision.reason)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class EgressProxy:
    """The internal network and the proxy container of one session. Blocking; call in a thread."""

    def __init__(
        self,
        client: docker.DockerClient,
        allow: list[str],
        *,
        session_id: str,
        labels: Mapping[str, str],
        on_decision: Callable[[EgressDecision], None] = _log_decision,
        image: str | None = None,
        private_ok: bool = False,
        secrets: tuple[Injection, ...] = (),
        trust_pem: str = "",
    ) -> None:
        self.client = client
        #: secrets the proxy adds (TLS ended for their hosts only); ``trust_pem``: what it
        #: verifies those hosts' servers against (the host's trust store)
        self.secrets = secrets
        self.trust_pem = trust_pem
        self.ca_pem = ""  # the session CA's certificate, once started with secrets
        self.allow = list(allow)
        #: let allowed names resolve to private addresses (an internal mirror); off by default,
        #: since on the engine's bridge a private address can be the host itself
        self.private_ok = private_ok
        self.session_id = session_id
        self.labels = {**labels, LABEL: session_id}
        self.on_decision = on_decision
        self.image = image or images.image_name("shell")
        self.network = f"sandloop-egress-{session_id}"
        self.container_name = f"sandloop-egress-{session_id}"
        self.container_id: str | None = None
        self.address: str | None = None  # the proxy's IP on the internal network
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None

    @property
    def env(self) -> dict[str, str]:
        # An address, not a name: the sandbox's DNS is meant to answer nothing useful.
        url = f"http://{self.address}:{PROXY_PORT}"
        return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}

    def start(self) -> None:
        api = self.client.api
        try:
            # internal: nothing is forwarded off the bridge. inhibit_ipv4: the host gets no address
            # on it either; otherwise the sandbox could reach every host service bound to 0.0.0.0
            # through the gateway address (the host's INPUT chain is not Docker's to filter).
            api.create_network(self.network, driver="bridge", internal=True, options=NETWORK_OPTIONS,
                               labels={**self.labels, ROLE_LABEL: "egress-network"})
            self._start_proxy()
        except docker.errors.ImageNotFound:
            self.stop()
            raise SandboxUnavailable(f"image {self.image} is not there: run scripts/bootstrap") from None
        except (docker.errors.APIError, OSError, EOFError) as exc:
            self.stop()
            text = str(getattr(exc, "explanation", None) or exc)
            if "address pool" in text or "non-overlapping" in text:
                text += " (the engine is out of address pools: raise default-address-pools in daemon.json)"
            raise SandboxUnavailable(f"cannot start the egress proxy: {text}") from exc

    def _start_proxy(self) -> None:
        api = self.client.api
        host_config = api.create_host_config(
            init=True,
            read_only=True,
            mounts=[Mount(HELPER_DIR, None, type="volume")],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=128,  # one thread per connection: this caps concurrent connections too
            mem_limit="64m",
            memswap_limit="64m",
            nano_cpus=int(0.5e9),
            network_mode=self.network,
            # Gone as soon as it exits (its stream closed: the front-end is gone, even SIGKILLed),
            # with no reaper needed; the network is left for the next reap.
            auto_remove=True,
        )
        subnets = [c["Subnet"] for c in api.inspect_network(self.network)["IPAM"]["Config"]]
        command = ["python3", "-I", "-u", f"{HELPER_DIR}/{PROXY_FILE}", "--port", str(PROXY_PORT)]
        command += [arg for subnet in subnets for arg in ("--client", subnet)]
        for entry in self.allow:
            command += ["--allow", entry]
        if self.private_ok:
            command.append("--private-ok")
        if self.secrets:
            command.append("--secrets")
        created = api.create_container(
            self.image,
            command=command,
            name=self.container_name,
            user=PROXY_USER,
            stdin_open=True,
            detach=False,  # StdinOnce: the proxy sees EOF, and exits, when our stream closes
            tty=False,
            environment={"PYTHONDONTWRITEBYTECODE": "1"},
            labels={**self.labels, ROLE_LABEL: "egress-proxy"},
            hostname="egress",
            host_config=host_config,
            networking_config=api.create_networking_config({self.network: api.create_endpoint_config()}),
        )
        self.container_id = created["Id"]
        # The second leg: the default bridge is the proxy's way out (internal networks have none).
        api.connect_container_to_network(self.container_id, "bridge")
        api.put_archive(self.container_id, HELPER_DIR, file_archive(PROXY_FILE, zipapp(PROXY_MODULES)))
        raw = api.attach_socket(self.container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        sock: socket.socket = getattr(raw, "_sock", raw)
        self._sock = sock
        sock.settimeout(None)
        api.start(self.container_id)
        if self.secrets:
            sock.sendall(self._secrets_line())
        # The SDK's frame reader polls without a timeout, so a watchdog ends a start that hangs.
        watchdog = threading.Timer(READY_TIMEOUT_S, lambda: _shutdown(sock))
        watchdog.start()
        lines = self._lines(sock)
        try:
            first = next(lines, None)
        finally:
            watchdog.cancel()
        if first is None or first.get("event") != "ready":
            raise EOFError(f"the proxy did not start (it said {first!r})")
        networks = api.inspect_container(self.container_id)["NetworkSettings"]["Networks"]
        self.address = networks[self.network]["IPAddress"]
        self._reader = threading.Thread(target=self._read_decisions, args=(lines,), daemon=True,
                                        name=f"egress-{self.session_id}")
        self._reader.start()

    def _secrets_line(self) -> bytes:
        line, self.ca_pem = secrets_line(self.secrets, self.trust_pem, self.session_id)
        return line

    def _lines(self, sock: socket.socket) -> Iterator[dict[str, Any]]:
        """JSON events from the proxy's stdout; stderr (tracebacks) goes to the log."""

        def stdout() -> Iterator[bytes]:
            for stream, data in frames_iter(sock, tty=False):
                if stream == 2:
                    log.warning("egress proxy stderr: %s", data.decode(errors="replace").rstrip())
                else:
                    yield data

        return proxy_events(stdout())

    def _read_decisions(self, lines: Iterator[dict[str, Any]]) -> None:
        try:
            for event in lines:
                if event.get("event") != "decision":
                    continue
                decision = decision_of(event)
                try:
                    self.on_decision(decision)
                except Exception:  # a faulty callback must not stop the log of later decisions
                    log.exception("egress decision callback failed")
        except OSError:
            pass  # our socket was closed: the session is ending

    def stop(self) -> None:
        """Remove the proxy and the network (anything still attached is disconnected first)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            # Half-close first: the proxy sees EOF on its stdin and exits, and our reader reads
            # every decision it wrote before that, then the end of the stream — none is lost to
            # the close (a setup's failure names what the proxy refused). A proxy that does not
            # go is cut off after DRAIN_TIMEOUT_S.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            if self._reader is not None:
                self._reader.join(timeout=DRAIN_TIMEOUT_S)
            _shutdown(sock)
        api = self.client.api
        if self.container_id is not None:
            _remove_container(api, self.container_id)
        if self._reader is not None:
            self._reader.join(timeout=10)
        if sock is not None:
            # Only now: closing while the reader still polls would let it poll a reused fd number.
            sock.close()
        try:
            info = api.inspect_network(self.network)
        except docker.errors.NotFound:
            return
        for endpoint in (info.get("Containers") or {}):
            with contextlib.suppress(docker.errors.APIError):
                api.disconnect_container_from_network(endpoint, self.network, force=True)
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_network(self.network)


def _remove_container(api: Any, container_id: str) -> None:
    try:
        api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:  # auto-removal got there first
        if exc.status_code != 409:
            raise


@dataclass
class EgressHandle:
    """What a session needs: the network to join, the environment for commands, and close()."""

    network: str
    env: dict[str, str]
    proxy: EgressProxy = field(repr=False)

    @property
    def ca_pem(self) -> str:
        """The session CA's certificate for the sandbox to trust ("" without secrets)."""
        return self.proxy.ca_pem

    async def close(self) -> None:
        await asyncio.to_thread(self.proxy.stop)


async def attach_egress(
    client: docker.DockerClient,
    allow: list[str],
    *,
    session_id: str,
    labels: dict[str, str],
    on_decision: Callable[[EgressDecision], None] | None = None,
    private_ok: bool = False,
    secrets: tuple[Injection, ...] = (),
    trust_pem: str = "",
) -> EgressHandle:
    """Create the session's internal network and proxy; raises SandboxUnavailable if it cannot.

    ``labels`` are the session's owner labels (as on its containers), so the reapers know when the
    owner is gone. ``on_decision`` is called, from a background thread, for every request
    (default: Python logging). ``secrets``: what the proxy adds to requests to their hosts,
    their upstreams verified against ``trust_pem``; the handle's ``ca_pem`` is then the session
    CA the sandbox must trust.
    """
    proxy = EgressProxy(client, allow, session_id=session_id, labels=labels,
                        on_decision=on_decision or _log_decision, private_ok=private_ok,
                        secrets=secrets, trust_pem=trust_pem)
    await asyncio.to_thread(proxy.start)
    return EgressHandle(network=proxy.network, env=proxy.env, proxy=proxy)


def reap_networks(client: docker.DockerClient, *, everything: bool = False) -> list[tuple[str, str]]:
    """Remove sandloop networks whose owner is dead or whose expiry passed (or all of them).

    Call it after ``reap``: a network still has the dead owner's containers attached until then.
    Returns (network name, reason) for each one removed.
    """
    removed = []
    for row in client.api.networks(filters={"label": LABEL}):
        labels = row.get("Labels") or {}
        reason = "gc --all" if everything else stale_reason(labels, "")
        if reason is None:
            continue
        try:
            client.api.remove_network(row["Id"])
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            log.warning("could not remove network %s: %s", row.get("Name"), exc.explanation or exc)
            continue
        removed.append((str(row.get("Name")), reason))
    return removed
