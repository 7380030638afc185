"""The proxy's secret handling as pure functions: the request head it sends, the masking of echoes."""

from __future__ import annotations

import pytest

from sandbox.egress_inject import Masker, Rejected, Secret, rewrite_head

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
