"""A secret's tunnel against requests and responses written to slip past it.

The proxy's real injector ends TLS with a certificate of a real session CA; behind it a real TLS
server on 127.0.0.1 (the test CA's certificate for api.test) records the bytes it receives and
answers with bytes the test scripts. The sandbox's side is a TLS client that trusts the session
CA only. Every case checks what the server received and what the client read: the secret sent
once, in the proxy's header, to the tunnel's host, and never readable by the client.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox.egress_inject import INFLATE_STEP, Injector, ResponseGuard, Secret
from sandbox.session_ca import SessionCA
from tests.egress.https_world import make_pki

TOKEN = "s3cr3t-T0KEN-value-0123456789"
HOST = "api.test"


@dataclass
class Upstream:
    """A real TLS server on 127.0.0.1: what each connection sent, and a scripted answer."""

    port: int
    answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    received: list[bytes] = field(default_factory=list)


@dataclass
class Tunnel:
    upstream: Upstream
    injector: Injector
    secret: Secret
    client_ctx: ssl.SSLContext
    injected: list[str] = field(default_factory=list)

    def exchange(self, request: bytes) -> bytes:
        """One tunnel: ``request`` sent by the sandbox, all it reads back until the end."""
        mine, proxys = socket.socketpair()
        tls_up = self.injector.open_upstream(socket.create_connection(("127.0.0.1", self.upstream.port)),
                                             self.secret)
        proxy = threading.Thread(target=self._serve, args=(proxys, tls_up), daemon=True)
        proxy.start()
        out = b""
        with self.client_ctx.wrap_socket(mine, server_hostname=HOST) as tls:
            tls.settimeout(10)
            tls.sendall(request)
            with contextlib.suppress(OSError):
                while chunk := tls.recv(65536):
                    out += chunk
        proxy.join(10)
        return out

    def _serve(self, sock: socket.socket, tls_up: ssl.SSLSocket) -> None:
        with sock, tls_up:
            self.injector.serve(sock, tls_up, self.secret, self.injected.append, 5)


@pytest.fixture
def tunnel(tmp_path: Path) -> Iterator[Tunnel]:
    pki = make_pki()
    (tmp_path / "server.pem").write_text(pki.cert_pem + pki.key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    upstream = Upstream(listener.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue  # a look at `stop` (closing the listener does not end a waiting accept)
            except OSError:
                return
            conn.settimeout(None)
            with contextlib.suppress(OSError), server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.settimeout(0.3)
                data = b""
                with contextlib.suppress(OSError):  # read until the proxy has sent all (a short quiet)
                    while chunk := tls.recv(65536):
                        data += chunk
                if data:  # a tunnel the proxy refused opens and closes with nothing sent
                    upstream.received.append(data)
                tls.sendall(upstream.answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ca = SessionCA([HOST])
    leaf = ca.issue(HOST)
    secret = Secret("api", HOST, upstream.port, "Authorization", f"Bearer {TOKEN}", (TOKEN,))
    injector = Injector({"certs": {HOST: [leaf.cert_pem, leaf.key_pem]}, "trust": pki.ca_pem})
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem)
    yield Tunnel(upstream, injector, secret, client_ctx)
    stop.set()
    thread.join(5)
    listener.close()


def _sent_upstream(tunnel: Tunnel) -> bytes:
    assert tunnel.upstream.received, "nothing reached the server"
    return b"".join(tunnel.upstream.received)


def _auth_lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\r\n") if line.lower().startswith(b"authorization")]


@pytest.mark.parametrize("spelling", [b"authorization", b"AUTHORIZATION", b"AuThOrIzAtIoN", b"Authorization "])
def test_the_sandboxs_own_header_in_any_case_or_twice_is_replaced(tunnel: Tunnel, spelling: bytes) -> None:
    head = (b"GET / HTTP/1.1\r\nHost: api.test\r\n" + spelling + b": Bearer guess\r\n"
            b"Authorization: Basic Z3Vlc3M6Z3Vlc3M=\r\n\r\n")
    assert tunnel.exchange(head).startswith(b"HTTP/1.1 200")
    assert _auth_lines(_sent_upstream(tunnel)) == [f"Authorization: Bearer {TOKEN}".encode()]


def test_a_folded_continuation_of_the_secrets_header_is_refused(tunnel: Tunnel) -> None:
    """An obsolete line fold would glue the sandbox's text onto a header the proxy kept."""
    head = b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer guess\r\n  more\r\n\r\n"
    out = tunnel.exchange(head)
    assert out.startswith(b"HTTP/1.1 400") and not tunnel.upstream.received and not tunnel.injected


@pytest.mark.parametrize("hidden", [b"X-A: b\rAuthorization: Bearer guess", b"X-A: b\nAuthorization: Bearer guess",
                                    b"X-A: b\0Authorization: Bearer guess"])
def test_a_header_hidden_behind_a_bare_line_break_is_refused(tunnel: Tunnel, hidden: bytes) -> None:
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n" + hidden + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and not tunnel.upstream.received and not tunnel.injected


@pytest.mark.parametrize("host", [b"API.TEST", b"api.test:{port}", b"Api.Test:{port}", b"api.test.",
                                  b"API.test.:{port}"])
def test_the_host_in_any_case_or_with_its_port_passes(tunnel: Tunnel, host: bytes) -> None:
    host = host.replace(b"{port}", str(tunnel.upstream.port).encode())
    assert tunnel.exchange(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert TOKEN.encode() in _sent_upstream(tunnel)


@pytest.mark.parametrize("host", [b"api.test:1", b"api.test..", b"api.test.:1", b"api.test.evil", b"evil.test",
                                  b"api.test@evil.test", b"api.test\tx", b"", b"api.test, evil.test"])
def test_a_host_that_is_not_the_tunnels_is_refused(tunnel: Tunnel, host: bytes) -> None:
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 4") and not tunnel.upstream.received and not tunnel.injected


@pytest.mark.parametrize("line", [b"GET https://evil.test/ HTTP/1.1", b"GET https://api.test/ HTTP/1.1",
                                  b"CONNECT evil.test:443 HTTP/1.1", b"GET * HTTP/1.1", b"GET / HTTP/1.1 x"])
def test_a_request_line_not_in_origin_form_is_refused(tunnel: Tunnel, line: bytes) -> None:
    out = tunnel.exchange(line + b"\r\nHost: api.test\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 4") and not tunnel.upstream.received


def test_a_pipelined_second_request_never_reaches_the_server(tunnel: Tunnel) -> None:
    """The proxy checks one request head per tunnel: a second one in the same bytes (after a
    body it framed) is not sent on, whatever Host it names."""
    first = b"POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\n\r\nhello"
    second = b"GET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    assert tunnel.exchange(first + second).startswith(b"HTTP/1.1 200")
    sent = _sent_upstream(tunnel)
    assert sent.endswith(b"\r\n\r\nhello") and b"/b" not in sent and b"evil" not in sent
    assert tunnel.injected == ["POST"]


def test_a_chunked_body_is_passed_whole_and_nothing_after_it(tunnel: Tunnel) -> None:
    body = b"5\r\nhello\r\n4;ext=1\r\n abc\r\n0\r\nX-Trailer: t\r\n\r\n"
    request = b"POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    assert tunnel.exchange(request + b"GET /next HTTP/1.1\r\nHost: evil.test\r\n\r\n").startswith(b"HTTP/1.1 200")
    sent = _sent_upstream(tunnel)
    assert sent.endswith(b"\r\n\r\n" + body) and b"/next" not in sent


@pytest.mark.parametrize("framing", [
    b"Content-Length: 5\r\nTransfer-Encoding: chunked",       # both: the classic smuggling pair
    b"Content-Length: 5\r\nContent-Length: 6",                 # two lengths
    b"Content-Length: -1",
    b"Content-Length: 5, 5",
    b"Transfer-Encoding: gzip, chunked",                        # a coding the proxy cannot frame
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
])
def test_a_body_the_proxy_cannot_frame_is_refused(tunnel: Tunnel, framing: bytes) -> None:
    out = tunnel.exchange(b"POST / HTTP/1.1\r\nHost: api.test\r\n" + framing + b"\r\n\r\nhello")
    assert out.startswith(b"HTTP/1.1 400") and not tunnel.upstream.received and not tunnel.injected


@pytest.mark.parametrize("header", [b"Set-Cookie: s={v}; Path=/", b"Location: https://api.test/?t={v}",
                                    b'WWW-Authenticate: Bearer error="invalid", token="{v}"'])
def test_an_echo_in_a_response_header_is_masked(tunnel: Tunnel, header: bytes) -> None:
    tunnel.upstream.answer = (b"HTTP/1.1 302 Found\r\n" + header.replace(b"{v}", TOKEN.encode())
                              + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 302") and TOKEN.encode() not in out and b"*" * len(TOKEN) in out


def test_an_echo_split_across_chunks_is_masked(tunnel: Tunnel) -> None:
    half = len(TOKEN) // 2
    a, b = TOKEN[:half].encode(), TOKEN[half:].encode()
    body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(a), a, len(b), b)
    tunnel.upstream.answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"\r\n\r\n" + b"*" * len(TOKEN)), out
    assert b"transfer-encoding" not in out.lower()  # sent decoded, to the connection's end


def test_an_echo_gzip_encoded_despite_the_request_is_masked(tunnel: Tunnel) -> None:
    body = gzip.compress(f"you sent: Bearer {TOKEN}".encode())
    tunnel.upstream.answer = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n" % len(body)) + body
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    assert b"Accept-Encoding: identity" in _sent_upstream(tunnel)
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"\r\n\r\nyou sent: Bearer " + b"*" * len(TOKEN)), out
    assert b"content-encoding" not in out.lower() and b"content-length" not in out.lower()


def test_a_compression_bomb_is_inflated_a_bounded_step_at_a_time_and_its_echo_masked(tunnel: Tunnel) -> None:
    # 32 MiB of zeros and the token: about 32 KiB on the wire. Inflated at once it would be one
    # 32 MiB buffer in the proxy; in steps it reaches the sandbox whole, masked where it ends.
    size = 32 << 20
    body = gzip.compress(b"\0" * size + TOKEN.encode(), compresslevel=9)
    assert len(body) < 64 << 10
    tunnel.upstream.answer = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n" % len(body)) + body
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    head, got = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and len(got) == size + len(TOKEN)
    assert got.endswith(b"*" * len(TOKEN)) and got.count(b"\0") == size


def test_each_step_of_an_inflated_answer_is_bounded() -> None:
    guard = ResponseGuard([TOKEN], "GET")
    body = gzip.compress(b"x" * (8 << 20), compresslevel=9)
    steps = [guard.feed(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + body)]
    while more := guard.pending():
        steps.append(more)
    assert max(len(step) for step in steps[1:]) <= INFLATE_STEP
    assert len(steps) >= (8 << 20) // INFLATE_STEP
    assert sum(len(step) for step in steps) + len(guard.flush()) > 8 << 20


def test_a_coding_the_proxy_cannot_read_is_a_502(tunnel: Tunnel) -> None:
    tunnel.upstream.answer = (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 4\r\n"
                              b"Connection: close\r\n\r\n\x8b\x01\x80\x03")
    out = tunnel.exchange(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 502") and b"content coding 'br'" in out and b"\x8b" not in out


def test_an_interim_answer_passes_and_the_final_one_is_still_decoded(tunnel: Tunnel) -> None:
    tunnel.upstream.answer = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                              b"Connection: close\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(TOKEN), TOKEN.encode()))
    out = tunnel.exchange(b"POST / HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi")
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"), out
    assert out.endswith(b"\r\n\r\n" + b"*" * len(TOKEN)) and TOKEN.encode() not in out


def test_the_secret_is_for_its_host_and_port_only(tunnel: Tunnel) -> None:
    port = tunnel.upstream.port
    assert tunnel.injector.secret_for(HOST, port) is None  # this injector was given certificates only
    injector = Injector({"secrets": [{"name": "api", "host": HOST, "port": port, "header": "Authorization",
                                      "value": f"Bearer {TOKEN}"}]})
    assert injector.secret_for(HOST, port) is not None
    assert [injector.secret_for(h, p) for h, p in ((HOST, port + 1), (HOST, 443), ("other.test", port))] == [None] * 3
