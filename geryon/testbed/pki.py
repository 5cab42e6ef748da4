"""A throwaway PKI for emulated clusters and tests: a CA, and certificates it signs for a server (its IP
addresses) or a client.

The testbed's tasks live in network namespaces of their own, so a store they share (etcd) is on a
namespace's address, not on loopback, and Geryon's etcd client speaks plain http only to loopback:
the benches and tests that run etcd there use https with these certificates. Real clusters bring their
own PKI. Made with `cryptography` (the dev extra; imported when a CA is made), EC P-256 keys, valid for
a day, written as PEM files into a directory the caller owns (keys mode 0600).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as e:  # pragma: no cover - the dev extra has it
    raise ImportError(
        f"geryon.testbed.pki needs the 'cryptography' package (pip install -e '.[dev]'): {e}"
    ) from e


@dataclass(frozen=True)
class Pem:
    cert: str
    key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(directory: Path, stem: str, cert: Any, key: Any) -> Pem:
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return Pem(str(cert_path), str(key_path))


def _builder(subject: Any, issuer: Any, public_key: Any, ca: bool) -> Any:
    """A certificate of `subject` signed by `issuer`, valid from 5 minutes ago for a day."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )


class Authority:
    """A CA in `directory`; `issue` signs a server certificate (for 127.0.0.1, localhost and `ips`) or a
    client certificate."""

    def __init__(self, directory: Path, name: str = "geryon-test-ca") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            _builder(_name(name), _name(name), self.key.public_key(), ca=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip
        self.pem = _write(directory, name, self.cert, self.key)

    def issue(self, stem: str, server: bool, ips: Sequence[str] = ()) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(_name(stem), self.cert.subject, key.public_key(), ca=False).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", *ips)),
                        x509.DNSName("localhost"),
                    ]
                ),
                critical=False,
            )
        return _write(self.directory, stem, builder.sign(self.key, hashes.SHA256()), key)
