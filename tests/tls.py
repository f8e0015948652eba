"""Certificates made by the tests (the ``cryptography`` package): a CA, a server
certificate for localhost and 127.0.0.1 signed by it, and client certificates, as PEM
files in a directory."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path  # the CA's certificate
    server_cert: Path
    server_key: Path
    directory: Path
    _ca_key: ec.EllipticCurvePrivateKey
    _ca_name: x509.Name

    def client(self, common_name: str, organization: str = "raylog tests"
               ) -> tuple[Path, Path]:
        """(certificate, key) files of a client certificate signed by the CA."""
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(name, key, self._ca_name, self._ca_key, ca=False,
                            usage=ExtendedKeyUsageOID.CLIENT_AUTH)
        return _write(self.directory, f"client-{common_name}", cert, key)


def _certificate(subject: x509.Name, key, issuer: x509.Name, issuer_key, ca: bool,
                 usage=None, names: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, stem: str, cert: x509.Certificate, key) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def make_pki(directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Pki:
    """A CA and a server certificate naming ``hosts`` (DNS names and IP addresses)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raylog test CA")])
    ca_cert = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    ca_path, _ = _write(directory, "ca", ca_cert, ca_key)
    names: list = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    server_cert = _certificate(server_name, server_key, ca_name, ca_key, ca=False,
                               usage=ExtendedKeyUsageOID.SERVER_AUTH, names=names)
    cert_path, key_path = _write(directory, "server", server_cert, server_key)
    return Pki(ca_path, cert_path, key_path, directory, ca_key, ca_name)
