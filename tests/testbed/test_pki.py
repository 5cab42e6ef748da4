"""geryon.testbed.pki: a server certificate verifies for its IPs and not for others; a client
certificate is for client auth only; keys are private (0600)."""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from geryon.testbed.pki import Authority


def test_server_and_client_certificates(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.issue("etcd", server=True, ips=["10.77.0.4"])
    client = ca.issue("task", server=False)
    cert = x509.load_pem_x509_certificate(Path(server.cert).read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.77.0.4"}
    usage = x509.load_pem_x509_certificate(Path(client.cert).read_bytes()).extensions
    eku = usage.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # Both load as a chain with their keys, and chain to the CA.
    for pem in (server, client):
        ssl.create_default_context(cafile=ca.pem.cert).load_cert_chain(pem.cert, pem.key)
        assert Path(pem.key).stat().st_mode & 0o777 == 0o600
