"""The allow-list enforced against a real engine, with nothing aimed outside the project's containers.

The world: a target container (the shell image running ``http.server``) on a bridge network only
the proxy joins, answering to the aliases ``allowed.test`` and ``blocked.test``; a real
DockerSession on the session's internal network, with the proxy environment.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox import images
from sandbox.docker import DockerConfig, DockerSession
from sandbox.egress import PROXY_PORT, EgressDecision, EgressHandle, EgressProxy, attach_egress, reap_networks
from sandbox.lifecycle import LABEL, owner_labels
from sandloop.errors import SandboxUnavailable

pytestmark = [pytest.mark.docker]

PORT = 8000

PROBE = r'''
import concurrent.futures, json, os, socket, sys, urllib.error, urllib.parse, urllib.request
target_ip, target_name, port, gateway_ip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
out = {"env": os.environ.get("HTTPS_PROXY")}

def get(url):  # urllib takes the proxy from the environment, as curl and pip do
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return [r.status, r.read().decode(errors="replace")]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except OSError as e:
        return [None, repr(e)]

def tunnel(authority):  # what an https client does first; the target speaks plain HTTP inside
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
        s.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        head, rest = data.split(b"\r\n\r\n", 1)
        status = int(head.split()[1])
        if status == 200:
            s.sendall(b"GET / HTTP/1.0\r\nHost: inside\r\n\r\n")
            while chunk := s.recv(65536):
                rest += chunk
            return [status, rest.split(b"\r\n", 1)[0].decode()]
        while chunk := s.recv(65536):
            rest += chunk
        return [status, rest.decode()]

out["allowed"] = get(f"http://allowed.test:{port}/")
out["blocked"] = get(f"http://blocked.test:{port}/")
out["ip_via_proxy"] = get(f"http://{target_ip}:{port}/")
out["connect_allowed"] = tunnel(f"allowed.test:{port}")
out["connect_blocked"] = tunnel(f"blocked.test:{port}")

def direct(addr):
    try:
        socket.create_connection(addr, timeout=20).close()
        return "connected"
    except OSError as e:
        return repr(e)

def lookup(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, port)})
    except OSError as e:
        return repr(e)

# Each failure takes the resolver's or ARP's own time: run them side by side.
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    direct_target = pool.submit(direct, (target_ip, port))
    direct_gateway = pool.submit(direct, (gateway_ip, 9))
    dns = {name: pool.submit(lookup, name) for name in ["allowed.test", target_name]}
    out["direct"] = direct_target.result()
    out["gateway"] = direct_gateway.result()
    out["dns"] = {name: f.result() for name, f in dns.items()}
print(json.dumps(out))
'''


STRANGER = r'''
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20) as s:
    s.sendall(b"CONNECT allowed.test:8000 HTTP/1.1\r\n\r\n")
    print(s.recv(4096))
'''


@dataclass
class World:
    sid: str
    handle: EgressHandle
    decisions: list[EgressDecision]
    target_ip: str
    target_name: str


def _leftovers(client: docker.DockerClient, sid: str) -> list[str]:
    containers = client.api.containers(all=True, filters={"label": f"{LABEL}={sid}"})
    networks = client.api.networks(filters={"label": f"{LABEL}={sid}"})
    return [c["Names"][0] for c in containers] + [n["Name"] for n in networks]


def _start_target(client: docker.DockerClient, sid: str, labels: dict[str, str]) -> tuple[str, str, str]:
    """The target network and server; returns (network, container id, name)."""
    api = client.api
    net = f"sandloop-egtest-target-{sid}"
    api.create_network(net, driver="bridge", labels=labels)
    name = f"sandloop-egtest-target-{sid}"
    created = api.create_container(
        images.image_name("shell"),
        command=["python3", "-u", "-m", "http.server", str(PORT), "--directory", "/etc"],
        name=name,
        user="65534:65534",
        labels=labels,
        host_config=api.create_host_config(network_mode=net, read_only=True, cap_drop=["ALL"]),
        networking_config=api.create_networking_config(
            {net: api.create_endpoint_config(aliases=["allowed.test", "blocked.test"])}
        ),
    )
    api.start(created["Id"])
    # http.server says so once it listens: wait for that, not for a clock.
    for line in api.logs(created["Id"], stream=True, follow=True):
        if b"Serving HTTP" in line:
            break
    return net, created["Id"], name


@pytest.fixture(scope="module")
def world(docker_client: docker.DockerClient) -> Iterator[World]:
    images.ensure(docker_client, "shell")
    sid = f"egtest{secrets.token_hex(4)}"
    labels = owner_labels(sid, 600, 600)
    api = docker_client.api
    net, target_id, target_name = _start_target(docker_client, sid, labels)
    decisions: list[EgressDecision] = []
    handle: EgressHandle | None = None
    try:
        handle = asyncio.run(
            # The target is a container on a private bridge address, so this world opts in.
            attach_egress(docker_client, ["allowed.test"], session_id=sid, labels=labels,
                          on_decision=decisions.append, private_ok=True)
        )
        assert handle.proxy.container_id is not None
        api.connect_container_to_network(handle.proxy.container_id, net)
        target_ip = api.inspect_container(target_id)["NetworkSettings"]["Networks"][net]["IPAddress"]
        yield World(sid, handle, decisions, target_ip, target_name)
    finally:
        if handle is not None:
            asyncio.run(handle.close())
        api.remove_container(target_id, force=True, v=True)
        api.remove_network(net)
    assert _leftovers(docker_client, sid) == []


async def test_allow_list_is_enforced_from_a_real_session(
    docker_client: docker.DockerClient, world: World, user_workspace: Path
) -> None:
    (user_workspace / "probe.py").write_text(PROBE)
    config = DockerConfig(network=world.handle.network, env=world.handle.env)
    async with await DockerSession.create(user_workspace, config, client=docker_client, reap_stale=False) as session:
        gateway = docker_client.api.inspect_network(world.handle.network)["IPAM"]["Config"][0]["Gateway"]
        # Docker's resolver never answers names it cannot forward; glibc waits 2 x 5 s by default.
        # One 3 s try is still far beyond what a resolver that answers takes.
        result = await session.run(
            f"RES_OPTIONS='timeout:3 attempts:1' python3 probe.py {world.target_ip} {world.target_name} "
            f"{PORT} {gateway}", timeout_s=120
        )
    assert result.exit_code == 0, result.stderr.text
    out: dict[str, Any] = json.loads(result.stdout.text)

    assert out["env"] == world.handle.env["HTTPS_PROXY"]
    assert out["allowed"][0] == 200 and "Directory listing" in out["allowed"][1]
    assert out["blocked"] == [403, "sandloop egress proxy: refused by policy rule shell.network: "
                                    "blocked.test:8000 matches none of: allowed.test\n"]
    assert out["ip_via_proxy"][0] == 403 and "addresses are reached only when listed exactly" in out["ip_via_proxy"][1]
    assert out["connect_allowed"] == [200, "HTTP/1.0 200 OK"]
    assert out["connect_blocked"][0] == 403 and "rule shell.network" in out["connect_blocked"][1]
    # Without the proxy there is no way out: the internal network has no route, and no DNS.
    assert "No route to host" in out["direct"], out["direct"]
    # Nor to the host itself: the bridge's gateway address belongs to no one (inhibit_ipv4).
    assert "No route to host" in out["gateway"], out["gateway"]
    assert all(isinstance(v, str) and "gaierror" in v for v in out["dns"].values()), out["dns"]

    seen = {(d.allowed, d.method, d.target, d.rule) for d in world.decisions}
    assert seen >= {
        (True, "GET", f"allowed.test:{PORT}", "shell.network"),
        (False, "GET", f"blocked.test:{PORT}", "shell.network"),
        (False, "GET", f"{world.target_ip}:{PORT}", "shell.network"),
        (True, "CONNECT", f"allowed.test:{PORT}", "shell.network"),
        (False, "CONNECT", f"blocked.test:{PORT}", "shell.network"),
    }
    refused = next(d for d in world.decisions if d.target == f"blocked.test:{PORT}")
    assert refused.reason == f"refused by policy rule shell.network: blocked.test:{PORT} matches none of: allowed.test"


async def test_proxy_is_hardened_dies_with_its_owner_and_close_removes_everything(
    docker_client: docker.DockerClient,
) -> None:
    sid = f"egtest{secrets.token_hex(4)}"
    labels = owner_labels(sid, 600, 600)
    handle = await attach_egress(docker_client, [], session_id=sid, labels=labels)
    try:
        api = docker_client.api
        network = api.inspect_network(handle.network)
        assert network["Internal"] is True
        assert network["Options"] == {"com.docker.network.bridge.inhibit_ipv4": "true"}
        assert handle.proxy.container_id is not None
        attrs = api.inspect_container(handle.proxy.container_id)
        host = attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["PidsLimit"] == 128 and host["Memory"] == 64 << 20
        assert attrs["Config"]["User"] == "65534:65534"
        assert attrs["Config"]["Labels"][LABEL] == sid
        assert set(attrs["NetworkSettings"]["Networks"]) == {handle.network, "bridge"}
        assert set(handle.env) >= {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY"}

        # Another container on the default bridge finds the proxy there, but may not use it.
        bridge_ip = attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
        stranger = docker_client.containers.run(
            images.image_name("shell"), ["python3", "-c", STRANGER, bridge_ip, str(PROXY_PORT)],
            network="bridge", user="65534:65534", cap_drop=["ALL"], labels=labels, detach=True,
        )
        try:
            assert stranger.wait(timeout=60)["StatusCode"] == 0
            assert stranger.logs().decode().strip() == "b''"  # closed without a word
        finally:
            stranger.remove(force=True)

        # The owner going away ends the attach stream (as the kernel does for a killed process):
        # the proxy sees EOF on stdin, exits, and is removed by the engine: no exited proxy waits
        # for a reaper.
        assert host["AutoRemove"] is True
        sock = handle.proxy._sock
        assert sock is not None
        sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 60
        while api.containers(all=True, filters={"id": handle.proxy.container_id}):
            assert time.monotonic() < deadline, "the proxy outlived its owner's stream"
            await asyncio.sleep(0.1)
    finally:
        await handle.close()
    assert _leftovers(docker_client, sid) == []


def test_reap_networks_removes_only_networks_whose_owner_is_gone(docker_client: docker.DockerClient) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    api = docker_client.api
    sid = f"egtest{secrets.token_hex(4)}"
    gone = {**owner_labels(f"{sid}-gone", 600, 600), "sandloop.owner_pid": str(dead.pid)}
    live = owner_labels(f"{sid}-live", 600, 600)
    api.create_network(f"sandloop-egtest-{sid}-gone", internal=True, labels=gone)
    api.create_network(f"sandloop-egtest-{sid}-live", internal=True, labels=live)
    try:
        removed = dict(reap_networks(docker_client))
        assert removed.get(f"sandloop-egtest-{sid}-gone") == f"owner pid {dead.pid} is gone"
        assert f"sandloop-egtest-{sid}-live" not in removed
        assert api.networks(names=[f"sandloop-egtest-{sid}-live"])
    finally:
        for suffix in ("gone", "live"):
            if api.networks(names=[f"sandloop-egtest-{sid}-{suffix}"]):
                api.remove_network(f"sandloop-egtest-{sid}-{suffix}")
    assert _leftovers(docker_client, f"{sid}-gone") == [] and _leftovers(docker_client, f"{sid}-live") == []


def test_a_failed_start_leaves_nothing_behind(docker_client: docker.DockerClient) -> None:
    sid = f"egtest{secrets.token_hex(4)}"
    proxy = EgressProxy(docker_client, ["a.test"], session_id=sid, labels=owner_labels(sid, 600, 600),
                        image="sandloop-sandbox:no-such-tag")
    with pytest.raises(SandboxUnavailable, match="no-such-tag is not there"):
        proxy.start()
    assert _leftovers(docker_client, sid) == []
