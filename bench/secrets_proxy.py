"""Benchmark (not a test): a small HTTPS request through the secret-adding proxy vs a plain tunnel.

One session, its real egress proxy, and the HTTPS server of ``tests/egress/https_world.py``
(its own test CA, in a container the proxy is joined to). From inside the sandbox, interleaved
rounds (the order reversed every other round), each a new connection as a client without
keep-alive makes it — ``CONNECT``, TLS, ``GET``, a 60-byte JSON answer:

* ``plain tunnel``: ``other.test``, a blind ``CONNECT`` tunnel: the baseline;
* ``secret``: ``api.test``, where the proxy ends TLS with its session certificate, verifies the
  server, adds the header and masks the answer.

Target: secret / plain tunnel ≤ 1.3× (median). The difference is the proxy's second TLS
handshake (it is a client of the server and a server to the sandbox) and the request head it reads.

Named ``secrets_proxy`` rather than ``secrets``: run as a script, its folder comes first on the
path, where ``secrets.py`` would hide the standard library's module of that name.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))
sys.path.insert(1, str(_HERE))

import docker  # noqa: E402
from report import judge, median, rounds, scratch_dir, spread  # noqa: E402

from sandbox.docker import DockerConfig, DockerSession  # noqa: E402
from sandbox.injection import SecretSpec  # noqa: E402
from tests.egress import https_world  # noqa: E402
from tests.egress.https_world import PORT  # noqa: E402

ENV = "SANDLOOP_BENCH_SECRET"

CLIENT = r'''
import json, ssl, sys, time, urllib.request
rounds = int(sys.argv[1])
opener = urllib.request.build_opener(urllib.request.ProxyHandler(),
                                     urllib.request.HTTPSHandler(context=ssl.create_default_context()))
def once(host):
    start = time.perf_counter()
    with opener.open(f"https://{host}:8443/check", timeout=30) as r:
        body = r.read()
    took = time.perf_counter() - start
    return took, json.loads(body)
times = {"api.test": [], "other.test": []}
for host in ("api.test", "other.test"):  # warm: the first of each pays for imports and resolution
    took, answer = once(host)
    assert answer["ok"] is (host == "api.test"), answer
for n in range(rounds):
    order = ("api.test", "other.test") if n % 2 == 0 else ("other.test", "api.test")
    for host in order:
        times[host].append(once(host)[0])
print(json.dumps(times))
'''


async def main() -> None:
    client = docker.from_env()
    work = scratch_dir("sandloop-bench-secrets-")
    repo = work / "repo"
    repo.mkdir()
    (repo / "client.py").write_text(CLIENT)
    # The test CA becomes this process's trust store (SSL_CERT_FILE), for this run only.
    target, _ = https_world.serve(client, work, os.environ.__setitem__, ENV, "secbench")
    config = DockerConfig(network_allow=(f"api.test:{PORT}", f"other.test:{PORT}"), network_private_ok=True,
                          secrets=(SecretSpec("api", "api.test", PORT, env=ENV),))
    n = rounds(60, 5)
    try:
        async with await DockerSession.create(repo, config, client=client) as session:
            assert session.egress is not None and session.egress.proxy.container_id is not None
            https_world.connect(client, target, session.egress.proxy.container_id)
            result = await session.run(f"python3 client.py {n}", timeout_s=600)
            if result.exit_code != 0:
                raise SystemExit(f"the client failed: {result.stderr.text}")
            times: dict[str, list[float]] = json.loads(result.stdout.text)
    finally:
        https_world.stop_target(client, target)
        client.close()
    secret, plain = times["api.test"], times["other.test"]
    print(f"secrets proxy: a small HTTPS request from the sandbox, a new connection each ({n} rounds)")
    print(f"  plain tunnel: {spread(plain, ' ms', 1000)}")
    print(f"  secret added: {spread(secret, ' ms', 1000)}")
    ratio = median(secret) / median(plain)
    judge("secret / plain tunnel", f"{ratio:.2f}× ({median(secret) * 1000:.1f} vs {median(plain) * 1000:.1f} ms)",
          "≤ 1.3×", ratio <= 1.3)


if __name__ == "__main__":
    asyncio.run(main())
