"""A real HTTPS server with its own test CA, in a container only a session's proxy can reach.

The server (the shell image's python3, ``http.server`` under ``ssl``) answers to ``api.test``
and ``other.test`` on 8443 with a certificate of the test CA, and to ``untrusted.test`` on 8444
with a self-signed one no trust store holds. It checks the ``Authorization`` header itself
against the token it was started with and says only whether it matched, so a response never
carries the token unless a path asks for the echo (``/echo``, for the proxy's masking).
Used by ``tests/egress/test_secrets_docker.py`` and ``bench/secrets.py``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import io
import ipaddress
import os
import secrets
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sandbox import images
from sandbox.lifecycle import owner_labels

PORT = 8443
UNTRUSTED_PORT = 8444
NAMES = ["api.test", "other.test", "untrusted.test"]

SERVER = r'''
import base64, http.server, json, os, ssl, sys, threading
TOKEN = os.environ["EXPECT"]
for name in ("CERT", "KEY", "SELF_CERT", "SELF_KEY"):
    with open(f"/tmp/{name}.pem", "w") as fh:
        fh.write(os.environ[name])

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        auth = self.headers.get("Authorization")
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", f"https://other.test:{self.server.server_port}/check")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith(("/simple/", "/files/")):  # a private package index
            if auth != f"Bearer {TOKEN}":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            wheel = os.environ["WHEEL_NAME"]
            if self.path.startswith("/simple/"):
                body = f'<html><body><a href="/files/{wheel}">{wheel}</a></body></html>'.encode()
            elif self.path == f"/files/{wheel}":
                body = base64.b64decode(os.environ["WHEEL"])
            else:
                body = b""
        elif self.path == "/echo":
            body = f"you sent: {auth}".encode()
        else:
            body = json.dumps({"host": self.headers.get("Host"), "present": auth is not None,
                               "ok": auth == f"Bearer {TOKEN}",
                               "encoding": self.headers.get("Accept-Encoding")}).encode()
        kind = "text/html" if self.path.startswith("/simple/") else "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

def serve(port, cert, key):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()

serve(int(sys.argv[1]), "/tmp/CERT.pem", "/tmp/KEY.pem")
serve(int(sys.argv[2]), "/tmp/SELF_CERT.pem", "/tmp/SELF_KEY.pem")
print("serving", flush=True)
threading.Event().wait()
'''


WHEEL_NAME = "tinypkg-1.0-py3-none-any.whl"


def tiny_wheel() -> bytes:
    """A one-module wheel (``tinypkg``) for the private index."""
    files = {
        "tinypkg/__init__.py": b"VALUE = 'from the private index'\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandloop-tests\nRoot-Is-Purelib: true\n"
                                       b"Tag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip('=')},{len(data)}\n"
        for path, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path, data in {**files, "tinypkg-1.0.dist-info/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return buf.getvalue()


@contextlib.contextmanager
def joining_proxies(client: docker.DockerClient, target: Target) -> Iterator[None]:
    """Join every egress proxy this process starts meanwhile to the server's network, as soon as
    it appears (a run or a setup starts its own; commands that need the server wait for it)."""
    stop = threading.Event()
    mine = [f"sandloop.owner_pid={os.getpid()}", "sandloop.role=egress-proxy"]

    def join() -> None:
        joined: set[str] = set()
        while not stop.wait(0.05):
            for row in client.api.containers(filters={"label": mine}):
                if row["Id"] not in joined:
                    connect(client, target, row["Id"])
                    joined.add(row["Id"])

    thread = threading.Thread(target=join, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


#: Reads every file of the container it runs in and every /proc/*/environ and cmdline it may, and
#: lists where the token is; it gets the token reversed and encoded, never as itself.
SCAN = r'''
import base64, json, os, sys
token = base64.b64decode(sys.argv[1])[::-1]  # never on a command line as itself
hits, files = [], 0
for root, dirs, names in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
    for name in names:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        files += 1
        if token in data:
            hits.append(path)
procs = 0
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for what in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            procs += 1
            if token in data:
                hits.append(f"/proc/{pid}/{what}")
print(json.dumps({"hits": hits, "files": files, "procs": procs}))
'''


def scan_command(token: str) -> str:
    """The command that runs :data:`SCAN` (saved as ``scan.py`` in the working folder) for ``token``."""
    return f"python3 scan.py {base64.b64encode(token.encode()[::-1]).decode()}"


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
          *, ca: bool, names: list[str]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n)
                                        for n in names]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    return builder.sign(signer, hashes.SHA256())


@dataclass(frozen=True)
class TestPKI:
    ca_pem: str  # what the host's trust store holds in the tests (SSL_CERT_FILE)
    cert_pem: str
    key_pem: str = ""
    self_cert_pem: str = ""
    self_key_pem: str = ""


def make_pki(addresses: tuple[str, ...] = ()) -> TestPKI:
    """The test CA and the server's certificates (``addresses``: IP literals it answers as too)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("sandloop test CA", ca_key, "sandloop test CA", ca_key, ca=True, names=[])
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert("api.test", key, "sandloop test CA", ca_key, ca=False,
                 names=["api.test", "other.test", *addresses])
    self_key = ec.generate_private_key(ec.SECP256R1())
    self_signed = _cert("untrusted.test", self_key, "untrusted.test", self_key, ca=False, names=["untrusted.test"])
    return TestPKI(_pem(ca), _pem(leaf), _key_pem(key), _pem(self_signed), _key_pem(self_key))


@dataclass(frozen=True)
class Target:
    network: str
    container_id: str


def server_env(pki: TestPKI, token: str) -> dict[str, str]:
    """What :data:`SERVER` reads from its environment."""
    return {"EXPECT": token, "CERT": pki.cert_pem, "KEY": pki.key_pem, "SELF_CERT": pki.self_cert_pem,
            "SELF_KEY": pki.self_key_pem, "WHEEL_NAME": WHEEL_NAME, "WHEEL": base64.b64encode(tiny_wheel()).decode()}


def start_target(client: docker.DockerClient, sid: str, labels: dict[str, str], pki: TestPKI, token: str) -> Target:
    """The server on a bridge network of its own (join a proxy to it with ``connect``)."""
    api = client.api
    net = f"sandloop-sectest-{sid}"
    api.create_network(net, driver="bridge", labels=labels)
    created = api.create_container(
        images.image_name("shell"), command=["python3", "-u", "-c", SERVER, str(PORT), str(UNTRUSTED_PORT)],
        name=f"sandloop-sectest-{sid}", user="65534:65534", labels=labels,
        environment=server_env(pki, token),
        host_config=api.create_host_config(network_mode=net, cap_drop=["ALL"]),
        networking_config=api.create_networking_config({net: api.create_endpoint_config(aliases=NAMES)}),
    )
    api.start(created["Id"])
    for line in api.logs(created["Id"], stream=True, follow=True):
        if b"serving" in line:
            break
    return Target(net, created["Id"])


def secret_table(name: str, variable: str) -> str:
    """A policy's ``[secrets.NAME]`` for api.test, its value in ``variable``: an internal service."""
    return f'[secrets.{name}]\nhost = "api.test"\nport = {PORT}\nenv = "{variable}"\nprivate = true\n'


def serve(client: docker.DockerClient, folder: Path, setenv: Callable[[str, str], None], token_variable: str,
          prefix: str) -> tuple[Target, str]:
    """The server started with a fresh token, which ``setenv`` puts in ``token_variable``; the
    test CA written to ``folder`` and made this host's trust store (``SSL_CERT_FILE``, as
    :func:`sandbox.ca.host_bundle` reads it). Returns the target and the token."""
    images.ensure(client, "shell")
    pki = make_pki()
    (folder / "host-trust.pem").write_text(pki.ca_pem)
    setenv("SSL_CERT_FILE", str(folder / "host-trust.pem"))
    token = f"sl-{secrets.token_hex(20)}"
    setenv(token_variable, token)
    sid = f"{prefix}{secrets.token_hex(4)}"
    return start_target(client, sid, owner_labels(sid, 600, 600), pki, token), token


def connect(client: docker.DockerClient, target: Target, container_id: str) -> None:
    client.api.connect_container_to_network(container_id, target.network)


def stop_target(client: docker.DockerClient, target: Target) -> None:
    client.api.remove_container(target.container_id, force=True, v=True)
    client.api.remove_network(target.network)
