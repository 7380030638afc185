"""``[secrets]`` end to end: a real session, its real proxy, a real HTTPS server with its own CA.

The proxy adds the token to requests to api.test:8443 only; other.test on the same server gets
a plain tunnel (and the server's own certificate); a redirect from api.test to other.test
arrives without it; a server the host's trust store cannot verify never receives it; an echo
comes back masked; and no file, environment or command line in the sandbox holds it, nor the
containers' configuration, nor a recorded decision.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.docker import DockerConfig, DockerSession
from sandbox.egress import EgressDecision
from sandbox.injection import SecretSpec
from sandloop.errors import ConfigError
from tests.egress import https_world
from tests.egress.https_world import PORT, UNTRUSTED_PORT

pytestmark = [pytest.mark.docker]

ENV = "SANDLOOP_TEST_SECRET_TOKEN"



@dataclass
class World:
    session: DockerSession
    token: str
    decisions: list[EgressDecision]
    client: docker.DockerClient


@pytest.fixture
async def world(docker_client: docker.DockerClient, user_workspace: Path, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    target, token = https_world.serve(docker_client, tmp_path, monkeypatch.setenv, ENV, "sectest")
    decisions: list[EgressDecision] = []
    config = DockerConfig(
        network_allow=(f"api.test:{PORT}", f"other.test:{PORT}", f"untrusted.test:{UNTRUSTED_PORT}"),
        network_private_ok=True,  # the server is a container on a private bridge address
        secrets=(SecretSpec("api", "api.test", PORT, env=ENV),
                 SecretSpec("untrusted", "untrusted.test", UNTRUSTED_PORT, env=ENV)),
        on_egress=decisions.append)
    try:
        session = await DockerSession.create(user_workspace, config, client=docker_client, reap_stale=False)
        async with session:
            assert session.egress is not None and session.egress.proxy.container_id is not None
            https_world.connect(docker_client, target, session.egress.proxy.container_id)
            yield World(session, token, decisions, docker_client)
    finally:
        https_world.stop_target(docker_client, target)


async def _curl(session: DockerSession, args: str) -> tuple[int | None, str, str]:
    result = await session.run(f"curl -sS --max-time 30 {args}", timeout_s=60)
    return result.exit_code, result.stdout.text, result.stderr.text


async def test_the_secret_reaches_its_host_only(world: World) -> None:
    session = world.session
    code, out, err = await _curl(session, f"https://api.test:{PORT}/check")
    assert code == 0, err
    assert json.loads(out) == {"host": f"api.test:{PORT}", "present": True, "ok": True, "encoding": "identity"}

    # A header of the secret's name sent by the sandbox is replaced, not added beside it.
    code, out, err = await _curl(session, f"-H 'Authorization: Bearer guess' https://api.test:{PORT}/check")
    assert code == 0 and json.loads(out)["ok"] is True, err

    # Another host on the same server: a plain tunnel, the server's own certificate, no secret.
    code, out, err = await _curl(session, f"-v https://other.test:{PORT}/check")
    assert code == 0, err
    assert json.loads(out) == {"host": f"other.test:{PORT}", "present": False, "ok": False, "encoding": None}
    assert "issuer: CN=sandloop test CA" in err
    code, _, err = await _curl(session, f"-v https://api.test:{PORT}/check")
    assert "issuer: CN=sandloop secrets CA" in err  # the proxy's, minted for this session

    # A redirect from the secret's host to another one arrives there without the secret.
    code, out, err = await _curl(session, f"-L https://api.test:{PORT}/redirect")
    assert code == 0, err
    assert json.loads(out)["host"] == f"other.test:{PORT}" and json.loads(out)["present"] is False

    # The tunnel is to api.test: a request in it naming another host is refused, not sent.
    code, out, err = await _curl(session, f"-H 'Host: other.test' https://api.test:{PORT}/check")
    assert code == 0 and out.startswith("sandloop egress proxy: the request's Host must be api.test"), (out, err)

    # A server the host's trust store does not vouch for never gets its secret: 502 to CONNECT.
    code, out, err = await _curl(session, f"https://untrusted.test:{UNTRUSTED_PORT}/check")
    assert code != 0 and "502" in err, err

    # The server echoes the header back: what the sandbox (and the model) reads has it masked.
    code, out, err = await _curl(session, f"https://api.test:{PORT}/echo")
    assert code == 0, err
    assert out == "you sent: Bearer " + "*" * len(world.token)

    injected = [d for d in world.decisions if d.secret]
    assert {(d.secret, d.method, d.target, d.rule) for d in injected} == {("api", "GET", f"api.test:{PORT}",
                                                                           "secrets.api")}
    refused = [d for d in world.decisions if d.target == f"untrusted.test:{UNTRUSTED_PORT}"]
    assert refused and not refused[0].allowed and "its secret was not sent" in refused[0].reason
    assert world.token not in repr(world.decisions)


async def test_no_command_in_the_sandbox_can_read_the_secret(world: World) -> None:
    session = world.session
    await _curl(session, f"https://api.test:{PORT}/check")  # the proxy has used it
    (session.host_workspace / "scan.py").write_text(https_world.SCAN)
    result = await session.run(https_world.scan_command(world.token), timeout_s=600)
    assert result.exit_code == 0, result.stderr.text
    scan: dict[str, Any] = json.loads(result.stdout.text)
    assert scan["hits"] == [] and scan["files"] > 1000 and scan["procs"] > 2, scan

    # Nor the engine's view of either container (a command line or an environment there would
    # be one `docker inspect` away from anyone with the engine).
    api = world.client.api
    assert session.container is not None and session.egress is not None
    for container in (session.container.id, session.egress.proxy.container_id):
        config = api.inspect_container(container)["Config"]
        assert world.token not in json.dumps(config)
    # The session trusts its CA through its own bundle, which holds certificates only.
    bundle = Path(session.config.ca_bundle or "")
    assert "PRIVATE KEY" not in bundle.read_text() and world.token not in bundle.read_text()


async def test_a_missing_secret_is_one_line_naming_it(docker_client: docker.DockerClient, user_workspace: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    config = DockerConfig(network_allow=(f"api.test:{PORT}",),
                          secrets=(SecretSpec("api", "api.test", PORT, env=ENV),))
    mine = {"label": f"sandloop.owner_pid={os.getpid()}"}
    before = {c["Id"] for c in docker_client.api.containers(all=True, filters=mine)}
    with pytest.raises(ConfigError) as caught:
        await DockerSession.create(user_workspace, config, client=docker_client, reap_stale=False)
    assert str(caught.value) == f"secret 'api': the environment variable {ENV} is not set"
    # Read before anything starts: no proxy, no network, no container was made for it.
    assert {c["Id"] for c in docker_client.api.containers(all=True, filters=mine)} == before
    assert not [n for n in docker_client.api.networks(filters=mine) if n["Name"].startswith("sandloop-egress-")]
    config = DockerConfig(network_allow=(f"api.test:{PORT}",),
                          secrets=(SecretSpec("api", "api.test", PORT, file="/nonexistent/token"),))
    with pytest.raises(ConfigError, match=r"^secret 'api': cannot read /nonexistent/token \(No such file"):
        await DockerSession.create(user_workspace, config, client=docker_client, reap_stale=False)
