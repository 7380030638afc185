"""A certificate authority per session, made on the host, for the hosts the proxy adds secrets to.

To add a header to an HTTPS request the proxy must see the request, so for a listed secret's
host (and only those) it ends the sandbox's TLS itself, with a certificate this CA issued. The
CA lives for one session: its certificate is trusted inside that session's sandbox only, its
private key never leaves this process's memory (not written anywhere, not sent to the proxy),
and a name constraint limits it to the listed hosts, so even a stolen certificate of it vouches
for nothing else. The proxy gets one certificate and key per listed host.

ECDSA P-256 keys: a handshake costs a fraction of what RSA's does, which is most of what the
proxy adds to a request.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandloop.matching import ip_literal

__all__ = ["LeafCert", "SessionCA"]

#: Longer than any session may live (sandbox.lifecycle's maximum is a day).
VALIDITY = datetime.timedelta(days=2)
#: Clocks inside containers are the host's, but a client may check against a skewed one.
BACKDATE = datetime.timedelta(minutes=10)


@dataclass(frozen=True)
class LeafCert:
    host: str
    cert_pem: str
    key_pem: str = field(repr=False)


def _general_name(host: str) -> x509.GeneralName:
    address = ip_literal(host)
    return x509.IPAddress(ipaddress.ip_address(address)) if address is not None else x509.DNSName(host)


def _subtree(host: str) -> x509.GeneralName:
    address = ip_literal(host)
    if address is None:
        return x509.DNSName(host)
    return x509.IPAddress(ipaddress.ip_network(address))  # the one address, as a /32 or /128


class SessionCA:
    """One session's CA, constrained to ``hosts``; :meth:`issue` makes each host's certificate."""

    def __init__(self, hosts: list[str], *, label: str = "session") -> None:
        self.hosts = list(dict.fromkeys(hosts))
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._not_before, self._not_after = now - BACKDATE, now + VALIDITY
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sandloop secrets CA ({label})")])
        self._name = name
        dns = [_subtree(h) for h in self.hosts if ip_literal(h) is None]
        ips = [_subtree(h) for h in self.hosts if ip_literal(h) is not None]
        public = self._key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.NameConstraints(permitted_subtrees=[*dns, *ips] or None, excluded_subtrees=None),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        self._ski = x509.SubjectKeyIdentifier.from_public_key(public)

    def issue(self, host: str) -> LeafCert:
        if host not in self.hosts:
            raise ValueError(f"{host} is not one of this CA's hosts")
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self._name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ski), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        return LeafCert(host, cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem)
