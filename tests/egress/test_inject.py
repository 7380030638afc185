"""The proxy's secret handling: the request head it sends, the masking of echoes, and its upstream TLS
(verified, resumed) against a real server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path

import pytest

from sandbox.egress_inject import Injector, Masker, Rejected, Secret, rewrite_head
from tests.egress.https_world import make_pki

SECRET = Secret("api", "api.test", 443, "Authorization", "Bearer tok", ("tok",))


def test_the_head_gets_the_secret_and_loses_what_the_sandbox_said_in_its_place() -> None:
    head = (b"GET /x?y=1 HTTP/1.1\r\nHost: api.test\r\nauthorization: Bearer guess\r\nAccept-Encoding: gzip\r\n"
            b"Connection: keep-alive\r\nProxy-Authorization: p\r\nAccept: */*")
    assert rewrite_head(head, SECRET) == (
        b"GET /x?y=1 HTTP/1.1\r\nHost: api.test\r\nAccept: */*\r\nAuthorization: Bearer tok\r\n"
        b"Accept-Encoding: identity\r\nConnection: close\r\n\r\n")
    with_port = b"GET / HTTP/1.1\r\nHost: api.test:443"
    assert rewrite_head(with_port, SECRET).startswith(with_port)


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nHost: other.test",               # another host inside api.test's tunnel
    b"GET / HTTP/1.1\r\nHost: api.test:8443",            # another port
    b"GET / HTTP/1.1\r\nHost: api.test\r\nHost: other.test",
    b"GET / HTTP/1.1",
    b"GET http://other.test/ HTTP/1.1\r\nHost: api.test",
    b"PRI * HTTP/2.0",
])
def test_a_request_not_for_the_tunnels_host_is_refused(head: bytes) -> None:
    with pytest.raises(Rejected):
        rewrite_head(head, SECRET)


def test_masking_finds_every_form_across_any_cut() -> None:
    text = b"a tok b dG9r c tok"
    for size in range(1, len(text) + 1):
        masker = Masker(["tok", "dG9r"])
        out = b"".join(masker.feed(text[i:i + size]) for i in range(0, len(text), size)) + masker.flush()
        assert out == b"a *** b **** c ***", size


def test_the_upstream_is_verified_and_its_session_resumed(tmp_path: Path) -> None:
    """Against a real TLS server on 127.0.0.1 with the test CA: the second tunnel resumes the
    first one's session; a server the trust store does not hold is refused."""
    pki = make_pki(("127.0.0.1",))
    (tmp_path / "cert.pem").write_text(pki.cert_pem + pki.key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "cert.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            with contextlib.suppress(OSError), server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hi")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    secret = Secret("api", "127.0.0.1", port, "Authorization", "Bearer tok")
    injector = Injector({"trust": pki.ca_pem})
    reused = []
    for _ in range(2):
        with injector.open_upstream(socket.create_connection(("127.0.0.1", port)), secret) as tls:
            assert tls.recv(16) == b"hi"
            tls.recv(16)  # the end: the session ticket has arrived by now
            reused.append(tls.session_reused)
            injector.keep_session(tls, secret)
    assert reused == [False, True]
    stranger = Injector({"trust": make_pki().ca_pem})  # another CA: the server is not vouched for
    with pytest.raises(ssl.SSLCertVerificationError):
        stranger.open_upstream(socket.create_connection(("127.0.0.1", port)), secret)
    thread.join(10)
    listener.close()
