"""The proxy's decisions as pure functions, and its refusals over a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from sandbox.egress_proxy import Handler, Refused, Server, _forbidden, check, normalize_host
from sandloop.matching import HostEntry, host_entry, match_host

ALLOW = ["pkgs.example.test", "*.mirror.example.test", "10.1.2.3"]


def entries(texts: list[str]) -> list[HostEntry]:
    return [host_entry(t) for t in texts]


def matching_entry(allow: list[str], host: str, port: int = 443) -> str | None:
    entry = match_host(entries(allow), host, port)
    return None if entry is None else str(entry)


@pytest.mark.parametrize(
    ("host", "entry"),
    [
        ("pkgs.example.test", "pkgs.example.test"),
        ("files.mirror.example.test", "*.mirror.example.test"),
        ("a.b.mirror.example.test", "*.mirror.example.test"),
        ("10.1.2.3", "10.1.2.3"),
        ("mirror.example.test", None),  # *.x is the names under x, as in policies.engine
        ("evilmirror.example.test", None),
        ("pkgs.example.test.evil.com", None),
        ("sub.pkgs.example.test", None),
        ("10.1.2.4", None),
    ],
)
def test_matching_entry(host: str, entry: str | None) -> None:
    assert matching_entry(ALLOW, host) == entry


def test_star_opens_names_but_never_addresses() -> None:
    assert matching_entry(["*"], "anything.example") == "*"
    assert matching_entry(["*"], "192.168.1.1") is None
    assert matching_entry(["*", "*.1"], "::1") is None
    assert matching_entry(["*.0.0.1"], "127.0.0.1") is None  # a wildcard never reads an address as a name


def test_refusal_names_the_rule_and_the_list() -> None:
    with pytest.raises(Refused) as info:
        check(entries(ALLOW), "evil.example", 443)
    assert info.value.status == 403
    assert info.value.reason == (
        "refused by policy rule shell.network: evil.example:443 matches none of: "
        "pkgs.example.test, *.mirror.example.test, 10.1.2.3"
    )
    with pytest.raises(Refused, match="addresses are reached only when listed exactly"):
        check(entries(["*"]), "172.17.0.1", 443)


def test_normalize_host() -> None:
    assert normalize_host("Pkgs.Example.Test.") == "pkgs.example.test"
    assert normalize_host("[::1]") == "::1"
    for bad in ("", "a b", "evil.com/x", "a..b", "-x.com"):
        with pytest.raises(Refused) as info:
            normalize_host(bad)
        assert info.value.status == 400


@pytest.mark.parametrize(
    ("addr", "kind"),
    [("127.0.0.1", "loopback"), ("::1", "loopback"), ("169.254.169.254", "link-local"),
     ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"), ("224.0.0.1", "multicast"),
     ("fe80::1%eth0", "link-local"), ("172.17.0.1", "not a public address"),
     ("10.0.0.1", "not a public address"), ("100.100.100.200", "not a public address"),
     ("::ffff:192.168.1.1", "not a public address"), ("93.184.215.14", None)],
)
def test_forbidden_addresses(addr: str, kind: str | None) -> None:
    # (Only compared as values: no connection is made to any of these.)
    assert _forbidden(addr) == kind


@pytest.mark.parametrize("addr", ["172.18.0.2", "10.0.0.1"])
def test_private_addresses_only_when_opted_in(addr: str) -> None:
    assert _forbidden(addr, private_ok=True) is None
    assert _forbidden("127.0.0.1", private_ok=True) == "loopback"


def test_origin_form_drops_hop_by_hop_and_credentials() -> None:
    lines = ["GET http://a.test:8000/p?q=1 HTTP/1.1", "Host: elsewhere.test", "Proxy-Authorization: Basic eA==",
             "Connection: keep-alive", "Accept: */*"]
    out = Handler._origin_form(lines, "HTTP/1.1", "/p", "q=1", "a.test:8000").decode()
    assert out == "GET /p?q=1 HTTP/1.1\r\nHost: a.test:8000\r\nAccept: */*\r\nConnection: close\r\n\r\n"


@pytest.fixture
def proxy(capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[int, pytest.CaptureFixture[str]]]:
    server = Server(0, entries(["localhost", "allowed.test"]), bind="127.0.0.1")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1], capsys
    server.shutdown()
    server.server_close()
    thread.join()


def _ask(port: int, request: bytes) -> tuple[int, dict[str, str], str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body.decode()


def test_server_refuses_unlisted_hosts_and_logs_the_decision(proxy: tuple[int, pytest.CaptureFixture[str]]) -> None:
    port, capsys = proxy
    status, headers, body = _ask(port, b"CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n")
    assert status == 403
    assert headers["X-Sandloop-Rule"] == "shell.network"
    assert body == "sandloop egress proxy: refused by policy rule shell.network: blocked.test:443 matches none of: " \
        "localhost, allowed.test\n"
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events == [{"event": "decision", "allowed": False, "method": "CONNECT", "target": "blocked.test:443",
                       "rule": "shell.network", "reason": body.removeprefix("sandloop egress proxy: ").rstrip(),
                       "client": "127.0.0.1"}]


def test_server_never_follows_a_listed_name_to_loopback(proxy: tuple[int, pytest.CaptureFixture[str]]) -> None:
    # localhost is listed, but loopback inside the proxy container is only the proxy itself.
    port, _ = proxy
    status, headers, body = _ask(port, f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 403
    assert headers["X-Sandloop-Rule"] == "egress.address"
    assert "(loopback), which the proxy never connects to" in body


@pytest.mark.parametrize(
    "request_line",
    [b"GET https://allowed.test/ HTTP/1.1", b"GET /relative HTTP/1.1", b"CONNECT allowed.test:x HTTP/1.1",
     b"hello"],
)
def test_server_rejects_malformed_requests(proxy: tuple[int, pytest.CaptureFixture[str]], request_line: bytes) -> None:
    port, _ = proxy
    status, headers, _ = _ask(port, request_line + b"\r\n\r\n")
    assert status == 400
    assert headers["X-Sandloop-Rule"] == "egress.request"


def test_server_serves_only_its_clients(capsys: pytest.CaptureFixture[str]) -> None:
    server = Server(0, entries(["allowed.test"]), bind="127.0.0.1", clients=["10.9.0.0/16"])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as sock:
            sock.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
            assert sock.recv(4096) == b""
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    event = json.loads(capsys.readouterr().out)
    assert (event["allowed"], event["rule"], event["client"]) == (False, "egress.client", "127.0.0.1")
